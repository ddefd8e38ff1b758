"""Registering a search: a factory from :class:`~simulst.config.SearchOptions` (and the policy's stop rule) to a
:class:`~simulst.search.base.Searcher`, under the name ``--search`` takes::

    @register_searcher("beam", help="beam search of K hypotheses", steerable=True)
    def beam(options: SearchOptions, stop: StopRule | None) -> Searcher:
        return BeamSearch(options.beam, options.length_penalty, stop, options.ctc_weight)

The CLI's help, ``simulst --list-searches``, the options' errors and :func:`~simulst.search.make_searcher` read
the registry.
"""

from __future__ import annotations

from collections.abc import Callable

from simulst.config import SEARCHES, SearchOptions, SearchSpec
from simulst.search.base import Searcher
from simulst.search.stopping import StopRule

SearcherFactory = Callable[[SearchOptions, StopRule | None], Searcher]


def register_searcher(name: str, *, help: str, steerable: bool = False) -> Callable[[SearcherFactory],
                                                                                    SearcherFactory]:
    """Decorator: register the factory as the search ``name``.

    Args:
        name: the search's name in the options and on the command line.
        help: one line for the help and ``simulst --list-searches``.
        steerable: the searcher takes a policy's stop rule and joint CTC scoring (otherwise
            :func:`~simulst.search.make_searcher` refuses them).
    """

    def decorate(factory: SearcherFactory) -> SearcherFactory:
        SEARCHES.register(name)(SearchSpec(name, help, factory, steerable))
        return factory

    return decorate
