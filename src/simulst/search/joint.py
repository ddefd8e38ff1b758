"""Joint CTC/attention scoring (Watanabe et al. 2017; Polák et al., IWSLT 2023, §2.2) as a scorer of the search core.

A candidate c of hypothesis g scores (1−λ)·log p_att(c|g, X) + λ·Δ_ctc(g, c), with Δ_ctc the increment of the CTC
prefix score (:class:`~simulst.scorers.ctc_prefix.CtcPrefixScorer`; the increments telescope to
λ·log p_ctc(g…|X)). The CTC scores only the ``pre_beam`` best attention candidates of each hypothesis (ESPnet's
pre-beam). It needs a CTC head over the decoder's own vocabulary (``Encoded.ctc_labels.token_level``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from simulst.errors import OptionError
from simulst.models.base import DecoderModel, Encoded
from simulst.scorers.ctc_prefix import CtcCandidates, CtcPrefixBatch, CtcPrefixScorer
from simulst.search.core import Beam, Candidate, Scores, beam_scores


class JointCtcScores(Scores):
    """Decoder + CTC prefix scores, weight λ = ``weight`` in (0, 1].

    Raises:
        OptionError: the encoding has no CTC posteriors, or they are over another vocabulary.
    """

    def __init__(self, model: DecoderModel, enc: Encoded, prefix: Sequence[int], weight: float, pre_beam: int) -> None:
        if enc.ctc_log_probs is None or enc.ctc_labels is None:
            raise OptionError("joint CTC/attention scoring (--ctc-weight > 0) needs a model with a CTC head")
        if not enc.ctc_labels.token_level:
            raise OptionError(
                "joint CTC/attention scoring (--ctc-weight > 0) needs a CTC head over the decoder's own vocabulary; "
                "this head has another vocabulary (e.g. characters), which only the CTC policy can use (word by word)"
            )
        self.weight = weight
        self.pre_beam = pre_beam
        self.scorer = CtcPrefixScorer(blank=enc.ctc_labels.blank, eos=model.eos_id)
        self.states: CtcPrefixBatch = self.scorer.init_state(enc.ctc_log_probs, tuple(prefix))
        self.candidates: CtcCandidates | None = None

    def top(self, beams: Sequence[Beam], logp: torch.Tensor, n: int) -> list[Candidate]:
        base = beam_scores(beams, logp)
        top_att, ids = torch.topk(logp, min(self.pre_beam, logp.shape[1]), dim=1)
        delta, self.candidates = self.scorer.score(self.states, ids)
        scores = base.to(torch.float64)[:, None] + (1 - self.weight) * top_att.to(torch.float64) + self.weight * delta
        width = scores.shape[1]
        values, flat = torch.topk(scores.flatten(), min(n, scores.numel()))
        return [
            Candidate(f // width, int(ids[f // width, f % width]), v, f)
            for v, f in zip(values.tolist(), flat.tolist(), strict=True)
        ]

    def keep(self, chosen: Sequence[Candidate]) -> None:
        if self.candidates is not None:
            self.states = self.scorer.select(self.candidates, torch.tensor([c.flat for c in chosen], dtype=torch.long))
