"""Command-line metadata on option fields: an option's flag, help and value parser live on its dataclass field, next
to its default and its validation, and the CLI (:mod:`simulst.cli.options`) derives its arguments from the fields::

    chunk_ms: float = field(default=600.0, metadata=flag("--chunk-ms", "decode after every MS of new audio",
                                                         group=ONLINE, metavar="MS"))

A field without :func:`flag` metadata is not on the command line; a field holding another option group is either
flagged itself (``--policy``) or expanded into that group's flags with :func:`nested`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from simulst.errors import OptionError

FLAG = "simulst.flag"
"""The field metadata key of a :class:`Flag`."""
NESTED = "simulst.nested"
"""The field metadata key of a :class:`Nested`."""

# The help sections, in the order ``--help`` shows them.
MODEL = "model"
ONLINE = "onlinization"
LONG_FORM = "long-form streaming (audio of any length)"
CTC = "CTC (2023 paper §2.2-2.3; simulst.ctc)"
CASCADE = "cascade (ASR → MT → speech)"
GROUPS = (MODEL, ONLINE, LONG_FORM, CTC, CASCADE)


@dataclass(frozen=True)
class Flag:
    """How an option field is given on the command line.

    Attributes:
        name: the flag, e.g. ``--chunk-ms``; a bool field is a switch that also has ``--no-...``.
        help: what it does. ``{choices}`` in it is replaced by :attr:`listing`'s names; the CLI appends the
            default, taken from the field (or :attr:`default_help`).
        group: the help section (:data:`GROUPS`).
        metavar: the value's placeholder in the help.
        choices: the values argparse accepts (None: any).
        listing: the names a registry holds (``--policy``, ``--search``), shown in the help; the registry itself
            checks the value when the options are built, so its error lists them too.
        parse: the command-line text -> the value (None: the type of the field's default: int, float or str).
        build: the parsed value -> the field's value, applied when the options are built (``--policy``:
            ``PolicyOptions.parse``); the parsed arguments keep the text.
        refine: the built value is an option group whose own flagged fields refine it when given (``--policy
            ctc`` and ``--ctc-threshold``).
        default_help: the default as the help states it (None: the field's default).
    """

    name: str
    help: str
    group: str
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    listing: Callable[[], str] | None = None
    parse: Callable[[str], Any] | None = None
    build: Callable[[Any], Any] | None = None
    refine: bool = False
    default_help: str | None = None

    def __post_init__(self) -> None:
        if not self.name.startswith("--") or self.group not in GROUPS:
            raise ValueError(f"a flag is --name in one of the help groups, got {self.name!r} in {self.group!r}")

    @property
    def dest(self) -> str:
        """The attribute of the parsed arguments (``--chunk-ms`` -> ``chunk_ms``)."""
        return self.name[2:].replace("-", "_")

    def nested(self, within: Nested) -> Flag:
        """The flag as a nested group shows it (``mt-``: ``--search`` -> ``--mt-search``, in the group's section)."""
        return dataclasses.replace(self, name=f"--{within.prefix}{self.name[2:]}", group=within.group or self.group)


@dataclass(frozen=True)
class Nested:
    """A field holding another option group, whose flags are added in its place.

    Attributes:
        prefix: put before each of its flags (``mt-``: ``--mt-search``).
        only: the fields of the group that are flags here (None: every flagged field).
        group: the help section of its flags (None: each flag's own).
    """

    prefix: str = ""
    only: Collection[str] | None = None
    group: str | None = None


def flag(name: str, help: str, *, group: str, **details: Any) -> dict[str, Flag]:
    """Field metadata: the field is the command-line flag ``name`` (see :class:`Flag` for ``details``)."""
    return {FLAG: Flag(name, help, group, **details)}


def nested(prefix: str = "", only: Collection[str] | None = None, group: str | None = None) -> dict[str, Nested]:
    """Field metadata: the field is an option group whose flags stand in its place (see :class:`Nested`)."""
    return {NESTED: Nested(prefix, tuple(only) if only is not None else None, group)}


T = TypeVar("T")


def _optional(text: str, convert: Callable[[str], T], what: str) -> T | None:
    """``convert(text)``, or None for ``none`` / ``off``; raises ``OptionError`` naming ``what`` was expected."""
    if text.strip().lower() in ("none", "off"):
        return None
    try:
        return convert(text)
    except ValueError as err:
        raise OptionError(f"expected {what} or 'none', got {text!r}") from err


def optional_float(text: str) -> float | None:
    """A number, or ``none`` / ``off`` (None).

    Raises:
        OptionError: neither.
    """
    return _optional(text, float, "a number")


def optional_int(text: str) -> int | None:
    """A whole number, or ``none`` / ``off`` (None).

    Raises:
        OptionError: neither.
    """
    return _optional(text, int, "a whole number")


def auto_or_optional_float(text: str) -> float | Literal["auto"] | None:
    """A number, ``auto`` or ``none`` (off)."""
    return "auto" if text.strip().lower() == "auto" else optional_float(text)
