"""Searchers: greedy and beam search with a forced prefix, and the blockwise streaming beam searches."""

from __future__ import annotations

from simulst.config import SearchOptions
from simulst.search.base import Searcher
from simulst.search.beam import BeamSearch
from simulst.search.blockwise import (
    BlockwiseBeamSearch,
    ImprovedIncrementalBlockwiseBeamSearch,
    IncrementalBlockwiseBeamSearch,
)
from simulst.search.greedy import GreedySearch
from simulst.search.rewind import RewindingBeamSearch

__all__ = [
    "BeamSearch",
    "BlockwiseBeamSearch",
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


def make_searcher(options: SearchOptions) -> Searcher:
    """A fresh searcher (with empty cross-chunk state) for one stream."""
    if options.name == "beam":
        return BeamSearch(options.beam, options.length_penalty)
    if options.name in BLOCKWISE_SEARCHERS:
        searcher = BLOCKWISE_SEARCHERS[options.name]
        return searcher(options.beam, options.length_penalty, options.repetition_detection, options.carry_over)
    return GreedySearch()
