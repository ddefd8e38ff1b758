"""Stream options: how a stream is chunked, guarded, trimmed and prompted (its search and policy included)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from simulst.config.fields import LONG_FORM, ONLINE, auto_or_optional_float, flag, nested, optional_float
from simulst.config.policy import POLICIES, PolicyOptions
from simulst.config.search import SearchOptions
from simulst.errors import OptionError

EARLY_LOGPROB_WHEN_TRANSCRIBING = -0.7  # what early_logprob_threshold "auto" means for a model that transcribes
MAX_PREVIOUS_TOKENS = 223  # openai-whisper's limit on previous text: half the decoder's 448 positions, less one
CONTEXT_SCOPES = ("auto", "sentence", "all")


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
            Why: a transcribing model's early guesses are where its streaming errors come from, and the stricter
            threshold removes them for a little more latency; a translating model's tokens are less confident, so
            the same threshold would hold its output back far longer (``bench/results/performance_logprob.md``).
        word_logprob_threshold: a non-final chunk commits no word that holds a token whose score in the best
            hypothesis (its log-probability) is below this, nor anything after it, unless the previous chunk's
            decode had the same output up to that token; what comes before the word is committed. A decode
            committed whole (a segment end, the source end, a full buffer) is not held back. None (the default):
            off. Why: a policy that commits from one hypothesis (the CTC policy) also commits
            the single unlikely word a decoder guesses from too little audio ("the cab as juice" for "the cabbage
            juice"), which an agreement policy would see change in the next chunk; a whole chunk's mean
            (``logprob_threshold``) lets one such word through among confident ones.
        loop_guard: no n-gram of tokens is committed more than 3 times in a row (1-3 tokens) or twice (longer),
            no 12-token span a third time within 100 tokens, and no 6-token span again within 60 tokens: the cut-off
            guards against Whisper's repetition loops ("however, however, ...", a sentence said over and over,
            audio read twice) (:func:`~simulst.sequences.loop_free_length`); a chunk's search (greedy or beam) stops
            where its best hypothesis runs into such a loop, since nothing after it would be committed.
        hold_sentence_end: a chunk does not commit a full stop, question or exclamation mark that ends its best
            hypothesis, until the hypothesis goes on past it, and the mark the next decode writes in its place (kept,
            or a comma) only with a word after it (a decode committed whole commits it). Why: a decode whose audio
            stops in a pause ends the text there ("Ask not." for "ask not ... what your country"), and a committed
            full stop makes the model start a new sentence after it ("Watch your country") and lets the buffer be
            trimmed in mid-sentence; a comma committed alone in its place forces a run-on the model may find
            unlikely. The speech model's commits only (a cascade's MT stage commits as before). Off by default: see
            ``docs/transcribe-translate.md``.
        punctuate_held_end: with ``hold_sentence_end``: while a sentence end is held right after the committed
            text, a chunk's search (greedy or beam) writes a punctuation mark there first - which one stays open (a
            full stop, a comma). Why: the held mark is where the speaker paused; a decode free to write no mark at
            all there runs the clauses together in words the speaker did not say ("Americans asked not" for
            "Americans, ask not"). Off by default.
        segment_s: long-form streaming: once the audio buffer holds more than this many seconds, it is trimmed
            behind the last committed sentence end (located in the audio by the model's token timing) once at
            least 3 s of audio follow it, and the committed text before the cut becomes the previous-text prompt.
        max_buffer_s: the buffer is never longer: at this length it is trimmed behind the last committed word,
            and when nothing in it is committed yet, its best hypothesis is committed whole and it is trimmed
            behind that text (not committed when the low-confidence guard finds it unsure: counted as
            ``unsure_buffer_drops``; when the text starts more than 3 s into the buffer, the audio before it is
            decoded alone and committed first: ``skipped_starts``).
            At most the model's window (Whisper's 30 s; a stream refuses a longer buffer or segment:
            :func:`simulst.streaming.session.check_window`); the offline policy (which decodes no chunk) always
            uses the whole window, so a source that fits it is decoded at once.
        context_tokens: how many committed tokens before the buffer go into the previous-text prompt (0: none).
        context_scope: which of them: ``all`` (the last ``context_tokens`` committed before the buffer, as
            openai/whisper conditions on previous text) or ``sentence`` (only those of the sentence the buffer
            starts in, cut off by a mid-sentence trim; none after a sentence end, or after a VAD pause that ended
            a segment, full stop written or not). ``auto`` (the default):
            ``sentence`` when the model transcribes, ``all`` when it translates (:meth:`context_in_force`). Why: a
            transcribing Whisper copies earlier sentences from the prompt into the next, while a translation keeps
            together with the whole prompt (``bench/results/longform.md``).
        prompt: text said before the stream's audio (openai-whisper's ``initial_prompt``; an OpenAI request's
            ``prompt``): carried into every decode as previous text, before the stream's own
            (:mod:`simulst.streaming.prompt`). Why: a user names what the audio will say (a speaker's name, the
            terms of a field) so the model spells it so. A model without previous-text conditioning refuses it
            (``OptionError`` when the stream opens). None: none.
        vad: voice activity detection (Silero VAD, :mod:`simulst.audio.vad`): chunks are not decoded while the
            buffer holds no speech (and that silence is dropped); when speech ends (a pause of ``vad_pause_ms``),
            the segment's best hypothesis is committed whole and the buffer emptied; after a pause of
            ``context_reset_s`` the previous-text prompt starts afresh.
        vad_threshold: Silero's speech probability threshold.
        vad_pause_ms: the silence that ends a segment.
        context_reset_s: the pause after which earlier text no longer conditions the decoder (with ``vad``).
        reencode_s: each decode re-encodes only the last ``reencode_s`` seconds of the audio read (and its window's
            new silence): while the buffer's audio before them is unchanged (no trim), the older positions keep the
            keys and values, at every encoder layer, that an earlier decode's encoding gave them
            (:meth:`WhisperModel.encode <simulst.models.whisper.WhisperModel.encode>`); in a stream's first seconds
            (under 1 s of older audio) all its audio and the ``reencode_s`` seconds of silence after it are computed,
            the farther silence kept. Whisper's encoder attends both ways, so this approximates the whole window's
            encoding, for a fraction of the encoder's work.
            None: every decode encodes its whole window.
        normalize_peak: the audio of each decode is amplified so that its loudest sample reaches this level (full
            scale 1.0; never attenuated, at most +40 dB): Whisper misreads recordings far quieter than its
            training audio (:mod:`simulst.audio.level`). None: the audio as it is.
    """

    chunk_ms: float = field(default=600.0, metadata=flag(
        "--chunk-ms", "decode after every MS of new audio", group=ONLINE, metavar="MS"))
    initial_wait_ms: float = field(default=0.0, metadata=flag(
        "--initial-wait-ms", "the first decode waits for this much audio (0: for the first chunk)", group=ONLINE,
        metavar="MS"))
    search: SearchOptions = field(default_factory=SearchOptions, metadata=nested())
    policy: PolicyOptions = field(default_factory=PolicyOptions, metadata=flag(
        "--policy", "the stable-hypothesis policy: {choices} (simulst --list-policies describes them)",
        group=ONLINE, metavar="POLICY", listing=POLICIES.listing, build=PolicyOptions.parse, refine=True))
    no_speech_threshold: float | None = field(default=0.6, metadata=flag(
        "--no-speech-threshold", "a chunk the model judges to hold no speech with probability > P commits nothing "
        "(Whisper's no_speech_prob; none: off)", group=ONLINE, metavar="P|none", parse=optional_float))
    logprob_threshold: float | None = field(default=-1.5, metadata=flag(
        "--logprob-threshold", "a chunk whose new tokens have a mean log-probability < L commits nothing (none: off)",
        group=ONLINE, metavar="L|none", parse=optional_float))
    early_logprob_threshold: float | Literal["auto"] | None = field(default="auto", metadata=flag(
        "--early-logprob-threshold", "a stricter L for the same guard while the audio decoded is at most "
        f"--segment-s long (auto: {EARLY_LOGPROB_WHEN_TRANSCRIBING:g} when transcribing, off when translating, "
        "whose tokens are less confident; none: off)", group=ONLINE, metavar="L|auto|none",
        parse=auto_or_optional_float))
    word_logprob_threshold: float | None = field(default=None, metadata=flag(
        "--word-logprob-threshold", "a chunk commits no word holding a token the search scored below L, nor "
        "anything after it, until two decodes agree on it (none: off)", group=ONLINE, metavar="L|none",
        parse=optional_float))
    loop_guard: bool = field(default=True, metadata=flag(
        "--loop-guard", "never commit a 1-3 token n-gram more than 3 times in a row, a longer one more than twice, "
        "a 12-token span a third time within 100 tokens, or a 6-token span again within 60 tokens (a chunk's search "
        "stops at such a loop)", group=ONLINE))
    hold_sentence_end: bool = field(default=False, metadata=flag(
        "--hold-sentence-end", "commit a full stop, question or exclamation mark that ends the best hypothesis, "
        "or the mark written in its place, only with a word after it (or when its segment ends): a pause does not "
        "end a sentence", group=ONLINE))
    punctuate_held_end: bool = field(default=False, metadata=flag(
        "--punctuate-held-end", "with --hold-sentence-end: while a sentence end is held after the committed text, "
        "a chunk's search writes a punctuation mark there first (which one stays open)", group=ONLINE))
    segment_s: float = field(default=5.0, metadata=flag(
        "--segment-s", "trim the audio buffer behind the last committed sentence once it is longer than S seconds",
        group=LONG_FORM, metavar="S"))
    max_buffer_s: float = field(default=8.0, metadata=flag(
        "--max-buffer-s", "the audio buffer is never longer than S seconds (at most the model's window, "
        "Whisper's 30 s)", group=LONG_FORM, metavar="S"))
    context_tokens: int = field(default=100, metadata=flag(
        "--context-tokens", "committed tokens before the buffer carried as the decoder's previous-text prompt "
        "(0: none)", group=LONG_FORM, metavar="N"))
    context_scope: Literal["auto", "sentence", "all"] = field(default="auto", metadata=flag(
        "--context-scope", "which of them: all, or only those of the sentence the buffer starts in (cut off by a "
        "mid-sentence trim); auto: sentence when transcribing (a transcribing Whisper copies earlier sentences "
        "from the prompt), all when translating", group=LONG_FORM, choices=CONTEXT_SCOPES))
    prompt: str | None = field(default=None, metadata=flag(
        "--prompt", "text said before the audio (names, terms, the style of the text): it conditions every decode "
        f"as Whisper's previous text, before the stream's own (its last {MAX_PREVIOUS_TOKENS} tokens)", group=LONG_FORM,
        metavar="TEXT"))
    vad: bool = field(default=False, metadata=flag(
        "--vad", "voice activity detection (Silero VAD): no decoding of silence, a segment is committed when "
        "speech pauses, the context starts afresh after a long pause", group=LONG_FORM))
    vad_threshold: float = field(default=0.5, metadata=flag(
        "--vad-threshold", "Silero's speech probability threshold", group=LONG_FORM, metavar="P"))
    vad_pause_ms: float = field(default=1000.0, metadata=flag(
        "--vad-pause-ms", "the silence that ends a speech segment", group=LONG_FORM, metavar="MS"))
    context_reset_s: float = field(default=5.0, metadata=flag(
        "--context-reset-s", "with --vad: a pause this long resets the previous-text context", group=LONG_FORM,
        metavar="S"))
    reencode_s: float | None = field(default=None, metadata=flag(
        "--reencode-s", "re-encode only the last S seconds of the audio read at each decode (and the window's new "
        "silence); the older positions keep their encoder keys and values from earlier decodes: an approximation "
        "(Whisper's encoder attends both ways) for less encoder work (docs/presets.md); none: the whole window",
        group=ONLINE, metavar="S|none", parse=optional_float))
    normalize_peak: float | None = field(default=0.3, metadata=flag(
        "--normalize-peak", "amplify quiet audio so that its loudest sample reaches P of full scale before the "
        "model hears it (never attenuated, at most +40 dB; none: off)", group=ONLINE, metavar="P|none",
        parse=optional_float))

    def __post_init__(self) -> None:
        if self.reencode_s is not None and not self.reencode_s > 0:
            raise OptionError(f"the audio re-encoded must be > 0 s (or none), got {self.reencode_s}")
        if self.normalize_peak is not None and not 0.0 < self.normalize_peak <= 1.0:
            raise OptionError(f"the normalisation peak is a level in (0, 1], got {self.normalize_peak}")
        if isinstance(self.early_logprob_threshold, str) and self.early_logprob_threshold != "auto":
            raise OptionError(f"the early log-probability threshold is a number, auto or none, "
                              f"got {self.early_logprob_threshold!r}")
        for threshold in (self.logprob_threshold, self.early_logprob_threshold, self.word_logprob_threshold):
            if isinstance(threshold, float) and math.isnan(threshold):
                raise OptionError("the log-probability threshold must be a number")
        if self.no_speech_threshold is not None and not 0.0 <= self.no_speech_threshold <= 1.0:
            raise OptionError(f"the no-speech threshold is a probability, got {self.no_speech_threshold}")
        if not self.chunk_ms > 0:
            raise OptionError(f"chunk size must be > 0 ms, got {self.chunk_ms}")
        if self.initial_wait_ms < 0:
            raise OptionError(f"initial wait must be >= 0 ms, got {self.initial_wait_ms}")
        if not 0 < self.segment_s <= self.max_buffer_s:
            raise OptionError(f"need 0 < segment (--segment-s / segment_s {self.segment_s:g} s) <= maximum buffer "
                              f"(--max-buffer-s / max_buffer_s {self.max_buffer_s:g} s): give a buffer at least as "
                              "long as the segment")
        if not isinstance(self.context_tokens, int) or self.context_tokens < 0:
            raise OptionError(f"previous-text context must be >= 0 tokens, got {self.context_tokens!r}")
        if self.prompt is not None and (not isinstance(self.prompt, str) or not self.prompt.strip()):
            raise OptionError(f"the prompt must hold some text, got {self.prompt!r}")
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


