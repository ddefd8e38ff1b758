"""CMU's beam search with rewinding and incremental 1-best pruning (Yan et al., IWSLT 2023, Alg. 1).

Per chunk, standard beam steps (width K, length-normalised ranking). On a non-final chunk, when a candidate the
step keeps is ``<eos>`` or a token already in its hypothesis (l. 12), the end is detected and the step rewinds
to the previous hypotheses (l. 13-14: ``newHyps = prevHyps``). On end detection the beam is pruned to the
1-best (l. 20-21), "which the next chunk continues from" (§3.2). CMU shows that 1-best, so the next chunk
continues what was shown: here the committed output (the default); with ``carry_over=True`` the stream keeps
the 1-best and force-decodes its uncommitted tokens too, in the next chunk's one parallel pass.

Where the session and the paper meet (see also :mod:`simulst.search.blockwise`):

* ``prevHyps`` are the hypotheses *before* the step that produced the current ones (the procedure takes both
  ``hyps`` and ``prevHyps``): the rewind removes the unreliable candidate and the token before it, as ESPnet's
  ``BatchBeamSearchOnline`` does ("prev hyps is 2 behind the ended hyps"); never past the chunk's start.
* The candidates checked are the K extensions the step keeps (ESPnet checks the pruned ``best``); Alg. 1 l. 4
  scores the top-p attention candidates of each hypothesis before pruning, which only matters with a CTC
  pre-beam.
* CMU shows the pruned 1-best directly; here the session's policy decides how much of it to show (hold-0 is
  CMU's setting, up to the one-token/whole-word delay the session applies).
* Repetition detection is an option (``repetition_detection``); off by default, as for the other searches on
  full-context models (see :mod:`simulst.search.blockwise`). The paper's Alg. 1 checks it always.
* Reaching the maximum length ends the chunk too (l. 15-16). Here that is the chunk's token budget (12 tokens
  per second of audio + 10), which only runaway beams reach: the step then reverts to the chunk's start, as
  ESPnet's online search reverts to its previous incremental hypothesis ("search stopped by maxlen in a non
  final chunk"), instead of pruning the runaway beams to their 1-best.
* All beams of a step have the same length, so the 1-best by raw score is also the length-normalised 1-best.
* On the final chunk (``isFinal``) there is no end detection: offline beam search from the kept hypothesis, so
  one final chunk is exactly offline beam search.
"""

from __future__ import annotations

from simulst.models.base import DecoderModel
from simulst.search.base import Query, SearchState
from simulst.search.blockwise import ChunkSearcher
from simulst.search.core import Beam, SynchronousRule, expand
from simulst.types import Costs, Hypothesis


class RewindingBeamSearch(ChunkSearcher):
    """CMU Alg. 1: rewind on ``<eos>`` / repetition candidates of a non-final chunk, then prune to the 1-best."""

    def search_block(
        self, model: DecoderModel, query: Query, state: SearchState, forced: tuple[int, ...], budget: int,
        costs: Costs,
    ) -> list[Hypothesis]:
        logp, decoder = model.start(query.enc, forced, costs, prompt=query.prompt)
        start = [Beam(forced)]
        rule = SynchronousRule(self.beam, self.repetition_detection, start)
        beams = expand(model, decoder, start, logp.unsqueeze(0), budget, costs, rule)
        best = max(beams, key=lambda b: b.score)  # l. 20-21: incremental pruning to the 1-best
        state.kept = best.tokens
        return [best.hypothesis()]
