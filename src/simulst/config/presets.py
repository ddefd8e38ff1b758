"""Named operating points: ``--latency low|balanced|accurate``, one set per task.

Transcription and translation want different settings (a translation commits words before the sentence gives
them meaning; a transcription does not), so each task has its own three points, chosen on that task's dev data
and each backed by a row of ``bench/results/quality_latency.md``. A preset is a set of option values applied
*under* the user's flags: a flag given on the command line always wins over the preset.

* ``low`` — the least delay: words appear as soon as the model is fairly sure of them (transcription: the CTC
  policy where the model ships a CTC head; see :meth:`Preset.for_model`).
* ``balanced`` — close to offline quality at a delay a live audience accepts: a transcription's default.
* ``accurate`` — the best quality a live stream gets on a CPU: a translation's default (:data:`DEFAULT_LATENCIES`).

The settings are keyed by the options' field names (:class:`~simulst.config.model.ModelOptions` and
:class:`~simulst.config.stream.StreamOptions`; ``policy`` as its text form, ``la-2``; the search's options by their
flags' names, ``search`` and ``beam``), so the command line and the Python API (:func:`preset_options`) resolve a
preset alike.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from simulst.config.fields import FLAG
from simulst.config.model import DEFAULT_MODEL, TASKS, ModelOptions
from simulst.config.policy import PolicyOptions
from simulst.config.search import SearchOptions
from simulst.config.stream import StreamOptions
from simulst.errors import OptionError

LATENCIES = ("low", "balanced", "accurate")
DEFAULT_LATENCIES: Mapping[str, str] = MappingProxyType({"transcribe": "balanced", "translate": "accurate"})
"""Each task's preset where none is named, chosen on the task's dev data (docs/presets.md): a translation's is
``accurate``, whose words come as soon as ``balanced``'s on short utterances and a little later on long talks, for
more BLEU (the comment above ``_WAITS_WHEN_UNSURE``)."""


@dataclass(frozen=True)
class Preset:
    """One task's operating point.

    Attributes:
        task: ``transcribe`` or ``translate``.
        latency: ``low``, ``balanced`` or ``accurate``.
        summary: what a user gets, in a line.
        settings: option values by field name (model and stream options; ``policy`` as text).
        without_ctc_head: for a preset whose policy reads a CTC head: the settings in force instead with a model
            that ships none (:meth:`for_model`); None: the preset needs no head.
    """

    task: str
    latency: str
    summary: str
    settings: Mapping[str, Any] = field(default_factory=dict)
    without_ctc_head: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "settings", MappingProxyType(dict(self.settings)))
        if self.without_ctc_head is not None:
            object.__setattr__(self, "without_ctc_head", MappingProxyType(dict(self.without_ctc_head)))
        for settings in (self.settings, self.without_ctc_head or {}):
            unknown = set(settings) - (set(_FLAGS) & (_MODEL_FIELDS | _STREAM_FIELDS | set(_SEARCH_FIELDS)))
            if unknown:
                raise ValueError(f"preset {self.task}/{self.latency}: unknown options {sorted(unknown)}")

    def for_model(self, name: str | None, ctc_head_given: bool = False) -> Preset:
        """The preset as it applies to the model ``name`` (None: the default model): where its policy reads a CTC
        head and the model ships none (any model but the default, Whisper tiny.en, by name) and no head is given
        (``ctc_head_given``), its ``without_ctc_head`` settings; else itself."""
        if self.without_ctc_head is None or ctc_head_given or name in (None, DEFAULT_MODEL):
            return self
        return Preset(self.task, self.latency, self.summary, self.without_ctc_head)

    def settings_under(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """The settings in force under the options ``given`` explicitly (their values keyed as :attr:`settings`
        are): a given option wins over the preset's; a preset's beam goes with its search (a given ``search`` other
        than the preset's drops the preset's ``beam``: ``--latency low --search beam`` is not a beam of 1); the
        segment and the buffer bound each other (``segment_s`` <= ``max_buffer_s``): where only one is given, the
        other (the preset's, else the option default) yields to it."""
        out = {k: v for k, v in self.settings.items() if k not in given}
        if "search" in given and given["search"] != self.settings.get("search"):
            out.pop("beam", None)
        defaults = StreamOptions()
        if "segment_s" in given and "max_buffer_s" not in given:
            out["max_buffer_s"] = max(out.get("max_buffer_s", defaults.max_buffer_s), given["segment_s"])
        if "max_buffer_s" in given and "segment_s" not in given:
            out["segment_s"] = min(out.get("segment_s", defaults.segment_s), given["max_buffer_s"])
        return out

    def model_settings(self, given: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The settings that are :class:`ModelOptions` fields (under the options ``given``: :meth:`settings_under`)."""
        return {k: v for k, v in self.settings_under(given or {}).items() if k in _MODEL_FIELDS}

    def flags(self) -> str:
        """The settings as the command-line flags that give them (``--chunk-ms 1000 --vad``); empty: none."""
        parts = []
        for name, value in self.settings.items():
            option = _FLAGS[name]
            if isinstance(value, bool):
                parts.append(option if value else f"--no-{option[2:]}")
            else:
                shown = "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)
                parts.append(f"{option} {shown}")
        return " ".join(parts)

    def stream_settings(self, search: SearchOptions | None = None,
                        given: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The settings that are :class:`StreamOptions` fields (``policy`` parsed; the search's settings applied
        over ``search``, None: the default search, as ``search``), under the options ``given``
        (:meth:`settings_under`)."""
        settings = self.settings_under(given or {})
        out = {k: v for k, v in settings.items() if k in _STREAM_FIELDS and k not in _SEARCH_FIELDS}
        if isinstance(out.get("policy"), str):
            out["policy"] = PolicyOptions.parse(out["policy"])
        searched = {_SEARCH_FIELDS[k]: v for k, v in settings.items() if k in _SEARCH_FIELDS}
        if searched:
            out["search"] = dataclasses.replace(search or SearchOptions(), **searched)
        return out


_MODEL_FIELDS = frozenset(f.name for f in dataclasses.fields(ModelOptions)) - {"name", "device", "language", "task"}
_STREAM_FIELDS = frozenset(f.name for f in dataclasses.fields(StreamOptions))
# the search's options are keyed as their flags name them (``search``: the search's name, ``beam``), the way the
# command line's parsed arguments hold them; each maps to its field of SearchOptions
_SEARCH_FIELDS = {f.metadata[FLAG].dest: f.name for f in dataclasses.fields(SearchOptions) if FLAG in f.metadata}
_FLAGS = {f.name: f.metadata[FLAG].name for cls in (ModelOptions, StreamOptions) for f in dataclasses.fields(cls)
          if FLAG in f.metadata} | {dest: f"--{dest.replace('_', '-')}" for dest in _SEARCH_FIELDS}

# A translation keeps the audio of its whole sentence (up to 30 s): trimming the buffer inside a sentence, as a
# transcription does at 16 s or 24 s, cuts away the source of the words still to be translated (long talks are still
# trimmed at sentence ends, past 10 s).
_SENTENCE_AUDIO = {"max_buffer_s": 30.0, "segment_s": 10.0}
# A transcription's buffer is cut at a sentence end past 10 s, or behind the last committed word at 16 s: the option
# defaults (5 s and 8 s) cut long sentences in the middle, where the words after the cut lose their sentence's start
# (bench/results/longform_phases_cuts/longform_phases.md: three chunk grids of both long-form dev sets).
_FEWER_CUTS = {"segment_s": 10.0, "max_buffer_s": 16.0}
# The balanced point cuts behind the last committed word only at 24 s, and keeps a held sentence end a punctuation
# mark (below): alone, each read fewer or the same errors on every dev set, by intervals that hold zero
# (bench/results/longform_phases_buffer_24/, longform_phases_punct_held/); together, on the short dev utterances
# over three chunk grids fewer errors by an interval that excludes zero, the words sooner, and on the long-form dev
# sets fewer errors at the same delay (longform_phases_punct_held/).
_LONGER_SENTENCES = {"segment_s": 10.0, "max_buffer_s": 24.0}
_OPTION_DEFAULT_CUTS = {"segment_s": 5.0, "max_buffer_s": 8.0}  # (as low without a CTC head was measured)
# A transcription's balanced point listens with Silero VAD: pauses are not decoded and a segment is committed at a
# pause, for the same WER on short utterances and long streams over three chunk grids each, words sooner on a talk
# with pauses, and less compute there (bench/results/quality_latency_grids.md, longform_default/longform.md). low
# without a CTC head was measured without it and says so, so that its flags typed without --latency give it.
_LISTENS = {"vad": True}
_NO_VAD = {"vad": False}
# A translation's balanced point listens too, a segment ending at a pause of 1.5 s: on the German and French dev
# talks over three chunk grids its words come about half as late (the default before it held sentences back at loop
# stalls until its 30 s buffer was full) for less compute and a BLEU that cannot be told from the default's before;
# on the Spanish and Portuguese talks as close to offline translation; on the dev utterances a BLEU that cannot be
# told from the one before, the words a little later (bench/results/longform_phases_vad_translate/,
# quality_latency_grids_translate.md). A pause of 1 s ends more
# segments inside a sentence, whose clauses are then translated apart. Since 2026-12-07 accurate and low are balanced
# with one change each, and listen too; the points before them did without it (LA-2 with it read no more BLEU than
# balanced and came later; greedy LA-2's BLEU and delay with it could not be told from without it:
# longform_phases_vad_translate/accurate/, low/).
_SENTENCE_PAUSE = {"vad_pause_ms": 1500.0}

# Every preset names its search and policy, so that its flags typed without --latency give it (not the balanced
# preset's beam under them).
_GREEDY = {"search": "greedy", "beam": 1}  # (one beam: no other preset's beam applies)
_GREEDY_LA2 = {**_GREEDY, "policy": "la-2"}
_BEAM_3 = {"search": "beam", "beam": 3}

# A transcription's low point runs the CTC online policy (a chunk's search stops where the CTC head says the audio
# is used up; no second decode has to agree) over 400 ms chunks, with the balanced point's VAD and cuts
# (bench/results/quality_latency_grids.md, longform_phases_low/). Only Whisper tiny.en ships a CTC head: with another
# model (and no --ctc-head) low is the point chosen before, LA-2 over 400 ms chunks.
_LOW_WITHOUT_CTC_HEAD = {"chunk_ms": 400.0, "early_logprob_threshold": None, **_OPTION_DEFAULT_CUTS, **_NO_VAD,
                         **_GREEDY_LA2}

# A translation's balanced point searches each 1 s chunk with a beam of 3 and commits what the best hypothesis shares
# with a beam of the chunk before (beam agreement, BA-2). Over three chunk grids of the de + fr dev talks it reads more
# BLEU than greedy LocalAgreement-2 (the point before) at the same delay, by an interval that excludes zero, since the
# loop guard cuts a copy the best hypothesis begins (bench/results/longform_phases_loop_lead/); on the dev utterances
# more BLEU, sooner, by intervals that hold zero (bench/results/quality_latency_grids_translate.md); about 15 % more
# compute. A beam of 5 reads more on the utterances but loses sentences to loops on the German talk. The low point
# is balanced over 600 ms chunks: against greedy LA-2 over 600 ms without the VAD (the point before it), on the de +
# fr dev talks over three chunk grids its words come sooner by an interval that excludes zero, for more BLEU by one
# that holds zero, where the point before was later than balanced for less BLEU; on the dev utterances more BLEU,
# sooner (LAAL), less encoder work (bench/results/longform_phases_low_translate/).
_BEAM_AGREEMENT = {**_BEAM_3, "policy": "ba-2"}
_BEAM_LA2 = {**_BEAM_3, "policy": "la-2"}
# A transcription's balanced point searches the same way (a beam of 3 in every chunk, beam agreement): over 600 ms
# chunks, on the short dev utterances over three chunk grids fewer errors than greedy LA-2 (the point before) by an
# interval that excludes zero, and sooner; on the long-form dev sets the same WER (bench/results/
# quality_latency_grids.md, longform_phases_transcribe_beam/). Over 500 ms chunks its words come sooner on both, for
# a WER that cannot be told from 600 ms's (longform_phases_transcribe_c500/): within offline + 1 at AL <= 1.4 s on
# the short dev utterances, which 600 ms chunks are not. Its accurate point searches the same beam over 1 s chunks
# under LA-2 (with balanced's VAD and cuts): fewer errors than balanced (over 600 ms chunks and over 500 ms), by
# intervals that exclude zero, on the short dev utterances and on the long-form dev sets, about 1 s later
# (quality_latency_grids.md, longform_phases_transcribe_accurate/); without the VAD and with 5 s / 15 s cuts it reads
# more errors on the talk.

# A transcription's presets run the encoder's and the decoder's linear layers in bfloat16 where the model is
# English-only and the CPU multiplies in bfloat16 natively (``auto``; float32 elsewhere and on a GPU): the encoder is
# most of a stream's compute and the decoder's steps stream every weight for a few rows; with Whisper tiny.en the
# bfloat16 model reads a WER that cannot be told from float32's at the same delay over three chunk grids on the
# short and the long-form dev sets, for more live streams per CPU (bench/results/encoder_bf16.md,
# bench/results/decoder_bf16.md). A translation's stay in float32: with Whisper base the bfloat16 encoder, and the
# bfloat16 decoder alone, read the same BLEU on the dev utterances but less on the long-form dev talks, by intervals
# that exclude zero (longform_phases_bf16_translate/, longform_phases_dec_bf16_translate/).
_BFLOAT16 = {"encoder_precision": "auto", "precision": "auto"}

# A transcription's balanced point commits a full stop, question or exclamation mark that ends a chunk's text (or the
# mark the next decode writes in its place) only with a word after it: a chunk that ends in a mid-sentence pause
# reads a full stop there. On the long-form dev sets over three chunk grids fewer errors - on the talk of every
# English dev utterance once, by an interval that excludes zero - its words no later on the talks and about 0.1 s
# later on the LibriSpeech readings (the held marks later still); on the short dev utterances the same WER at the
# same delay (bench/results/longform_phases_hold_mark_mix/, quality_latency_grids.md). low and accurate, measured
# with it on that talk, read no difference an interval tells from zero (longform_phases_hold_mark_mix/low/,
# accurate/): they commit a full stop at once. A translation's balanced point holds them too (without the mark
# written in their place, which read less BLEU): on the dev utterances over three chunk grids more chrF by an
# interval that excludes zero (BLEU by one that holds it) at the same delay, on the German and French dev talks no
# difference an interval tells from zero either way, the same delay; on the Spanish and Portuguese utterances closer
# to offline decoding, by an interval that excludes zero (bench/results/longform_phases_hold_translate/). On
# 2026-12-01 the French dev talk had lost by one that excluded zero (one grid's sentence written twice), which the
# code of 2026-12-02 no longer does (longform_phases_hold_mark_translate_vad/).
_HOLDS_SENTENCE_END = {"hold_sentence_end": True}
# ... and while it holds one, a chunk's search writes a punctuation mark there first, its kind open: free to write
# none, a decode after the pause ran the clauses together in words not said ("fellow Americans asked not" for
# "fellow Americans, ask not" in 18 of the English dev talk's 33 readings of jfk).
_PUNCTUATES_HELD_END = {"punctuate_held_end": True}
# ... and each decode re-encodes only the last 2 s of its audio (and the window's new silence), the older positions
# keeping their encoder keys and values from the decodes before: on the short dev utterances over three chunk grids
# fewer errors by an interval that excludes zero, at the same delay; on the long-form dev sets a WER an interval
# cannot tell from the full window's, the words a little sooner; about half the encoder's frames computed
# (bench/results/longform_phases_reencode/, quality_latency_grids.md). low and accurate were not measured with it;
# translate balanced read a BLEU that cannot be told from the full window's on the dev utterances but less on the
# German and French dev talks, by an interval that excludes zero (with 5 s too, by one that holds it):
# translations encode their whole window (bench/results/longform_phases_reencode_translate/).
_RECENT_AUDIO = {"reencode_s": 2.0}
_WHOLE_WINDOW = {"reencode_s": None}  # (said, so that low's and accurate's flags typed without --latency give them)
_NO_HOLD = {"hold_sentence_end": False,  # (said, so that low's and accurate's flags typed without --latency give them)
            "punctuate_held_end": False}
# A translation's accurate point is balanced with a stricter low-confidence guard while the audio decoded is at most
# 10 s: a chunk whose new tokens have a mean log-probability below -1.25 (balanced: -1.5) commits nothing and waits for
# more audio. Against the accurate point before it (a beam of 3 under LA-2 without the VAD), over three chunk grids, on
# the dev utterances more BLEU (an interval that holds zero) with the words 0.5 s sooner; on the German and French dev
# talks more BLEU (an interval that holds zero) with the words 2.3 s sooner (an interval that excludes zero), for less
# compute; against balanced more BLEU at the same delay on the utterances, and on the talks more BLEU (an interval that
# excludes zero) with the words about 0.4 s later (bench/results/longform_phases_accurate_translate/). It is the
# translate default (DEFAULT_LATENCIES): over six chunk grids of the dev utterances it is within 1 BLEU of offline
# decoding with the presets' beam of 3 and balanced is not, its words as soon as balanced's there
# (quality_latency_grids_translate.md).
_WAITS_WHEN_UNSURE = {"early_logprob_threshold": -1.25}
# (said, so that balanced's and low's flags typed without --latency give them under the translate default)
_COMMITS_WHEN_UNSURE = {"early_logprob_threshold": "auto"}

# translate balanced, which low and accurate each change in one thing
_TRANSLATE_BALANCED = {"chunk_ms": 1000.0, **_BEAM_AGREEMENT, **_SENTENCE_AUDIO, **_LISTENS, **_SENTENCE_PAUSE,
                       **_HOLDS_SENTENCE_END, "punctuate_held_end": False, **_COMMITS_WHEN_UNSURE}

_ALL = (
    Preset("transcribe", "low", "words sooner: the CTC policy over 400 ms chunks, pauses skipped (VAD)",
           {"policy": "ctc", "ctc_head": "default", "chunk_ms": 400.0, **_FEWER_CUTS, **_LISTENS, **_GREEDY, **_NO_HOLD,
            **_WHOLE_WINDOW, **_BFLOAT16}, without_ctc_head={**_LOW_WITHOUT_CTC_HEAD, **_NO_HOLD, **_WHOLE_WINDOW,
                                                              **_BFLOAT16}),
    Preset("transcribe", "balanced", "500 ms chunks, a beam of 3 each, beam agreement, pauses skipped (VAD), a "
           "sentence end committed with the word after it (a mark kept there), cut at sentence ends past 10 s "
           "(mid-sentence at 24 s), each decode re-encoding its last 2 s of audio",
           {"chunk_ms": 500.0, **_LONGER_SENTENCES, **_LISTENS, **_BEAM_AGREEMENT, **_HOLDS_SENTENCE_END,
            **_PUNCTUATES_HELD_END, **_RECENT_AUDIO, **_BFLOAT16}),
    Preset("transcribe", "accurate", "as balanced over 1 s chunks, a commit when the best hypotheses of two chunks "
           "agree (LA-2), a sentence end committed at once",
           {"chunk_ms": 1000.0, **_FEWER_CUTS, **_LISTENS, **_BEAM_LA2, **_NO_HOLD, **_WHOLE_WINDOW, **_BFLOAT16}),
    Preset("translate", "low", "as balanced over 600 ms chunks: the words soonest, for a lower BLEU",
           {**_TRANSLATE_BALANCED, "chunk_ms": 600.0}),
    Preset("translate", "balanced", "1 s chunks over the sentence's whole audio, a beam of 3 each, beam agreement, "
           "a segment committed at a pause of 1.5 s (VAD), a sentence end committed with the word after it: near "
           "offline quality within 2 s", _TRANSLATE_BALANCED),
    Preset("translate", "accurate", "as balanced, and while the audio decoded is at most 10 s a chunk whose new "
           "words the model is less sure of (a mean log-probability below -1.25) commits nothing: more BLEU, the "
           "words a little later on long talks",
           {**_TRANSLATE_BALANCED, **_WAITS_WHEN_UNSURE}),
)

PRESETS: Mapping[tuple[str, str], Preset] = MappingProxyType({(p.task, p.latency): p for p in _ALL})


def preset(task: str, latency: str | None = None) -> Preset:
    """The preset of ``task`` at ``latency`` (None: the task's default, :data:`DEFAULT_LATENCIES`).

    Raises:
        OptionError: an unknown task or latency.
    """
    if task not in TASKS:
        raise OptionError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
    latency = latency or DEFAULT_LATENCIES[task]
    if latency not in LATENCIES:
        raise OptionError(f"unknown latency preset {latency!r}; choose one of {', '.join(LATENCIES)}")
    return PRESETS[(task, latency)]


def preset_options(task: str, latency: str | None = None, model: ModelOptions | None = None,
                   stream: StreamOptions | None = None) -> tuple[ModelOptions, StreamOptions]:
    """``model`` and ``stream`` options (defaults when None) with the preset's settings applied under them, for
    ``task`` (the model options' task set to it; :meth:`Preset.for_model` of the model options' name and head) at
    ``latency`` (None: the task's default).

    As on the command line, the caller's options win over the preset: a field of ``model`` or ``stream`` (or of
    its search) whose value differs from the field's default counts as given explicitly and is kept
    (``stream=StreamOptions(chunk_ms=1000)`` keeps 1000 ms chunks; a value equal to the default cannot be told from
    none and gets the preset's). The rest follows :meth:`Preset.settings_under`: a preset's beam goes with its
    search, and a given segment or buffer bounds the preset's other.
    """
    model = model or ModelOptions()
    stream = stream or StreamOptions()
    given = {**_explicit(model), **_explicit(stream, _STREAM_KEYS), **_explicit(stream.search, _SEARCH_KEYS)}
    chosen = preset(task, latency).for_model(model.name, model.ctc_head is not None)
    model = dataclasses.replace(model, task=task, **chosen.model_settings(given))
    stream = dataclasses.replace(stream, **chosen.stream_settings(stream.search, given))
    return model, stream


# the preset keys of the options' fields (the search's by their flags' names; the nested search is not one)
_STREAM_KEYS = {name: name for name in _STREAM_FIELDS if name != "search"}
_SEARCH_KEYS = {field_name: key for key, field_name in _SEARCH_FIELDS.items()}


def _explicit(options: Any, keys: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The fields of the options object ``options`` whose values differ from their defaults, by preset key
    (``keys``: field name -> key, the fields it does not name left out; None: every field by its name)."""
    defaults = type(options)()
    return {(keys or {}).get(f.name, f.name): getattr(options, f.name) for f in dataclasses.fields(options)
            if (keys is None or f.name in keys) and getattr(options, f.name) != getattr(defaults, f.name)}
