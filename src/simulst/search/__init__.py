"""Searchers over the one search core (:mod:`simulst.search.core`): greedy and beam search with a forced prefix
(optionally with joint CTC scoring and a stop rule), and the blockwise streaming beam searches."""

from __future__ import annotations

from simulst.config import SearchOptions
from simulst.errors import OptionError
from simulst.search.base import Query, Searcher, SearchState
from simulst.search.beam import BeamSearch
from simulst.search.blockwise import (
    BlockwiseBeamSearch,
    ImprovedIncrementalBlockwiseBeamSearch,
    IncrementalBlockwiseBeamSearch,
)
from simulst.search.rewind import RewindingBeamSearch
from simulst.search.stopping import StopRule

__all__ = [
    "BeamSearch",
    "BlockwiseBeamSearch",
    "ImprovedIncrementalBlockwiseBeamSearch",
    "IncrementalBlockwiseBeamSearch",
    "Query",
    "RewindingBeamSearch",
    "SearchState",
    "Searcher",
    "make_searcher",
]

BLOCKWISE_SEARCHERS = {
    "bwbs": BlockwiseBeamSearch,
    "ibwbs": IncrementalBlockwiseBeamSearch,
    "ibwbs2": ImprovedIncrementalBlockwiseBeamSearch,
    "rewind": RewindingBeamSearch,
}


def make_searcher(options: SearchOptions, stop: StopRule | None = None) -> Searcher:
    """The searcher the options name (it holds no per-stream data: see :class:`SearchState`).

    Args:
        options: the search options.
        stop: the policy's stop rule (the CTC online policy), asked before each expansion; with joint CTC
            scoring (``options.ctc_weight > 0``) it needs greedy or beam search.
    """
    if options.name in BLOCKWISE_SEARCHERS:
        if stop is not None or options.ctc_weight > 0:
            raise OptionError(
                f"policies with a stop rule (ctc, alignatt) and joint CTC scoring work with greedy and beam search, "
                f"not {options.name}"
            )
        searcher = BLOCKWISE_SEARCHERS[options.name]
        return searcher(options.beam, options.length_penalty, options.repetition_detection, options.carry_over)
    beam = options.beam if options.name == "beam" else 1
    return BeamSearch(beam, options.length_penalty, stop, options.ctc_weight)
