"""Registering a policy: its module defines the policy class and puts this decorator on it - the CLI's ``--policy``,
its help, ``simulst --list-policies``, the errors, the web page and the MT stage's check then know it::

    @register_policy("la", syntax="la-N", pattern=r"la-?(\\d+)",
                     help="local agreement: commit the longest common prefix of the last N chunks' best hypotheses")
    class LocalAgreement(NPolicy): ...

A module in :mod:`simulst.policies` is imported with the package, so a new built-in policy is one new file; a
policy defined elsewhere (a test, a plugin) is registered when its module is imported.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

from simulst.config import POLICIES, PolicyOptions, PolicySpec
from simulst.policies.base import Policy

PolicyT = TypeVar("PolicyT", bound=Policy)


def register_policy(
    name: str, *, syntax: str, help: str, pattern: str, example: str | None = None,
    options: Callable[[re.Match[str]], PolicyOptions] | None = None, options_type: type[PolicyOptions] = PolicyOptions,
    text_source: bool = True, needs_beams: bool = False,
) -> Callable[[type[PolicyT]], type[PolicyT]]:
    """Class decorator: register the policy class as ``name`` (see :class:`~simulst.config.PolicySpec`).

    Args:
        name: the policy's name in its options.
        syntax: how users write it (``la-N``).
        help: one line for the help, ``simulst --list-policies`` and the web page.
        pattern: a regular expression matching the whole lower-cased spec. Without ``options`` it has one group,
            n (``PolicyOptions(name, n)``), or none (``PolicyOptions(name, minimum_n)``: ``offline``).
        example: a spec the web page offers (default: ``name-2``, or ``name`` without n).
        options: builds the options from a match, for a policy with its own options class (``ctc:C``).
        options_type: that class.
        text_source: it also onlinizes committed source text (a cascade's MT stage).
        needs_beams: it compares several beams (offered with a beam search only).

    The policy is built by ``cls.from_options(options, chunk_ms)``; ``cls.minimum_n`` is the smallest n.
    """
    compiled = re.compile(pattern)
    numbered = options is None and compiled.groups == 1
    if options is None and compiled.groups > 1:
        raise ValueError(f"policy {name}: a pattern with several groups needs an options builder")

    def decorate(cls: type[PolicyT]) -> type[PolicyT]:
        def numbered_options(match: re.Match[str]) -> PolicyOptions:
            return PolicyOptions(name, int(match.group(1)) if numbered else cls.minimum_n)

        POLICIES.register(name)(PolicySpec(
            name=name, syntax=syntax, help=help, pattern=compiled, options=options or numbered_options,
            factory=cls.from_options, example=example or (f"{name}-2" if numbered else name), numbered=numbered,
            minimum_n=cls.minimum_n, options_type=options_type, text_source=text_source, needs_beams=needs_beams,
        ))
        return cls

    return decorate
