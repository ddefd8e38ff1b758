"""Registries of named things - policies, searches, latency and quality metrics, resegmenters - that the modules
implementing them fill with a decorator and everything that names them reads: the option parsers and their errors,
the CLI's choices and help, ``simulst --list-policies``, the web page (SimulEval's ``@register_...`` style).

>>> SCALES: Registry[float] = Registry("scale")
>>> _ = SCALES.register("double")(2.0)
>>> SCALES.lookup("double")
2.0
>>> SCALES.lookup("triple")
Traceback (most recent call last):
...
simulst.errors.OptionError: unknown scale 'triple'; choose one of double

The registries live here, in the lowest layer, because the options that name their entries are validated here when
they are built; the implementations register from the layers above (``simulst.policies``, ``simulst.search``,
``simulst.evaluation``). So that what a registry holds never depends on what its reader happened to import, a
registry may name the package of its built-in entries (``builtins``), imported at its first read - the way plugin
entry points are loaded; nothing here uses those modules.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, ItemsView, Iterator
from typing import Generic, TypeVar

from simulst.errors import OptionError

T = TypeVar("T")


class Registry(Generic[T]):
    """Entries by name, in registration order (``name in r``, ``r[name]``, ``list(r)``: the names).

    Args:
        kind: what an entry is (``policy``, ``latency metric``), for the error messages.
        builtins: the module whose import registers the built-in entries (imported at the first read), if any.
        shown: how users write an entry in help texts and errors (default: its name; a policy: ``la-N``).
    """

    def __init__(self, kind: str, builtins: str | None = None, shown: Callable[[str, T], str] | None = None) -> None:
        self.kind = kind
        self.builtins = builtins
        self.shown = shown or (lambda name, entry: name)
        self._entries: dict[str, T] = {}
        self._loaded = builtins is None

    def register(self, name: str) -> Callable[[T], T]:
        """A decorator adding its argument under ``name``; a name is registered once (``ValueError``)."""

        def add(entry: T) -> T:
            if name in self._entries and self._entries[name] != entry:
                raise ValueError(f"a {self.kind} named {name!r} is already registered")
            self._entries[name] = entry
            return entry

        return add

    def unregister(self, name: str) -> None:
        """Remove the entry ``name`` (a test's toy entry, say); no error when there is none."""
        self._entries.pop(name, None)

    def lookup(self, name: str) -> T:
        """The entry ``name``.

        Raises:
            OptionError: no such entry; the message lists the registered ones.
        """
        entries = self._all()
        if name not in entries:
            raise OptionError(f"unknown {self.kind} {name!r}; choose one of {self.listing(', ')}")
        return entries[name]

    def __getitem__(self, name: str) -> T:
        return self._all()[name]

    def __contains__(self, name: object) -> bool:
        return name in self._all()

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._all()))

    def __len__(self) -> int:
        return len(self._all())

    def items(self) -> ItemsView[str, T]:
        """(name, entry) pairs, in registration order."""
        return self._all().items()

    def entries(self) -> tuple[T, ...]:
        """Every entry, in registration order."""
        return tuple(self._all().values())

    def names(self) -> tuple[str, ...]:
        """Every entry's name, in registration order."""
        return tuple(self._all())

    def listing(self, separator: str = " | ") -> str:
        """How users write every entry (``offline | la-N | ...``), for help texts and errors."""
        return separator.join(self.shown(name, entry) for name, entry in self._all().items())

    def _all(self) -> dict[str, T]:
        if not self._loaded and self.builtins is not None:
            self._loaded = True  # (set first: the import registers through this registry)
            try:
                importlib.import_module(self.builtins)
            except BaseException:
                self._loaded = False
                raise
        return self._entries
