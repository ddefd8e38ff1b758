"""Greedy search with a forced prefix."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from simulst.models.base import DecoderModel, Encoded
from simulst.search.base import Searcher
from simulst.types import Costs, Hypothesis


class GreedySearch(Searcher):
    """Take the arg-max token until ``<eos>`` or ``max_new_tokens``."""

    def search(
        self,
        model: DecoderModel,
        enc: Encoded,
        prefix: Sequence[int],
        max_new_tokens: int,
        costs: Costs,
        final: bool,
    ) -> list[Hypothesis]:
        tokens = list(prefix)
        if max_new_tokens <= 0:
            return [Hypothesis(tuple(tokens), 0.0, False)]
        logp, state = model.start(enc, prefix, costs)
        score = 0.0
        for i in range(max_new_tokens):
            token = int(torch.argmax(logp))
            if token == model.eos_id:
                return [Hypothesis(tuple(tokens), score, True)]
            score += float(logp[token])
            tokens.append(token)
            if i + 1 == max_new_tokens:
                break  # no decoder step for a token that would never be read
            step_logp, state = model.step(state, torch.tensor([token]), costs)
            logp = step_logp[0]
        return [Hypothesis(tuple(tokens), score, False)]
