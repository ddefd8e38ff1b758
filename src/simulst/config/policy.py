"""Policy options and the registry of policies (:mod:`simulst.policies` registers them)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from simulst.config.fields import CTC, flag
from simulst.config.registry import Registry
from simulst.errors import OptionError

CTC_ODDS = ("next", "any")


@dataclass(frozen=True)
class PolicyOptions:
    """Which stable-hypothesis policy commits output (2022 paper §3.3).

    Attributes:
        name: a registered policy (``simulst --list-policies``): ``offline`` (no chunk decoded: the audio is
            decoded whole at the source's end, a full window or a VAD pause), ``la`` (LA-n), ``hold`` (hold-n),
            ``sp`` (SP-n), ``wait`` (wait-k over chunks; over source words in a cascade's MT stage), ``ctc``
            (:class:`CtcPolicyOptions`), ``alignatt`` (:class:`AlignAttPolicyOptions`).
        n: the policy's n (k for wait-k).
    """

    name: str = "la"
    n: int = 2

    def __post_init__(self) -> None:
        spec = POLICIES.lookup(self.name)  # an unknown name raises, listing the registered ones
        if not isinstance(self, spec.options_type):
            raise OptionError(f"the {self.name} policy's options are {spec.options_type.__name__} "
                              f"(or PolicyOptions.parse({spec.example!r}))")
        if self.n < spec.minimum_n:
            raise OptionError(f"policy {self.name}-{self.n}: n must be >= {spec.minimum_n}")

    @property
    def spec(self) -> PolicySpec:
        """The registered policy."""
        return POLICIES.lookup(self.name)

    @property
    def needs_ctc_head(self) -> bool:
        """True when the policy reads a CTC output of the encoder."""
        return False

    @staticmethod
    def parse(spec: str) -> PolicyOptions:
        """Parse a policy as the papers write it, by the registered policies' syntax (``simulst
        --list-policies``): ``offline``, ``la-2``, ``hold-6``, ``sp-2``, ``wait-3``, ``ctc`` (the default C_end) or
        ``ctc:C`` (C_end = C, e.g. ``ctc:-1.5``, ``ctc:inf``), optionally ``ctc:C:any`` (the ``any`` odds, see
        :class:`CtcPolicyOptions`), ``alignatt`` or ``alignatt:F`` (F frames, :class:`AlignAttPolicyOptions`).

        Raises:
            OptionError: no registered policy is written so; the message lists how they are.
        """
        text = spec.strip().lower()
        for entry in POLICIES.entries():
            match = entry.pattern.fullmatch(text)
            if match:
                return entry.options(match)
        raise OptionError(f"unknown policy {spec!r}; choose one of {POLICIES.listing(', ')}")

    def __str__(self) -> str:
        return f"{self.name}-{self.n}" if self.spec.numbered else self.name


@dataclass(frozen=True)
class PolicySpec:
    """A registered policy (:func:`simulst.policies.register_policy`).

    Attributes:
        name: its name in :class:`PolicyOptions` (``la``).
        syntax: how users write it (``la-N``), for the help and the errors.
        help: one line for the help, ``simulst --list-policies`` and the web page.
        pattern: matches the whole of a lower-cased spec (``la-?(\\d+)``).
        options: the options a match of ``pattern`` stands for.
        factory: (options, chunk_ms) -> the policy; chunk_ms is None for a stream of committed source text (a
            cascade's MT stage).
        example: a spec that names it (``la-2``), which the web page offers.
        numbered: its spec carries n (``la-2``; ``str(options)`` writes it back so).
        minimum_n: the smallest n.
        options_type: the options class it reads (:class:`CtcPolicyOptions` for ``ctc``).
        text_source: it also onlinizes committed source text (a cascade's MT stage); False: it reads the speech
            encoder (a CTC head, the cross-attention).
        needs_beams: it compares several beams (SP-n): the web page offers it with a beam search only.
    """

    name: str
    syntax: str
    help: str
    pattern: re.Pattern[str]
    options: Callable[[re.Match[str]], PolicyOptions]
    factory: Callable[[PolicyOptions, float | None], object]
    example: str
    numbered: bool = True
    minimum_n: int = 1
    options_type: type[PolicyOptions] = PolicyOptions
    text_source: bool = True
    needs_beams: bool = False


POLICIES: Registry[PolicySpec] = Registry("policy", builtins="simulst.policies", shown=lambda _, spec: spec.syntax)


def text_policies() -> str:
    """How users write the policies that onlinize committed text (a cascade's MT stage)."""
    return " | ".join(spec.syntax for spec in POLICIES.entries() if spec.text_source)


@dataclass(frozen=True)
class CtcPolicyOptions(PolicyOptions):
    """The CTC online policy (Polák et al., IWSLT 2023, §2.3): :mod:`simulst.policies.ctc_end`.

    Attributes:
        threshold: C_end: a chunk's search stops when log Odds_end > C_end (+inf: never). None: the default of
            the CTC head's kind (0 as in the paper for a head over the decoder's tokens, -20 for the word-level
            policy with a character head; :mod:`simulst.search.ctc_end`).
        odds: the denominator with a CTC head of another vocabulary: ``next`` (the paper's c_att: the CTC labels
            that start the decoder's next word) or ``any`` (every continuation: eq. 4).
    """

    name: str = "ctc"
    n: int = 1
    threshold: float | None = field(default=None, metadata=flag(
        "--ctc-threshold", "C_end of --policy ctc: stop a chunk's search when log Odds_end > C (inf: never stop "
        "early)", group=CTC, metavar="C", parse=float,
        default_help="as --policy ctc:C says, else -20 for a character head (word-level odds), 0 for a head over "
                     "the decoder's tokens, as in the paper"))
    odds: str = field(default="next", metadata=flag(
        "--ctc-odds", "word-level CTC policy denominator: the decoder's next word (next, the paper's c_att) or "
        "every continuation (any, eq. 4)", group=CTC, choices=CTC_ODDS,
        default_help="as --policy ctc:C:any says, else next"))

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.odds not in CTC_ODDS or (self.threshold is not None and math.isnan(self.threshold)):
            raise OptionError(f"CTC policy: odds must be one of {', '.join(CTC_ODDS)} and C_end a number")

    @property
    def needs_ctc_head(self) -> bool:
        return True

    def __str__(self) -> str:
        threshold = "" if self.threshold is None else f":{self.threshold:g}"
        return f"ctc{threshold}" + (":any" if self.odds == "any" else "")


@dataclass(frozen=True)
class AlignAttPolicyOptions(PolicyOptions):
    """AlignAtt (Papi et al., Interspeech 2023): :mod:`simulst.policies.alignatt`.

    Attributes:
        frames: F: a chunk's search stops before a token whose cross-attention (the alignment heads, summed)
            peaks within F encoder frames of the end of the audio read (Whisper: 20 ms a frame; 25 = 0.5 s,
            SimulStreaming's default).
    """

    frames: int = 25
    name: str = "alignatt"
    n: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.frames, int) or self.frames < 0:
            raise OptionError(f"AlignAtt needs a frame threshold F >= 0, got {self.frames!r}")

    def __str__(self) -> str:
        return f"alignatt:{self.frames}"
