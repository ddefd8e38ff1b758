"""The Hugging Face seq2seq adapter and the MT stage on a tiny random MarianMT built offline (see cascade_fixtures)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

from simulst.config import PolicyOptions, SearchOptions, StreamOptions
from simulst.errors import ModelLoadError, OptionError
from simulst.models.base import DecoderModel
from simulst.mt.backend import MTRequest, NeuralMT
from simulst.mt.hf_seq2seq import HFSeq2SeqModel, load_hf_mt
from simulst.mt.loading import load_mt
from simulst.mt.options import MTOptions
from simulst.search import SearchState, make_searcher
from simulst.streaming.cascade import CascadeSession
from simulst.streaming.mt_stage import MTStage
from simulst.types import Costs
from tests.cascade_fixtures import build_tiny_m2m100, build_tiny_marian
from tests.toy import ToySpeechModel, push_in_pieces, tone

SOURCES = [
    "Return the list of the names in the directory.",
    "Split the string into a list of words",
]


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_tiny_marian(tmp_path_factory.mktemp("tiny-marian"))


@pytest.fixture(scope="module")
def backend(marian_dir: Path) -> NeuralMT:
    return load_hf_mt(str(marian_dir))


def model_of(backend: NeuralMT) -> HFSeq2SeqModel:
    model = backend.model
    assert isinstance(model, HFSeq2SeqModel)
    return model


def test_adapter_is_a_decoder_model(backend: NeuralMT) -> None:
    model = model_of(backend)
    assert isinstance(model, DecoderModel)
    assert model.decoder_prompt == [model.net.config.decoder_start_token_id]
    tok = model.tokenizer
    pieces = model._hf.convert_ids_to_tokens(list(range(model.vocab_size)))
    for token, piece in enumerate(pieces):
        if piece.startswith("▁"):
            assert tok.starts_word(token)
        if piece in (".", ","):
            assert tok.is_punctuation(token) and not tok.starts_word(token)
    assert tok.starts_word(model.eos_id)
    ids = tok.encode("Return the list")
    assert tok.decode(ids) == " Return the list"


@pytest.mark.parametrize("beams", [1, 4])
def test_search_equals_generate(backend: NeuralMT, beams: int) -> None:
    model = model_of(backend)
    pad = model.net.config.pad_token_id
    search = SearchOptions("greedy" if beams == 1 else "beam", beam=beams, max_new_tokens=12)
    options = MTOptions(search=search)
    for source in SOURCES:
        batch = model._hf(source, return_tensors="pt")
        generated = model.net.generate(**batch, num_beams=beams, do_sample=False, max_new_tokens=12,
                                       bad_words_ids=[[pad]], length_penalty=1.0)
        expected = [t for t in generated[0].tolist()[1:] if t not in (pad, model.eos_id)]
        costs = Costs()
        hyps = backend.translate(MTRequest(source, (), True, options, make_searcher(search), SearchState()), costs)
        assert list(hyps[0].tokens) == expected
        assert costs.encoder_calls == 1 and costs.decoder_calls >= 1


def test_forced_prefix_pass_equals_stepwise_decoding(backend: NeuralMT) -> None:
    model = model_of(backend)
    enc = model.encode_text(SOURCES[0], Costs())
    prefix = model.tokenizer.encode("the list of the names")
    costs = Costs()
    parallel, _ = model.start(enc, prefix, costs)
    assert costs.decoder_calls == 1 and costs.decoder_positions == len(prefix) + 1
    logp, state = model.start(enc, [], Costs())
    for token in prefix:
        step_logp, state = model.step(state, torch.tensor([token]), Costs())
        logp = step_logp[0]
    torch.testing.assert_close(parallel, logp, atol=1e-4, rtol=1e-4)
    # Batched steps after select(): each row equals its own forced pass.
    logp, state = model.start(enc, prefix[:2], Costs())
    state = model.expand(state, 3)
    rows = torch.tensor(prefix[2:5])
    batched, state = model.step(state, rows, Costs())
    for i, token in enumerate(rows.tolist()):
        alone, _ = model.start(enc, [*prefix[:2], token], Costs())
        torch.testing.assert_close(batched[i], alone, atol=1e-4, rtol=1e-4)
    state = model.select(state, torch.tensor([2, 0]))
    again, _ = model.step(state, torch.tensor([prefix[5], prefix[5]]), Costs())
    alone, _ = model.start(enc, [*prefix[:2], prefix[4], prefix[5]], Costs())
    torch.testing.assert_close(again[0], alone, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_whole_source_at_once_equals_offline_mt(backend: NeuralMT, search: str) -> None:
    options = MTOptions(policy=PolicyOptions.parse("la-2"), search=SearchOptions(search, beam=3), max_len_a=1.0,
                        max_len_b=4)
    for source in SOURCES:
        offline = backend.translate_text(source, options)
        stage = MTStage(backend, options)
        stage.finish(source, 4000.0, 4100.0)
        assert stage.text.strip() == offline
        stage = MTStage(backend, options)  # one non-final increment (LA-2 commits nothing), then the end
        stage.push(source, 4000.0, 4100.0)
        stage.finish("", 4000.0, 4100.0)
        assert stage.text.strip() == offline


@pytest.mark.parametrize("policy", ["la-1", "la-2", "hold-2", "wait-2"])
def test_word_by_word_never_retracts(backend: NeuralMT, policy: str) -> None:
    options = MTOptions(policy=PolicyOptions.parse(policy), max_len_a=1.0, max_len_b=4)
    words = SOURCES[0].split()
    stage = MTStage(backend, options)
    shown = ""
    for i, word in enumerate(words):
        for e in stage.push((" " if i else "") + word, 500.0 * (i + 1), 600.0 * (i + 1)):
            assert not e.final
            shown += e.text
            assert e.elapsed_ms >= 600.0 * (i + 1)
        assert stage.text == shown
    final = stage.finish("", 500.0 * len(words), 600.0 * len(words))
    shown += "".join(e.text for e in final)
    assert shown == stage.text
    assert stage.state.output.committed == [t for e in stage.emissions for t in e.tokens]
    assert stage.text.lstrip() == stage.tokenizer.decode(stage.state.output.committed).lstrip()
    assert stage.state.steps == len(words)
    # the last word completes the sentence (translated whole then): the end of the source needs no translation
    assert SOURCES[0].rstrip().endswith(".")
    assert stage.costs.decoder_calls > 0 and stage.costs.encoder_calls == len(words)


def test_cascade_with_marian_on_the_audio_timeline(backend: NeuralMT) -> None:
    options = StreamOptions(chunk_ms=1000, policy=PolicyOptions.parse("la-2"))
    cascade = CascadeSession(ToySpeechModel(), backend, options,
                             MTOptions(policy=PolicyOptions.parse("hold-1"), max_len_a=1.0, max_len_b=3))
    audio_ms = 5000
    out = push_in_pieces(cascade, tone(audio_ms), 1000)
    asr_times = {e.source_ms: e.elapsed_ms for e in cascade.source_emissions}
    assert cascade.source_text == "the cat sat on the mat"
    assert out and out[-1].final
    for e in out[:-1]:
        assert e.source_ms in asr_times and e.elapsed_ms >= asr_times[e.source_ms]
    assert out[-1].source_ms == audio_ms  # the final translation: when the audio ended
    assert "".join(e.text for e in out) == cascade.text
    assert cascade.costs.decoder_calls == cascade.asr.costs.decoder_calls + cascade.mt.costs.decoder_calls


def test_load_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError):
        load_mt(str(tmp_path / "missing"), "en", "es")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelLoadError):
        load_mt(str(tmp_path / "empty"), "en", "es")
    with pytest.raises(ModelLoadError):
        load_mt("Helsinki-NLP/opus-mt-no-such-model", "en", "es")  # the hub is unreachable or lacks it


def test_m2m100_target_language_selection(marian_dir: Path, tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        directory = build_tiny_m2m100(tmp_path / "m2m", marian_dir)
    backend = load_hf_mt(str(directory), "en", "es")
    model = model_of(backend)
    es = model._hf.get_lang_id("es")
    assert model.decoder_prompt == [model.eos_id, es]  # decoder start </s>, then the forced target-language token
    assert model._hf("Return the list")["input_ids"][0] == model._hf.get_lang_id("en")
    assert es in model._suppress.tolist()  # language tokens are never generated
    search = SearchOptions("beam", beam=3, max_new_tokens=8)
    batch = model._hf(SOURCES[0], return_tensors="pt")
    generated = model.net.generate(**batch, decoder_input_ids=torch.tensor([model.decoder_prompt]), num_beams=3,
                                   max_new_tokens=8, suppress_tokens=model._suppress.tolist(), length_penalty=1.0)
    expected = [t for t in generated[0].tolist()[2:] if t != model.eos_id]
    hyps = backend.translate(MTRequest(SOURCES[0], options=MTOptions(search=search)), Costs())
    assert list(hyps[0].tokens) == expected
    stage = MTStage(backend, MTOptions(search=search))
    stage.finish(SOURCES[0], 1000.0, 1000.0)
    assert stage.text.strip() == backend.translate_text(SOURCES[0], MTOptions(search=search))
    with pytest.raises(OptionError):
        load_hf_mt(str(directory), "en", None)
    with pytest.raises(OptionError):
        load_hf_mt(str(directory), "en", "xx-unknown")
