"""Spoken timestamps: where each emission's words were spoken, from the alignment heads' rows the search recorded
(no extra decoder pass); hand-worked rows → times, words and formats, then real Whisper tiny.en on the shared jfk
and FLEURS English audio against an offline forced alignment of each whole file."""

from __future__ import annotations

import difflib
import io
import itertools
import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
import torch

from simulst.audio.io import load_audio
from simulst.cli.main import main
from simulst.cli.printing import TSV_HEADER, StreamOutput, tsv_line, whisper_streaming_line
from simulst.config import PolicyOptions, SearchOptions, StreamOptions
from simulst.errors import OptionError
from simulst.models.base import Encoded
from simulst.models.timing import (
    RowTrace,
    Traced,
    dtw,
    median_filter,
    pauses,
    snapped_spans,
)
from simulst.models.whisper import WhisperModel
from simulst.models.whisper_net import head_scores_of
from simulst.mt.options import MTOptions
from simulst.search import BeamSearch, Query, SearchState
from simulst.streaming.batching import Batcher, SerialRunner
from simulst.streaming.commit import Output, text_ends
from simulst.streaming.feed import feed_fast
from simulst.streaming.mt_stage import MTStage
from simulst.streaming.session import Session
from simulst.streaming.subtitles import SubtitleWriter, parse_captions, render_subtitles
from simulst.types import Costs, Emission, Word, spoken_words
from tests.shared_assets import JFK, english_items, needs_shared
from tests.toy import ScriptedMT, ToyTokenizer, stream_in_rounds

# ----------------------------------------------------------------------------------------- DTW and the rows


def _dtw_cell_by_cell(cost: np.ndarray) -> tuple[list[int], list[int]]:
    """The textbook recursion, one cell at a time (diagonal preferred on ties, then the row step)."""
    n, m = cost.shape
    acc = np.full((n + 1, m + 1), np.inf)
    acc[0, 0] = 0.0
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            acc[i, j] = cost[i - 1, j - 1] + min(acc[i - 1, j - 1], acc[i - 1, j], acc[i, j - 1])
    rows, cols, i, j = [], [], n, m
    while i > 0 and j > 0:
        rows.append(i - 1)
        cols.append(j - 1)
        diag, up, left = acc[i - 1, j - 1], acc[i - 1, j], acc[i, j - 1]
        if diag <= up and diag <= left:
            i, j = i - 1, j - 1
        elif up <= left:
            i -= 1
        else:
            j -= 1
    return rows[::-1], cols[::-1]


def test_dtw_computed_a_row_at_a_time_takes_the_cell_by_cell_path() -> None:
    rng = np.random.default_rng(7)
    for trial in range(300):
        cost = rng.standard_normal((int(rng.integers(1, 20)), int(rng.integers(1, 60))))
        if trial % 3 == 0:
            cost = np.round(cost)  # equal totals: the tie-breaking must match too
        rows, cols = dtw(cost)
        assert (rows.tolist(), cols.tolist()) == _dtw_cell_by_cell(cost)


def test_the_median_filter_picks_numpys_median() -> None:
    rng = np.random.default_rng(3)
    for width in (1, 3, 5, 7):
        x = rng.standard_normal((2, 3, 40)).astype(np.float32)
        pad = width // 2
        padded = np.pad(x, [(0, 0), (0, 0), (pad, pad)], mode="reflect")
        want = np.median(np.lib.stride_tricks.sliding_window_view(padded, width, axis=-1), axis=-1)
        assert np.array_equal(median_filter(x, width), want)


def test_a_trace_follows_each_hypothesis_through_the_beams_reordering() -> None:
    # a forced pass of 2 positions for one hypothesis (queries 0, 1), expanded to two beams, a step (2a, 2b), the
    # beams swapped and the second dropped (beam 0 continues old beam 1), a step (3), a rewind; two layers
    def step(*values: float) -> list[torch.Tensor]:  # per layer (B, H=1, 1, D/H=2), each query filled with its value
        one = torch.tensor(values).view(-1, 1, 1, 1).expand(-1, 1, 1, 2)
        return [one, 10 * one]

    first = RowTrace.first([torch.tensor([0.0, 1.0]).view(1, 1, 2, 1).expand(1, 1, 2, 2)] * 2)
    two = first.reordered([0, 0]).extended(step(2.0, 2.5))
    swapped = two.reordered([1]).extended(step(3.0))
    layers = swapped.rows(0)
    assert [tuple(q.shape) for q in layers] == [(1, 4, 2), (1, 4, 2)]
    assert layers[0][0, :, 0].tolist() == [0.0, 1.0, 2.5, 3.0] and layers[1][0, 2:, 0].tolist() == [25.0, 30.0]
    assert two.rows(0)[0][0, :, 0].tolist() == [0.0, 1.0, 2.0]  # (the other beam, still held by whoever kept it)
    assert Traced(swapped, 0).rows()[0][0, :, 0].tolist() == [0.0, 1.0, 2.5, 3.0]
    rewound = first.rewound(1)
    assert rewound is not None and rewound.rows(0)[0].shape == (1, 1, 2)
    assert first.rewound(0) is first and swapped.rewound(1) is None and first.rewound(2) is None


# ----------------------------------------------------------------------------------------- pauses and word spans


def _speech(rate: int, parts: Sequence[tuple[float, bool]]) -> np.ndarray:
    """Seconds of a tone (True) or of faint noise (False), in turn."""
    rng = np.random.default_rng(0)
    out = []
    for seconds, loud in parts:
        n = round(seconds * rate)
        t = np.arange(n) / rate
        out.append(0.3 * np.sin(2 * np.pi * 220 * t) if loud else 0.0005 * rng.standard_normal(n))
    return np.concatenate(out).astype(np.float32)


def test_pauses_are_long_quiet_runs() -> None:
    rate = 1000  # a frame of 10 ms is 10 samples
    audio = _speech(rate, [(0.3, False), (1.0, True), (0.1, False), (1.0, True), (0.5, False), (0.7, True),
                           (0.4, False)])
    # the 0.1 s gap is no pause (a stop consonant's closure is that short); the rest are, to the frame (the median
    # over 5 frames moves an edge by at most 2 frames), the last one running to the end of the audio
    found = pauses(audio, rate)
    assert [(round(a / 100) / 10, round(b / 100) / 10) for a, b in found] == [(0.0, 0.3), (2.4, 2.9), (3.6, 4.0)]
    assert found[-1][1] == audio.shape[0]
    assert pauses(_speech(rate, [(2.0, True)]), rate) == []  # speech throughout
    assert pauses(_speech(rate, [(2.0, False)]), rate) == []  # only noise: nothing to tell a pause from


def test_a_word_boundary_moves_to_the_pause_it_sits_next_to() -> None:
    # jfk at 5.4 s, as Whisper tiny.en's DTW times it (samples at 100 per second): "And so my fellow Americans."
    # then a pause (2.01-3.29 s), "Ask", a pause (3.66-4.01 s), "not." and the pause at the end (4.29 s on). DTW
    # gave the pause to the full stop, which runs on into "Ask" (3.70 s); the pause before "Ask" is found.
    tokens = [" And", " so", " my", " fellow", " Americans", ".", " Ask", " not", "."]
    bounds = [0, 76, 104, 142, 176, 236, 370, 388, 450, 538]
    quiet = [(0, 33), (201, 329), (366, 401), (429, 540)]
    spans = snapped_spans(bounds, [t.startswith(" ") for t in tokens], [t == "." for t in tokens], quiet, 60)
    assert spans == [(33, 76), (76, 104), (104, 142), (142, 176), (176, 201), (201, 201), (329, 366), (401, 429),
                     (429, 429)]
    # without pauses: DTW's bounds; a boundary beyond reach of a pause stays
    assert snapped_spans(bounds, [True] * 9, [False] * 9, [], 60) == list(itertools.pairwise(bounds))
    assert snapped_spans([0, 100, 200], [True, True], [False, False], [(400, 500)], 60) == [(0, 100), (100, 200)]
    # a word wholly inside a pause (DTW put it there) goes to the side of the boundary nearer the pause's end
    assert snapped_spans([0, 100, 150, 300], [True] * 3, [False] * 3, [(90, 200)], 50) == [(0, 90), (90, 90),
                                                                                        (200, 300)]
    assert snapped_spans([0, 100, 190, 300], [True] * 3, [False] * 3, [(90, 200)], 50) == [(0, 90), (90, 90),
                                                                                        (200, 300)]
    assert snapped_spans([0, 100, 120, 300], [True] * 3, [False] * 3, [(110, 200)], 50) == [(0, 100), (100, 110),
                                                                                         (200, 300)]


# ----------------------------------------------------------------------------------------- commits, words


PIECES = ["<eos>", " And", " so", " 3", ".", "5", " per", "cent", " ok", "\t"]


def _commit(output: Output, tokens: Sequence[int], times: Sequence[tuple[float, float]] | None,
            source_ms: float = 10_000.0) -> Emission:
    emission = output.commit([*output.committed, *tokens], ToyTokenizer(PIECES), source_ms, source_ms, False, times)
    assert emission is not None
    return emission


def test_an_emission_and_its_words_are_timed_by_their_tokens() -> None:
    output = Output()
    first = _commit(output, [1, 2, 3, 4], [(100.0, 400.0), (400.0, 700.0), (900.0, 1100.0), (1100.0, 1200.0)])
    assert first.text == "And so 3."
    assert first.words == (Word("And", 100.0, 400.0), Word("so", 400.0, 700.0), Word("3.", 900.0, 1200.0))
    assert (first.start_ms, first.end_ms) == (100.0, 1200.0)
    # "3." then "5 percent": the word "3.5" is split across the emissions; the second's first piece joins it. A
    # token timed before one committed earlier starts no earlier than it (1000 -> 1100: the "." started there)
    second = _commit(output, [5, 6, 7], [(1000.0, 1300.0), (1300.0, 1500.0), (1500.0, 1900.0)])
    assert second.text == "5 percent"
    assert second.words == (Word("5", 1100.0, 1300.0, joins_previous=True), Word("percent", 1300.0, 1900.0))
    assert spoken_words(output.emissions) == [Word("And", 100.0, 400.0), Word("so", 400.0, 700.0),
                                              Word("3.5", 900.0, 1300.0), Word("percent", 1300.0, 1900.0)]
    # times are kept within the audio read; an untimed emission has words without times
    third = _commit(output, [8], [(2000.0, 2600.0)], source_ms=2500.0)
    assert (third.start_ms, third.end_ms) == (2000.0, 2500.0)
    untimed = _commit(output, [2], None)
    assert untimed.words == (Word("so", None, None),) and untimed.start_ms is untimed.end_ms is None
    blank = _commit(output, [9], [(3000.0, 3100.0)])  # text without words: no times
    assert blank.words == () and blank.start_ms is None


def test_a_character_split_across_tokens_belongs_to_the_token_that_completes_it() -> None:
    # a byte-level tokenizer: "é" is two tokens, the first of which decodes to a replacement character
    def decode(tokens: list[int]) -> str:
        return bytes(tokens).decode("utf-8", errors="replace")

    word = list(" café".encode())  # 6 bytes, 6 tokens: " ", "c", "a", "f", and "é" in two
    assert text_ends(word, decode, "", " café") == [1, 2, 3, 4, 4, 5]


def test_the_mt_stage_times_a_translation_by_the_source_it_consumed() -> None:
    stage = MTStage(ScriptedMT(), MTOptions(policy=PolicyOptions.parse("la-2"), sentences=False))
    assert stage.push("the cat", 1000.0, 1100.0, spoken=(200.0, 900.0)) == []  # LA-2: two agreeing hypotheses
    assert stage.push(" sat", 2000.0, 2100.0, spoken=(1000.0, 1400.0)) == []  # "el gato" / "la gata se sentó"
    out = stage.push(" on", 3000.0, 3100.0, spoken=(1500.0, 1800.0))
    # the first target emission consumed the three source increments: from the first's start to the last's end
    assert [(e.text.split(), e.start_ms, e.end_ms) for e in out] == [(["la", "gata", "se", "sentó"], 200.0, 1800.0)]
    assert {(w.start_ms, w.end_ms) for w in out[0].words} == {(200.0, 1800.0)}  # (no word alignment in MT)
    out = stage.finish(" the mat", 4000.0, 4100.0, spoken=(1900.0, 2600.0))
    assert [(e.start_ms, e.end_ms) for e in out] == [(1900.0, 2600.0)]
    untimed = MTStage(ScriptedMT(), MTOptions(policy=PolicyOptions.parse("la-1"), sentences=False))
    assert [e.start_ms for e in untimed.push("the cat", 1000.0, 1100.0)] == [None]


# ----------------------------------------------------------------------------------------- output formats


def _timed(text: str, source_ms: float, start: float | None, end: float | None) -> Emission:
    words = tuple(Word(piece, start, end) for piece in text.split())
    return Emission(text, (), source_ms, source_ms + 50.0, False, start, end, words)


def test_tsv_and_whisper_streaming_lines_hand_worked() -> None:
    emission = _timed(" ask not\twhat", 5400.0, 3290.4, 4500.6)
    assert TSV_HEADER == "start\tend\ttext\n"
    assert tsv_line(emission) == "3290\t4501\task not what\n"  # openai-whisper: integer ms, text stripped
    assert tsv_line(_timed(" so", 900.0, None, None)) == "\t\tso\n" and tsv_line(_timed(" ", 900.0, 1.0, 2.0)) == ""
    # whisper_streaming: emission time, begin, end ("%1.4f %1.0f %1.0f %s"), the increment with its leading space
    assert whisper_streaming_line(emission) == "5400.0000 3290 4501  ask not\twhat\n"
    assert whisper_streaming_line(emission, wall_ms=6012.34567) == "6012.3457 3290 4501  ask not\twhat\n"
    assert whisper_streaming_line(_timed(" so", 900.0, None, None)) == "900.0000 900 900  so\n"
    assert whisper_streaming_line(_timed("", 900.0, None, None)) == ""


def test_stream_output_writes_tsv_and_whisper_streaming_files(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    emissions = [_timed("And so", 1800.0, 330.0, 1020.0), _timed(" my fellow", 2400.0, 1020.0, 1740.0)]
    for fmt, want in (("tsv", "start\tend\ttext\n330\t1020\tAnd so\n1020\t1740\tmy fellow\n"),
                      ("whisper-streaming", "1800.0000 330 1020 And so\n2400.0000 1020 1740  my fellow\n")):
        path = tmp_path / f"out.{fmt}"
        output = StreamOutput(fmt, str(path))
        with output.streaming(end_ms=lambda: 3000.0):
            for emission in emissions:
                output.emit(emission, 0.0)
        assert path.read_text(encoding="utf-8") == want
        assert "And so" in capsys.readouterr().out  # the live lines still on stdout
    with pytest.raises(OptionError):
        StreamOutput("json", str(tmp_path / "x"))
    with pytest.raises(OptionError):
        StreamOutput("srt", cue_times="later")


def test_captions_follow_the_spoken_times_or_the_commit_times() -> None:
    emissions = [_timed(" And so my", 1800.0, 330.0, 1060.0), _timed(" fellow Americans.", 3000.0, 1460.0, 2010.0),
                 _timed(" Ask not.", 5400.0, 3290.0, 4290.0)]
    spoken = parse_captions(render_subtitles(emissions, "srt", end_ms=6000.0))
    assert [(c.start_ms, c.end_ms, c.text) for c in spoken] == [
        (330.0, 3290.0, "And so my fellow Americans."),  # ends when the next caption starts (before 2010 + 1500)
        (3290.0, 6000.0, "Ask not."),
    ]
    committed = parse_captions(render_subtitles(emissions, "srt", end_ms=6000.0, times="commit"))
    assert [(c.start_ms, c.end_ms) for c in committed] == [(1800.0, 4500.0), (5400.0, 6000.0)]
    sink = io.StringIO()
    writer = SubtitleWriter(sink, "vtt", times="spoken")
    assert writer.add(emissions[0]) == [] and writer.add(emissions[1]) == []  # written once the next one starts
    assert [c.start_ms for c in writer.add(emissions[2])] == [330.0]


# ----------------------------------------------------------------------------------------- real Whisper tiny.en


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    """One intra-op thread for this module's real decoding: fast on a shared machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def model() -> WhisperModel:
    from simulst.models.loading import load_model

    loaded = load_model("whisper-tiny.en")
    assert isinstance(loaded, WhisperModel)
    return loaded


def _norm(word: str) -> str:
    return re.sub(r"[^a-z0-9']", "", word.lower())


def offline_words(model: WhisperModel, audio: np.ndarray) -> list[tuple[str, float]]:
    """The reference: the whole file decoded offline (greedy) and force-aligned in one pass
    (``WhisperModel.token_starts``), the word boundaries next to pauses moved as the stream moves them; each word
    with its start in ms."""
    costs = Costs()
    enc = model.encode(audio, costs)
    prompt = tuple(model.prompt(enc, costs))
    tokens = list(BeamSearch(1).search(model, Query(enc, (), 224, True, prompt), SearchState(), costs)[0].tokens)
    frames = model.token_starts(enc, prompt, tokens, costs)
    tokenizer, rate = model.tokenizer, model.sample_rate
    spans = snapped_spans([f * model.frame_samples for f in frames], [tokenizer.starts_word(t) for t in tokens],
                          [tokenizer.is_punctuation(t) for t in tokens], pauses(audio, rate), round(0.6 * rate))
    words: list[list[Any]] = []
    for token, (start, _) in zip(tokens, spans, strict=True):
        piece = tokenizer.decode([token])
        if not words or piece.startswith(" "):
            words.append([piece.strip(), start * 1000.0 / rate])
        else:
            words[-1][0] += piece
    return [(text, ms) for text, ms in words if _norm(text)]


def _streams(model: WhisperModel) -> Iterator[tuple[str, np.ndarray, Session]]:
    for uid, path, _ in english_items():
        audio = load_audio(path)
        session = Session(model, StreamOptions())
        feed_fast(session, audio)
        yield uid, audio, session


@pytest.fixture(scope="module")
def streamed(model: WhisperModel) -> list[tuple[str, np.ndarray, Session]]:
    """jfk and the 5 FLEURS English utterances streamed with the default options (600 ms chunks, a 5 s segment and
    an 8 s buffer: each stream is trimmed, so its times cross trims)."""
    return list(_streams(model))


@pytest.mark.real
@needs_shared
def test_srt_cue_starts_are_within_0_3_s_of_the_words_spoken_times(
        model: WhisperModel, streamed: list[tuple[str, np.ndarray, Session]]) -> None:
    checked = 0
    for uid, audio, session in streamed:
        reference = offline_words(model, audio)
        captions = parse_captions(render_subtitles(session.emissions, "srt", end_ms=len(audio) * 1000.0 / 16000))
        words = [w for e in session.emissions for w in e.text.split()]
        matcher = difflib.SequenceMatcher(a=[_norm(w) for w in words], b=[_norm(w) for w, _ in reference],
                                          autojunk=False)
        same = {a + k: b + k for a, b, size in matcher.get_matching_blocks() for k in range(size)}
        first = 0
        for caption in captions:  # each caption starts with a word of the stream: where the reference has it
            if first in same:
                want = reference[same[first]][1]
                assert abs(caption.start_ms - want) <= 300.0, (uid, caption, reference[same[first]])
                checked += 1
            first += len(caption.text.split())
    assert checked >= 12  # (15 captions of the 6 utterances have their first word in the offline text)


@pytest.mark.real
@needs_shared
def test_every_emission_is_timed_in_order_within_the_audio(streamed: list[tuple[str, np.ndarray, Session]]) -> None:
    trimmed = [uid for uid, _, session in streamed if session.costs.extra.get("trims", 0)]
    assert "jfk" in trimmed and len(trimmed) >= 3  # (times after a trim are on the whole stream's clock)
    for uid, audio, session in streamed:
        starts = []
        for e in session.emissions:
            assert e.start_ms is not None and e.end_ms is not None, (uid, e)
            assert 0.0 <= e.start_ms <= e.end_ms <= min(e.source_ms, len(audio) * 1000.0 / 16000), (uid, e)
            assert [w.text for w in e.words] == e.text.split()
            assert all(w.start_ms is not None and w.end_ms is not None and w.start_ms <= w.end_ms for w in e.words)
            starts += [e.start_ms, *(w.start_ms for w in e.words)]
        assert starts == sorted(starts), uid


@pytest.mark.real
@needs_shared
def test_the_search_records_the_rows_a_forced_pass_computes(model: WhisperModel) -> None:
    # greedy search (the draft pass, then steps) and a 4-beam search (reordered beams): the best hypothesis's
    # recorded rows are the rows of one forced pass over its tokens, up to float rounding, and time it alike
    audio = load_audio(JFK)[: 16000 * 6]
    costs = Costs()
    enc = model.encode(audio, costs)
    prompt = tuple(model.prompt(enc, costs))
    for beam in (1, 4):
        hyp = BeamSearch(beam).search(model, Query(enc, (), 60, True, prompt), SearchState(), costs)[0]
        assert hyp.finished and isinstance(hyp.alignment, Traced)
        n = len(hyp.tokens)
        layers = sorted(model._alignment_by_layer)
        with torch.inference_mode():
            recorded = torch.cat([head_scores_of(q, enc.extra[layer][0][0], model._alignment_by_layer[layer])
                                  for layer, q in zip(layers, hyp.alignment.rows(), strict=True)])
            assert recorded.shape[1] == n + 1  # a row per token, and the one that predicts <|endoftext|>
            scores: list[torch.Tensor] = []
            full = torch.tensor([[*prompt, *hyp.tokens, model.eos_id]])
            model.net.model.decoder(full, 0, None, enc.extra, alignment_heads=model._alignment_by_layer,
                                    scores=scores)
        forced = torch.cat([s[0] for s in scores])[:, len(prompt) - 1 : len(prompt) + n]
        assert torch.allclose(recorded, forced, atol=1e-3), beam
        assert model.traced_starts(enc, hyp.alignment, n) == model.token_starts(enc, prompt, hyp.tokens, Costs())
        assert len(model.traced_starts(enc, hyp.alignment, n + 1) or []) == n + 1  # no row after: no end entry
        assert model.traced_starts(enc, hyp.alignment, n + 2) is None  # the rows stop there


@pytest.mark.real
@needs_shared
def test_hand_made_queries_are_timed_by_dtw(model: WhisperModel) -> None:
    # keys: frame f of every head points along axis f // 10; queries: row r along axis r. So the alignment heads'
    # row r attends frames 10r..10r+9: tokens start at frames 0, 10, 20 (the last row: where the text ends)
    heads, dim = model.dims.decoder_attention_heads, model.dims.d_model // model.dims.decoder_attention_heads
    keys = torch.zeros(1, heads, 40, dim)
    for frame in range(40):
        keys[0, :, frame, frame // 10] = 1.0
    enc = Encoded(frames=torch.zeros(1, 40, 1), audio_samples=30 * model.frame_samples,
                  extra=[(keys, keys)] * model.dims.decoder_layers)
    queries = torch.zeros(1, heads, 3, dim)
    for row in range(3):
        queries[0, :, row, row] = 40.0
    trace = RowTrace.first([queries] * len(model._alignment_by_layer))
    assert model.traced_starts(enc, Traced(trace, 0), 2) == [0, 10, 20]
    assert model.traced_starts(enc, Traced(trace, 0), 3) == [0, 10, 20]  # the last token, no row after it
    assert model.traced_starts(enc, Traced(trace, 0), 4) is None
    assert model.traced_starts(enc, None, 2) is None


@pytest.mark.real
@needs_shared
def test_long_form_trimming_reads_the_recorded_timing_instead_of_a_forced_pass(
        model: WhisperModel, streamed: list[tuple[str, np.ndarray, Session]]) -> None:
    _, audio, traced = streamed[0]
    model.tracing = False
    try:
        forced = Session(model, StreamOptions())
        feed_fast(forced, audio)
    finally:
        model.tracing = True
    assert [(e.text, e.source_ms) for e in forced.emissions] == [(e.text, e.source_ms) for e in traced.emissions]
    assert forced.costs.extra == traced.costs.extra and forced.costs.encoder_calls == traced.costs.encoder_calls
    assert traced.costs.decoder_calls < forced.costs.decoder_calls  # (jfk: 50 passes for 55)
    assert all(e.start_ms is None and e.words == tuple(Word(w, None, None) for w in e.text.split())
               for e in forced.emissions)


@pytest.mark.real
@needs_shared
def test_batched_streams_have_the_emissions_of_streams_alone_times_included(model: WhisperModel) -> None:
    audios = [load_audio(path)[: 16000 * 5 - 1000 * i] for i, (_, path, _) in enumerate(english_items()[:3])]
    options = [StreamOptions(), StreamOptions(search=SearchOptions(name="beam", beam=3)),
               StreamOptions(policy=PolicyOptions.parse("hold-2"))]
    alone = [s.emissions for s in stream_in_rounds(SerialRunner(), model, audios, options)]
    batcher = Batcher(model, max_streams=4)
    together = [s.emissions for s in stream_in_rounds(batcher, model, audios, options)]
    batcher.close()
    def timed(streams: list[list[Emission]]) -> list[list[tuple[Any, ...]]]:  # (elapsed_ms: compute time differs)
        return [[(e.text, e.tokens, e.source_ms, e.final, e.start_ms, e.end_ms, e.words) for e in s] for s in streams]

    assert timed(together) == timed(alone)
    assert all(e.start_ms is not None for stream in alone for e in stream)
    assert batcher.stats.largest["step"] >= 2


@pytest.mark.real
@needs_shared
def test_cli_json_tsv_and_whisper_streaming_carry_the_spoken_times(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clip = tmp_path / "jfk-4s.wav"  # (the first 4 s: "And so my fellow Americans", quick)
    sf.write(str(clip), load_audio(JFK)[: 4 * 16000], 16000)
    args = ["transcribe", str(clip), "--chunk-ms", "1000"]
    assert main([*args, "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    emissions = [line for line in lines if line["event"] == "emission"]
    assert all(e["start_ms"] <= e["end_ms"] <= e["source_ms"] for e in emissions)
    assert [w["text"] for e in emissions for w in e["words"]] == "".join(e["text"] for e in emissions).split()
    assert main([*args, "--format", "tsv", "-o", str(tmp_path / "jfk.tsv")]) == 0
    rows = (tmp_path / "jfk.tsv").read_text(encoding="utf-8").splitlines()
    assert rows[0] == "start\tend\ttext"
    assert [r.split("\t") for r in rows[1:]] == [[str(round(e["start_ms"])), str(round(e["end_ms"])),
                                                   e["text"].strip()] for e in emissions]
    capsys.readouterr()
    assert main([*args, "--format", "whisper-streaming"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == ["%1.4f %1.0f %1.0f %s" % (e["source_ms"], e["start_ms"], e["end_ms"], e["text"])  # noqa: UP031
                   for e in emissions]
