"""The SimulEval agent: SimulEval's loop drives a Session, and ``simuleval --agent-class`` evaluates simulst end to
end with the same output and delays as ``simulst eval``."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf

from simulst.config import PolicyOptions, SearchOptions, StreamOptions
from simulst.evaluation.instances import read_log
from simulst.evaluation.manifest import read_simuleval_lists
from simulst.evaluation.runner import EvalOptions, run_eval
from simulst.evaluation.scoring import score_log
from simulst.streaming.engine import SpeechEngine
from tests.toy import ToySpeechModel, tone

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(__file__).resolve().parents[2] / "shared"
WHISPER = SHARED / "models" / "whisper-tiny.en"

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("simuleval") is None, reason="simuleval not installed"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]


def _la2() -> StreamOptions:
    return StreamOptions(chunk_ms=1000, policy=PolicyOptions.parse("la-2"), search=SearchOptions("greedy"))


def _agent_class() -> Any:
    from simulst.cli.simuleval_agent import SimulstAgent

    return SimulstAgent


if importlib.util.find_spec("simuleval") is not None:
    from simulst.cli.simuleval_agent import SimulstAgent

    class ToyAgent(SimulstAgent):
        """The agent on the toy model (1000 samples/s; hears a word every 700 ms), LA-2 at 1 s chunks."""

        def __init__(self, args: argparse.Namespace | None = None) -> None:
            super().__init__(args, model=ToySpeechModel(), options=_la2())

        @staticmethod
        def add_args(parser: argparse.ArgumentParser) -> None:
            pass


def _segment(samples: np.ndarray, rate: int, finished: bool) -> Any:
    from simuleval.data.segments import SpeechSegment

    return SpeechSegment(index=0, content=samples.tolist(), sample_rate=rate, finished=finished)


def _drive(agent: Any, audio: np.ndarray, rate: int, segment_ms: int) -> list[tuple[str, bool, int]]:
    """SimulEval's loop: one pushpop per segment until the finished one; returns (text, finished, samples read)."""
    step = segment_ms * rate // 1000
    out = []
    pos = 0
    while pos < audio.shape[0]:
        piece = audio[pos : pos + step]
        pos += piece.shape[0]
        segment = agent.pushpop(_segment(piece, rate, pos >= audio.shape[0]))
        if not segment.is_empty:
            out.append((segment.content, segment.finished, pos))
    return out


def test_one_policy_call_per_segment_and_flush_at_the_end() -> None:
    agent = _agent_class()(model=ToySpeechModel(), options=_la2())
    writes = _drive(agent, tone(5000), 1000, 1000)
    # the toy LA-2 schedule (test_session.py): the@2 s, cat@3 s, sat on@4 s, then "the" + "mat" at the end
    assert writes == [("the", False, 2000), (" cat", False, 3000), (" sat on", False, 4000),
                      (" the mat", True, 5000)]
    agent.reset()  # SimulEval resets between instances: a fresh Session, same model
    assert agent.session.text == "" and _drive(agent, tone(5000), 1000, 1000) == writes


def test_small_segments_and_resampling() -> None:
    agent = _agent_class()(model=ToySpeechModel(), options=_la2())
    writes = _drive(agent, tone(5000), 1000, 300)
    # the chunk boundaries (2 s, 3 s, 4 s) are decoded at the first segment that crosses them
    assert [(t, n) for t, _, n in writes] == [("the", 2100), (" cat", 3000), (" sat on", 4200), (" the mat", 5000)]
    agent.reset()
    at_2k = np.repeat(tone(5000), 2)  # the same audio at 2000 samples/s: resampled to the model's 1000
    texts = "".join(t for t, _, _ in _drive(agent, at_2k, 2000, 1000))
    assert texts == "the cat sat on the mat"


def test_add_args_accepts_simulst_options() -> None:
    parser = argparse.ArgumentParser(conflict_handler="resolve")
    parser.add_argument("--device", default="cpu")  # SimulEval's own option; ours resolves the clash
    _agent_class().add_args(parser)
    args = parser.parse_args(["--policy", "hold-3", "--chunk-ms", "500", "--task", "transcribe"])
    from simulst.cli.options import stream_options_from_args

    assert str(stream_options_from_args(args).policy) == "hold-3"


def _simuleval(agent_class: str, src: Path, tgt: Path, out: Path, segment_ms: int, *extra: str) -> None:
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "simuleval.cli", "--agent-class", agent_class, "--source", str(src),
           "--target", str(tgt), "--source-segment-size", str(segment_ms), "--output", str(out),
           "--no-progress-bar", "--quality-metrics", "BLEU", "--latency-metrics", "AL", "LAAL", *extra]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_simuleval_cli_with_the_toy_agent_equals_simulst_eval(tmp_path: Path) -> None:
    (tmp_path / "wav").mkdir()
    for name, ms in (("u0", 5000), ("u1", 3500)):
        sf.write(tmp_path / "wav" / f"{name}.wav", tone(ms), 1000, subtype="FLOAT")
    src, tgt = tmp_path / "src.txt", tmp_path / "tgt.txt"
    src.write_text(f"{tmp_path}/wav/u0.wav\n{tmp_path}/wav/u1.wav\n")
    tgt.write_text("the cat sat on the mat\nthe cat sat on\n")
    _simuleval("tests.test_simuleval_agent.ToyAgent", src, tgt, tmp_path / "simuleval", 1000)
    ours = tmp_path / "simulst"
    run_eval(SpeechEngine(ToySpeechModel()), _la2(), read_simuleval_lists(src, tgt), ours, EvalOptions(progress=False))
    theirs = read_log(tmp_path / "simuleval")
    mine = read_log(ours)
    assert [(r.prediction, r.delays, r.source_length, r.reference) for r in theirs] == [
        (r.prediction, r.delays, r.source_length, r.reference) for r in mine
    ]
    # and our scorer reads SimulEval's log: same latency as our own log (the delays are equal)
    a, b = score_log(tmp_path / "simuleval").scores, score_log(ours).scores
    for name in ("AL", "LAAL", "AP", "DAL", "ATD", "StartOffset", "EndOffset", "BLEU", "WER_norm"):
        assert a[name] == pytest.approx(b[name], abs=1e-9), name


@pytest.mark.real
def test_simuleval_cli_with_whisper_equals_simulst_eval(tmp_path: Path) -> None:
    """simuleval --agent-class SimulstAgent on jfk with Whisper tiny.en: same output and delays as simulst eval."""
    if not WHISPER.is_dir():
        pytest.skip("../shared/models/whisper-tiny.en missing")
    wav = SHARED / "data" / "audio" / "jfk" / "jfk.wav"
    src, tgt = tmp_path / "src.txt", tmp_path / "tgt.txt"
    src.write_text(f"{wav}\n")
    tgt.write_text("And so my fellow Americans, ask not what your country can do for you, ask what you can do for "
                   "your country.\n")
    # (no held sentence end: simulst eval writes a held mark as a word of its own, "country .", where SimulEval's
    # agent output attaches it; noted on issue 37, 2026-12-02)
    opts = ["--model", str(WHISPER), "--policy", "la-2", "--chunk-ms", "1000", "--search", "greedy",
            "--no-hold-sentence-end", "--no-punctuate-held-end"]
    _simuleval("simulst.cli.simuleval_agent.SimulstAgent", src, tgt, tmp_path / "simuleval", 1000, *opts)
    from simulst.cli.options import add_stream_arguments, model_options_from_args, stream_options_from_args
    from simulst.models.loading import load_model

    parser = argparse.ArgumentParser()
    add_stream_arguments(parser)
    args = parser.parse_args(opts)  # (the options the agent resolves from the same flags: the preset under them)
    ours = tmp_path / "simulst"
    run_eval(SpeechEngine(load_model(model_options_from_args(args))), stream_options_from_args(args),
             read_simuleval_lists(src, tgt), ours, EvalOptions(progress=False))
    [theirs], [mine] = read_log(tmp_path / "simuleval"), read_log(ours)
    assert theirs.prediction == mine.prediction
    assert theirs.delays == mine.delays and theirs.source_length == mine.source_length
    assert all(e >= d for e, d in zip(theirs.elapsed, theirs.delays, strict=True))
    scores = json.loads(score_log(tmp_path / "simuleval").to_json())
    assert scores["AL"] == pytest.approx(score_log(ours).scores["AL"])
