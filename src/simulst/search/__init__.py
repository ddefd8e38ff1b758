"""Searchers: greedy and beam search with a forced prefix, and the blockwise streaming beam searches."""

from __future__ import annotations

from simulst.config import PolicyOptions, SearchOptions
from simulst.errors import OptionError
from simulst.search.base import Searcher
from simulst.search.beam import BeamSearch
from simulst.search.blockwise import (
    BlockwiseBeamSearch,
    ImprovedIncrementalBlockwiseBeamSearch,
    IncrementalBlockwiseBeamSearch,
)
from simulst.search.ctc import CtcBeamSearch, CtcGreedySearch
from simulst.search.greedy import GreedySearch
from simulst.search.rewind import RewindingBeamSearch

__all__ = [
    "BeamSearch",
    "BlockwiseBeamSearch",
    "CtcBeamSearch",
    "CtcGreedySearch",
    "GreedySearch",
    "ImprovedIncrementalBlockwiseBeamSearch",
    "IncrementalBlockwiseBeamSearch",
    "RewindingBeamSearch",
    "Searcher",
    "make_searcher",
]

BLOCKWISE_SEARCHERS = {
    "bwbs": BlockwiseBeamSearch,
    "ibwbs": IncrementalBlockwiseBeamSearch,
    "ibwbs2": ImprovedIncrementalBlockwiseBeamSearch,
    "rewind": RewindingBeamSearch,
}


def make_searcher(options: SearchOptions, policy: PolicyOptions | None = None) -> Searcher:
    """A fresh searcher (with empty cross-chunk state) for one stream.

    The CTC policy (``policy.name == "ctc"``) and joint CTC/attention scoring (``options.ctc_weight > 0``) live
    in the search (:mod:`simulst.search.ctc`): greedy and beam search only.
    """
    if (policy is not None and policy.name == "ctc") or options.ctc_weight > 0:
        from simulst.policies.ctc_end import CtcEndRule

        stop = CtcEndRule(policy.ctc_threshold, policy.ctc_odds) if policy and policy.name == "ctc" else None
        if options.name == "greedy":
            return CtcGreedySearch(stop, options.ctc_weight)
        if options.name == "beam":
            return CtcBeamSearch(options.beam, options.length_penalty, stop, options.ctc_weight)
        raise OptionError(f"the CTC policy and joint CTC scoring work with greedy and beam search, not {options.name}")
    if options.name == "beam":
        return BeamSearch(options.beam, options.length_penalty)
    if options.name in BLOCKWISE_SEARCHERS:
        searcher = BLOCKWISE_SEARCHERS[options.name]
        return searcher(options.beam, options.length_penalty, options.repetition_detection, options.carry_over)
    return GreedySearch()
