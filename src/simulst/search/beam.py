"""Standard beam search with length normalisation and a forced prefix (the baseline BS of the papers).

All beams advance in one batched decoder call per step; the forced prefix is decoded once and its KV cache is
shared by the beams. Finished hypotheses (ending in ``<eos>``) are collected until there are ``beam`` of them
(openai/whisper's stopping rule with patience 1); if fewer finish within ``max_new_tokens``, the open beams
join them. Hypotheses are ranked by score / length**length_penalty.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from simulst.errors import OptionError
from simulst.models.base import DecoderModel, Encoded
from simulst.search.base import Searcher
from simulst.types import Costs, Hypothesis


class BeamSearch(Searcher):
    """Length-normalised beam search of width ``beam``."""

    def __init__(self, beam: int, length_penalty: float = 1.0) -> None:
        if beam < 1:
            raise OptionError(f"beam size must be >= 1, got {beam}")
        self.beam = beam
        self.length_penalty = length_penalty

    def search(
        self,
        model: DecoderModel,
        enc: Encoded,
        prefix: Sequence[int],
        max_new_tokens: int,
        costs: Costs,
        final: bool,
    ) -> list[Hypothesis]:
        n_forced = len(prefix)
        if max_new_tokens <= 0:
            return [Hypothesis(tuple(prefix), 0.0, False)]
        logp, state = model.start(enc, prefix, costs)
        beams: list[Hypothesis] = [Hypothesis(tuple(prefix), 0.0, False)]
        step_logp = logp.unsqueeze(0)  # (B, V)
        finished: list[Hypothesis] = []
        for step in range(max_new_tokens):
            scores = torch.tensor([b.score for b in beams], dtype=step_logp.dtype).unsqueeze(1) + step_logp
            vocab = scores.shape[1]
            top_scores, top_ids = torch.topk(scores.flatten(), min(2 * self.beam, scores.numel()))
            next_beams: list[Hypothesis] = []
            sources: list[int] = []
            for value, flat in zip(top_scores.tolist(), top_ids.tolist(), strict=True):
                source, token = divmod(flat, vocab)
                if token == model.eos_id:
                    finished.append(Hypothesis(beams[source].tokens, value, True))
                else:
                    next_beams.append(Hypothesis((*beams[source].tokens, token), value, False))
                    sources.append(source)
                if len(next_beams) == self.beam:
                    break
            beams = next_beams
            if len(finished) >= self.beam or step + 1 == max_new_tokens:
                break
            state = model.select(state, torch.tensor(sources))
            step_logp, state = model.step(state, torch.tensor([b.tokens[-1] for b in beams]), costs)
        pool = finished if len(finished) >= self.beam else finished + beams
        pool.sort(key=lambda h: h.normalized_score(n_forced, self.length_penalty), reverse=True)
        return pool[: self.beam]
