"""Searchers over the one search core (:mod:`simulst.search.core`): greedy and beam search with a forced prefix
(optionally with joint CTC scoring and a stop rule), and the blockwise streaming beam searches - each registered by
name (:func:`register_searcher`) - and their factory."""

from __future__ import annotations

import dataclasses
import importlib
from typing import TYPE_CHECKING, Any

from simulst.config import SEARCHES, SearchOptions
from simulst.errors import OptionError
from simulst.search.base import Query, Searcher, SearchState
from simulst.search.registry import SearcherFactory, register_searcher
from simulst.search.stopping import StopRule

if TYPE_CHECKING:
    from simulst.search.beam import BeamSearch
    from simulst.search.blockwise import (
        BlockwiseBeamSearch,
        ChunkSearcher,
        ImprovedIncrementalBlockwiseBeamSearch,
        IncrementalBlockwiseBeamSearch,
    )
    from simulst.search.rewind import RewindingBeamSearch

_SEARCHERS = {
    "BeamSearch": "simulst.search.beam",
    "BlockwiseBeamSearch": "simulst.search.blockwise",
    "ImprovedIncrementalBlockwiseBeamSearch": "simulst.search.blockwise",
    "IncrementalBlockwiseBeamSearch": "simulst.search.blockwise",
    "RewindingBeamSearch": "simulst.search.rewind",
}
"""The searcher classes by the module that holds them, imported at their first use: the registry (its names, help
and checks) is read without loading torch - ``simulst --help`` and an option's error come at once."""


def __getattr__(name: str) -> Any:
    if name in _SEARCHERS:
        return getattr(importlib.import_module(_SEARCHERS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BeamSearch",
    "BlockwiseBeamSearch",
    "ImprovedIncrementalBlockwiseBeamSearch",
    "IncrementalBlockwiseBeamSearch",
    "Query",
    "RewindingBeamSearch",
    "SearchState",
    "Searcher",
    "make_final_searcher",
    "make_searcher",
    "register_searcher",
]


@register_searcher("greedy", steerable=True,
                   help="greedy search: one hypothesis, its most probable token at each step")
def _greedy(options: SearchOptions, stop: StopRule | None) -> Searcher:
    from simulst.search.beam import BeamSearch

    return BeamSearch(1, options.length_penalty, stop, options.ctc_weight)


@register_searcher("beam", steerable=True,
                   help="beam search of --beam K hypotheses, ranked by log-probability / length**P")
def _beam(options: SearchOptions, stop: StopRule | None) -> Searcher:
    from simulst.search.beam import BeamSearch

    return BeamSearch(options.beam, options.length_penalty, stop, options.ctc_weight)


def _blockwise(class_name: str) -> SearcherFactory:
    def build(options: SearchOptions, stop: StopRule | None) -> Searcher:
        searcher: type[ChunkSearcher] = __getattr__(class_name)
        return searcher(options.beam, options.length_penalty, options.repetition_detection, options.carry_over)

    return build


for _name, _class_name, _help in (
    ("bwbs", "BlockwiseBeamSearch", "blockwise beam search (BWBS, Tsunoo et al. 2021): all beams wait for the next "
                                    "chunk once any of them ends or repeats"),
    ("ibwbs", "IncrementalBlockwiseBeamSearch", "incremental blockwise beam search (IBWBS paper): each beam stops on "
                                                "its own; the best stopped one goes on"),
    ("ibwbs2", "ImprovedIncrementalBlockwiseBeamSearch", "improved IBWBS (2023 paper): beams also stop below the best "
                                                         "stopped score (minScore), unless seen before"),
    ("rewind", "RewindingBeamSearch", "CMU's rewinding beam step (CMU 2023): a step whose beam ends or repeats is "
                                      "undone and the beam pruned to its best"),
):
    register_searcher(_name, help=_help)(_blockwise(_class_name))


def make_searcher(options: SearchOptions, stop: StopRule | None = None) -> Searcher:
    """The searcher the options name (it holds no per-stream data: see :class:`SearchState`).

    Args:
        options: the search options.
        stop: the policy's stop rule (the CTC online policy, AlignAtt), asked before each expansion; it and joint
            CTC scoring (``options.ctc_weight > 0``) need a steerable search (greedy or beam).
    """
    spec = options.spec
    if not spec.steerable and (stop is not None or options.ctc_weight > 0):
        steerable = [entry.name for entry in SEARCHES.entries() if entry.steerable]
        raise OptionError(f"a policy's stop rule and joint CTC scoring work with "
                          f"{', '.join(steerable[:-1])} and {steerable[-1]} search, not {options.name}")
    searcher = spec.factory(options, stop)
    if not isinstance(searcher, Searcher):
        raise TypeError(f"search {options.name!r} is registered with a factory that builds no Searcher")
    return searcher


def make_final_searcher(options: SearchOptions) -> Searcher | None:
    """The searcher of the decodes committed whole (:attr:`SearchOptions.final_beam`): a beam search, or None
    where they use the chunk's own search."""
    if options.final_beam is None:
        return None
    return make_searcher(dataclasses.replace(options, name="beam", beam=options.final_beam))
