"""Options of the MT stage of a cascade (ASR → MT → optional TTS)."""

from __future__ import annotations

from dataclasses import dataclass, field

from simulst.config import POLICIES, PolicyOptions, SearchOptions, flag, nested, text_policies
from simulst.config.fields import CASCADE
from simulst.errors import OptionError


def parse_mt_policy(spec: str) -> PolicyOptions:
    """:meth:`PolicyOptions.parse` for the MT stage: an unknown policy's error lists only the policies the MT stage
    takes (:func:`~simulst.config.text_policies`).

    Raises:
        OptionError: an unknown policy, or an invalid n.
    """
    text = spec.strip().lower()
    if not any(entry.pattern.fullmatch(text) for entry in POLICIES.entries()):
        raise OptionError(f"unknown MT policy {spec!r}; choose one of {text_policies()}")
    return PolicyOptions.parse(spec)


@dataclass(frozen=True)
class MTOptions:
    """How the MT stage is onlinized and searched.

    The MT stage decodes once per new committed source increment (an ASR emission), so its "chunks" are ASR
    emissions: LA-n compares the translations of the last n source prefixes, hold-n drops the last n target
    tokens (words for Apertium), and wait-k is defined on *source words* (target word i may be written once
    k + i − 1 source words are committed; Ma et al. 2019 with γ = 1).

    Attributes:
        policy: the stable-hypothesis policy (``offline`` translates only at the end of the source).
        search: search of neural backends (ignored by black-box backends such as Apertium).
        max_len_a, max_len_b: a neural backend searches at most ``a · |source tokens| + b`` target tokens
            (fairseq's ``max_len_a`` / ``max_len_b``), and never more than the model accepts.
        sentences: translate sentence by sentence: once the committed source completes a sentence (ends in
            . ? !), that sentence is translated once more and its translation committed whole, and the next
            translation starts after it - so a long stream's MT steps stay short. False: every step translates
            the whole source so far.
    """

    policy: PolicyOptions = field(default_factory=PolicyOptions, metadata=flag(
        "--mt-policy", "the MT stage's policy on the committed source: {choices} (wait-N counts source words)",
        group=CASCADE, metavar="POLICY", listing=text_policies, build=parse_mt_policy))
    search: SearchOptions = field(default_factory=SearchOptions,
                                  metadata=nested("mt-", only=("name", "beam"), group=CASCADE))
    max_len_a: float = 2.0
    max_len_b: int = 10
    sentences: bool = True

    def __post_init__(self) -> None:
        if not self.policy.spec.text_source:
            raise OptionError(f"the MT stage reads committed text, with no audio and no CTC head: the "
                              f"{self.policy.name} policy reads the speech encoder; use {text_policies()}")
        if self.search.ctc_weight > 0:
            raise OptionError("the MT stage has no CTC head: joint CTC scoring (ctc_weight) does not apply")
        if self.max_len_a < 0 or self.max_len_b < 1:
            raise OptionError(f"max_len_a must be >= 0 and max_len_b >= 1, got {self.max_len_a}, {self.max_len_b}")

    def budget(self, source_tokens: int) -> int:
        """The most target tokens searched for a source of ``source_tokens`` tokens."""
        return int(self.max_len_a * source_tokens) + self.max_len_b
