"""Searchers: greedy and beam search with a forced prefix (blockwise searches build on them)."""

from __future__ import annotations

from simulst.config import SearchOptions
from simulst.search.base import Searcher
from simulst.search.beam import BeamSearch
from simulst.search.greedy import GreedySearch

__all__ = ["BeamSearch", "GreedySearch", "Searcher", "make_searcher"]


def make_searcher(options: SearchOptions) -> Searcher:
    """A fresh searcher (with empty cross-chunk state) for one stream."""
    if options.name == "beam":
        return BeamSearch(options.beam, options.length_penalty)
    return GreedySearch()
