"""The registries of policies and searches: a policy registered from outside the package (here: this test file,
with the decorator) is a policy everywhere - ``PolicyOptions.parse``, ``simulst transcribe --policy``, its help,
``simulst --list-policies``, the errors, the web page's list - with no other file touched."""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from simulst.cli.main import build_parser, main
from simulst.config import POLICIES, SEARCHES, PolicyOptions, SearchOptions, StreamOptions
from simulst.errors import OptionError
from simulst.evaluation.quality import normalize_for_wer
from simulst.mt.options import MTOptions
from simulst.policies import Policy, PolicyContext, PolicyState, make_policy, register_policy
from simulst.search import BeamSearch, Searcher, make_searcher, register_searcher
from simulst.search.stopping import StopRule
from simulst.server.service import ServerConfig, Service
from simulst.streaming.session import Session
from simulst.types import Hypothesis
from tests.shared_assets import JFK, WHISPER_TINY_EN, needs_shared
from tests.toy import ToySpeechModel, tone

cli_main = importlib.import_module("simulst.cli.main")  # (the package's ``main`` function hides the module)


class EveryNth(Policy):
    """After every N-th chunk, commit the best hypothesis minus its last token; nothing after the others (a toy)."""

    minimum_n = 1

    def __init__(self, n: int) -> None:
        self.n = n

    @classmethod
    def from_options(cls, options: PolicyOptions, chunk_ms: float | None) -> Policy:
        return cls(options.n)

    def stable_prefix(self, hyps: Sequence[Hypothesis], state: PolicyState, context: PolicyContext) -> tuple[int, ...]:
        state.observe((), 0)
        return tuple(hyps[0].tokens[:-1]) if state.chunks % self.n == 0 else ()


@pytest.fixture
def toy_policy() -> Iterator[None]:
    """``toy-N`` (:class:`EveryNth`) registered for one test (a module-level decorator would do for a plugin; a
    test takes it out again, so that the other tests see the built-in policies only)."""
    register_policy("toy", syntax="toy-N", pattern=r"toy-?(\d+)", text_source=False,
                    help="after every N-th chunk, commit the best hypothesis minus its last token (a toy)")(EveryNth)
    try:
        yield
    finally:
        POLICIES.unregister("toy")


@pytest.fixture
def toy_search() -> Iterator[None]:
    @register_searcher("toy-greedy", help="greedy search, registered by a test")
    def toy(options: SearchOptions, stop: StopRule | None) -> Searcher:
        return BeamSearch(1, options.length_penalty)

    try:
        yield
    finally:
        SEARCHES.unregister("toy-greedy")


def test_a_registered_policy_is_parsed_built_listed_and_checked(toy_policy: None,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    options = PolicyOptions.parse("Toy-3")
    assert options == PolicyOptions("toy", 3) and str(options) == "toy-3"
    policy = make_policy(options, 1000.0)
    assert isinstance(policy, EveryNth) and policy.n == 3
    with pytest.raises(OptionError, match="n must be >= 1"):
        PolicyOptions.parse("toy-0")
    with pytest.raises(OptionError, match="toy-N"):  # the errors list it
        PolicyOptions.parse("toys")
    with pytest.raises(OptionError, match="reads committed text"):  # a capability, not a name list
        MTOptions(policy=options)
    assert "toy-2" in Service(ToySpeechModel(), ServerConfig()).offered_policies()  # the web page's list
    with pytest.raises(SystemExit) as exited:
        main(["--list-policies"])
    assert exited.value.code == 0
    listed = capsys.readouterr().out
    assert "toy-N" in listed and "after every N-th chunk" in listed and "la-N" in listed
    help_text = build_parser()._subparsers._group_actions[0].choices["transcribe"].format_help()  # type: ignore[union-attr]
    assert "toy-N" in help_text


def test_a_registered_policy_runs_through_simulst_transcribe(toy_policy: None, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    # the toy model (it hears a word every 0.7 s) stands in for Whisper: the rest is the real CLI
    monkeypatch.setattr(cli_main, "model_from_args", lambda args, task="transcribe": ToySpeechModel())
    audio = tmp_path / "tone.wav"
    sf.write(str(audio), np.repeat(tone(6000), 16), 16000)
    # transcription listens with Silero VAD by default, which cannot read the toy's 1000 Hz: a clear refusal
    assert main(["transcribe", str(audio), "--policy", "toy-2", "--chunk-ms", "1000", "--json"]) == 2
    assert "this model's is 1000 Hz: turn the VAD off (--no-vad" in capsys.readouterr().err
    # (the toy's scores are made for greedy search, not the balanced preset's beam)
    assert main(["transcribe", str(audio), "--policy", "toy-2", "--chunk-ms", "1000", "--json", "--no-vad",
                 "--search", "greedy"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    emissions, final = records[:-1], records[-1]
    assert final["text"] == "the cat sat on the mat"
    # committed after chunks 2 and 4 only, the rest at the end of the source
    assert {e["source_ms"] for e in emissions} == {2000.0, 4000.0, 6000.0}


@pytest.mark.real
@needs_shared
def test_a_registered_policy_runs_whisper_through_simulst_transcribe(toy_policy: None,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["transcribe", str(JFK), "--model", str(WHISPER_TINY_EN), "--policy", "toy-3", "--chunk-ms", "1000",
                 "--json"])
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    emissions, final = records[:-1], records[-1]
    assert code == 0 and "my fellow americans ask not what" in normalize_for_wer(final["text"])  # (a toy's quality)
    assert len(emissions) >= 2 and all(e["source_ms"] % 3000.0 == 0.0 for e in emissions[:-1])


def test_a_registered_search_is_an_option_and_a_searcher(toy_search: None, capsys: pytest.CaptureFixture[str]) -> None:
    options = StreamOptions(search=SearchOptions("toy-greedy"))
    assert isinstance(make_searcher(options.search), BeamSearch)
    with pytest.raises(OptionError, match="greedy and beam search"):  # not steerable: no stop rule
        make_searcher(options.search, make_policy(PolicyOptions.parse("alignatt"), 1000.0).stop_rule())
    with pytest.raises(OptionError, match="toy-greedy"):
        SearchOptions("viterbi")
    with pytest.raises(SystemExit):
        main(["--list-searches"])
    assert "toy-greedy" in capsys.readouterr().out


def test_the_builtins_are_registered_by_their_modules() -> None:
    assert set(POLICIES.names()) == {"offline", "la", "hold", "sp", "ba", "wait", "ctc", "alignatt"}
    assert set(SEARCHES.names()) == {"greedy", "beam", "bwbs", "ibwbs", "ibwbs2", "rewind"}
    for spec in POLICIES.entries():  # every example parses back to its policy, and builds it
        options = PolicyOptions.parse(spec.example)
        assert options.name == spec.name and isinstance(make_policy(options, 1000.0), Policy)
    assert [s.name for s in POLICIES.entries() if not s.text_source] == ["alignatt", "ctc"]
    with pytest.raises(ValueError, match="already registered"):
        register_policy("la", syntax="la-N", pattern=r"la-?(\d+)", help="another")(EveryNth)


def test_the_offline_policy_is_listed_as_the_stream_runs_it() -> None:
    # no chunk is decoded: the buffer (the whole window) is committed whole at the source's end, when it is full and
    # at a VAD pause; in a cascade's MT stage, once at the end
    from simulst.cli.main import describe_policies

    listed = " ".join(describe_policies().split())
    entry = listed[listed.index("offline "):listed.index(" sp-N ")]
    assert all(part in entry for part in ("source ends", "fills the model's window", "--vad", "MT stage"))
    session = Session(ToySpeechModel(), StreamOptions(chunk_ms=1000, policy=PolicyOptions("offline", 0)))
    early = session.push(tone(61_000))  # (the toy model's window: 60 s)
    assert early and early[0].source_ms == 60_000.0 and session.costs.decoder_calls > 0
    assert session.costs.extra["segment_commits"] == 1


def test_the_registry_module_examples_hold() -> None:
    import doctest

    from simulst.config import registry

    result = doctest.testmod(registry)
    assert result.attempted > 0 and result.failed == 0
