"""Search options and the registry of searches (:mod:`simulst.search` registers them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from simulst.config.fields import CTC, ONLINE, flag, optional_int
from simulst.config.registry import Registry
from simulst.errors import OptionError


@dataclass(frozen=True)
class SearchSpec:
    """A registered search (:func:`simulst.search.register_searcher`).

    Attributes:
        name: its name in :class:`SearchOptions` and on the command line (``--search``).
        help: one line for the help and ``simulst --list-searches``.
        factory: (options, the policy's stop rule or None) -> the searcher.
        steerable: it takes a policy's stop rule (the CTC and AlignAtt policies) and joint CTC scoring.
    """

    name: str
    help: str
    factory: Callable[[SearchOptions, Any], object]
    steerable: bool = False

    @property
    def syntax(self) -> str:
        """How users write it: its name."""
        return self.name


SEARCHES: Registry[SearchSpec] = Registry("search", builtins="simulst.search")
MAX_TOKENS_PER_S = 12.0  # the default cap on the tokens searched per second of audio read (+ 10)


@dataclass(frozen=True)
class SearchOptions:
    """How hypotheses are searched in each chunk.

    Attributes:
        name: a registered search (``simulst --list-searches``): ``greedy``, ``beam`` (length-normalised beam
            search), or a blockwise beam search (:mod:`simulst.search.blockwise`): ``bwbs`` (Tsunoo's BWBS),
            ``ibwbs`` (IBWBS), ``ibwbs2`` (improved IBWBS with minScore / Seen), ``rewind`` (CMU's rewinding beam
            step).
        beam: beam size K (ignored by greedy).
        length_penalty: exponent of the length normalisation score / len**length_penalty.
        max_new_tokens: cap on tokens searched per chunk after the forced prefix (None: model's limit, and at
            most ``max_tokens_per_s`` per second of audio read plus 10 - stops runaway repetition loops).
        max_tokens_per_s: see ``max_new_tokens``.
        repetition_detection: blockwise searches also stop on a repeated token (Tsunoo 2021): the papers use it
            for blockwise models and switch it off for offline (full-context) models such as Whisper.
        carry_over: blockwise searches continue their kept active beam (BWBS: all beams) in the next chunk,
            force-decoding its uncommitted tokens (fewer decoder passes, but an early hallucination of an offline
            model is kept); False (default) restarts every chunk from the committed output.
        ctc_weight: λ of joint CTC/attention scoring, (1−λ)·log p_att + λ·log p_ctc-prefix (2023 paper §2.2),
            greedy and beam search only; needs a CTC head over the decoder's vocabulary. 0: attention only.
        draft: greedy search (without a stop rule or CTC scoring) checks the previous chunk's hypothesis in its
            forced pass and decodes step by step only from the first token that differs (speculative decoding
            with a free draft): the same hypotheses in fewer decoder passes.
        final_beam: the decodes committed whole - the source's end, a pause (VAD), a full buffer - search with a
            length-normalised beam search of this many hypotheses (with ``length_penalty`` and ``ctc_weight``)
            instead of ``name``'s search. Such a decode is read once and never again, as an offline decode is,
            and what it commits has waited for all its audio already: a wider search there changes the words,
            not when they come. None (the default): the chunk's own search.
    """

    name: str = field(default="greedy", metadata=flag(
        "--search", "the search: {choices} - greedy, beam search, or a blockwise streaming beam search (BWBS, "
        "IBWBS, improved IBWBS, CMU's rewinding beam step; simulst --list-searches describes them)",
        group=ONLINE, metavar="SEARCH", listing=SEARCHES.listing))
    beam: int = field(default=5, metadata=flag("--beam", "beam size of the beam searches", group=ONLINE,
                                               metavar="K"))
    length_penalty: float = field(default=1.0, metadata=flag(
        "--length-penalty", "a beam's score is its log-probability / length**P", group=ONLINE, metavar="P"))
    max_new_tokens: int | None = field(default=None, metadata=flag(
        "--max-new-tokens", "cap on the tokens searched per chunk", group=ONLINE, metavar="N", parse=int,
        default_help=f"the model's limit, at most {MAX_TOKENS_PER_S:g} per second of audio read plus 10"))
    max_tokens_per_s: float = MAX_TOKENS_PER_S
    repetition_detection: bool = field(default=False, metadata=flag(
        "--repetition-detection", "blockwise searches also stop on a repeated token (for blockwise models; the "
        "papers switch it off for offline models such as Whisper)", group=ONLINE))
    carry_over: bool = field(default=False, metadata=flag(
        "--carry-over", "blockwise searches continue their kept (uncommitted) beam in the next chunk: fewer decoder "
        "passes, but an early hallucination is kept (off: every chunk restarts from the committed output)",
        group=ONLINE))
    ctc_weight: float = field(default=0.0, metadata=flag(
        "--ctc-weight", "joint CTC/attention scoring weight λ, (1−λ)·log p_att + λ·log p_ctc (greedy and beam "
        "search; needs a CTC head over the decoder's vocabulary; 0: attention only)", group=CTC, metavar="LAMBDA"))
    draft: bool = field(default=True, metadata=flag(
        "--draft", "greedy search checks the previous chunk's hypothesis in its forced pass (speculative decoding: "
        "the same output in fewer decoder passes)", group=ONLINE))
    final_beam: int | None = field(default=None, metadata=flag(
        "--final-beam", "the decodes committed whole (the source's end, a VAD pause, a full buffer) search with a "
        "beam of K hypotheses (none: the chunk's own search)", group=ONLINE, metavar="K|none", parse=optional_int))

    def __post_init__(self) -> None:
        SEARCHES.lookup(self.name)  # an unknown name raises, listing the registered ones
        if self.beam < 1:
            raise OptionError(f"beam size must be >= 1, got {self.beam}")
        if self.final_beam is not None and self.final_beam < 1:
            raise OptionError(f"final beam size must be >= 1, got {self.final_beam}")
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise OptionError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if not 0.0 <= self.ctc_weight <= 1.0:
            raise OptionError(f"CTC weight must be in [0, 1], got {self.ctc_weight}")
        for switch in ("repetition_detection", "carry_over", "draft"):
            if not isinstance(getattr(self, switch), bool):
                raise OptionError(f"{switch} must be true or false, got {getattr(self, switch)!r}")

    @property
    def spec(self) -> SearchSpec:
        """The registered search."""
        return SEARCHES.lookup(self.name)
