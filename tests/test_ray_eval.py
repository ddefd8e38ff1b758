"""``simulst eval`` / ``simulst sweep`` on a Ray cluster (:mod:`simulst.evaluation.cluster`).

A local cluster in this process (``ray.init(num_cpus=2)``): results equal a local run's but for the measured
compute times, a rerun resumes, a failing instance is reported and the others kept. Two Ray nodes started as
separate processes (``ray start --head`` and ``ray start --address``): the tasks run on both, a worker killed
mid-sweep is retried and the sweep completes equal to the local one, and a rerun has nothing left to do.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from simulst.cli.main import main
from simulst.config import ModelOptions, PolicyOptions, StreamOptions
from simulst.errors import OptionError
from simulst.evaluation.instances import LOG_NAME
from simulst.evaluation.manifest import TestItem, read_manifest
from simulst.evaluation.runner import EvalOptions, run_eval
from simulst.evaluation.sweep import build_grid, run_sweep
from simulst.streaming.engine import SpeechEngine
from tests.shared_assets import DATA, needs_shared

ray = pytest.importorskip("ray")
from simulst.evaluation.cluster import (  # noqa: E402  (after the skip: the module needs no Ray, its use does)
    NODES_LOG,
    ClusterOptions,
    ClusterRun,
    ClusterRunError,
    run_on_cluster,
)
from simulst.evaluation.sweep import run_sweep_on_cluster  # noqa: E402

pytestmark = [pytest.mark.ray, needs_shared, pytest.mark.usefixtures("one_ray_at_a_time")]

IDS = ("jfk", "fleurs-en-003", "fleurs-en-004")  # the shortest real utterances: 11, 7 and 8 s
OPTIONS = StreamOptions(policy=PolicyOptions.parse("la-2"), chunk_ms=1000.0)
QUIET = EvalOptions(progress=False)
TIMED = ("_CA", "ComputeRTF")  # score names that measure compute time


def write_manifest(path: Path, ids: tuple[str, ...] = IDS) -> Path:
    rows = []
    for manifest in ("jfk.tsv", "fleurs-en-dev.tsv"):
        for line in (DATA / manifest).read_text(encoding="utf-8").splitlines()[1:]:
            uid, audio, duration, text = line.split("\t")[:4]
            if uid in ids:
                rows.append(f"{uid}\t{DATA / audio}\t{duration}\t{text}")
    path.write_text("id\taudio\tduration_s\ttranscript\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return path


def untimed(log: Path) -> list[str]:
    """The log's lines with the measured compute times zeroed: the rest is deterministic."""
    out = []
    for line in log.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        record["elapsed"] = [0.0] * len(record["elapsed"])
        record["simulst"]["compute_ms"] = 0.0
        for emission in record["simulst"]["emissions"]:
            emission["elapsed_ms"] = 0.0
        out.append(json.dumps(record, ensure_ascii=False))
    return out


def untimed_scores(scores: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in scores.items() if not any(t in k for t in TIMED)}


@pytest.fixture(scope="module")
def items(tmp_path_factory: pytest.TempPathFactory) -> list[TestItem]:
    return read_manifest(write_manifest(tmp_path_factory.mktemp("set") / "set.tsv"))


@pytest.fixture(scope="module")
def local_run(items: list[TestItem], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reference: the same evaluation in this process, with the workers' one torch thread."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        out = tmp_path_factory.mktemp("local")
        run_eval(SpeechEngine.load(ModelOptions()), OPTIONS, items, out, QUIET)
    finally:
        torch.set_num_threads(threads)
    return out


@pytest.fixture(scope="module")
def local_cluster() -> Iterator[ClusterOptions]:
    options = ClusterOptions(local_cpus=2)
    yield options
    ray.shutdown()


def test_eval_on_a_local_cluster_equals_the_local_run_and_resumes(
        items: list[TestItem], local_run: Path, local_cluster: ClusterOptions, tmp_path: Path) -> None:
    out = tmp_path / "ray"
    report = run_on_cluster(ModelOptions(), [ClusterRun(OPTIONS, out)], items, QUIET, local_cluster)[0]
    assert sorted(p.name for p in local_run.iterdir()) == sorted(p.name for p in out.iterdir() if p.name != NODES_LOG)
    assert untimed(out / LOG_NAME) == untimed(local_run / LOG_NAME)
    local_scores = json.loads((local_run / "scores.json").read_text(encoding="utf-8"))["scores"]
    assert untimed_scores(dict(report.scores)) == untimed_scores(local_scores)
    nodes = [json.loads(line) for line in (out / NODES_LOG).read_text(encoding="utf-8").splitlines()]
    assert sorted(n["id"] for n in nodes) == sorted(IDS) and all(n["node"] and n["pid"] for n in nodes)

    # an interrupted run: the last instance is lost; the rerun runs only that one
    lines = (out / LOG_NAME).read_text(encoding="utf-8").splitlines(keepends=True)
    (out / LOG_NAME).write_text("".join(lines[:-1]), encoding="utf-8")
    run_on_cluster(ModelOptions(), [ClusterRun(OPTIONS, out)], items, QUIET, local_cluster)
    assert len((out / NODES_LOG).read_text(encoding="utf-8").splitlines()) == len(IDS) + 1
    assert untimed(out / LOG_NAME) == untimed(local_run / LOG_NAME)


def test_a_sweep_on_a_local_cluster_gives_the_local_rows(
        items: list[TestItem], local_cluster: ClusterOptions, tmp_path: Path) -> None:
    points = build_grid(OPTIONS, ["la-2", "offline"], [1000.0])
    on_ray = run_sweep_on_cluster(ModelOptions(), points, items, tmp_path / "ray", QUIET, local_cluster)
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        here = run_sweep(lambda: SpeechEngine.load(ModelOptions()), points, items, tmp_path / "local", QUIET)
    finally:
        torch.set_num_threads(threads)
    assert [untimed_scores(r) for r in on_ray] == [untimed_scores(r) for r in here]
    for point in points:
        assert untimed(tmp_path / "ray" / "runs" / point.dirname / LOG_NAME) == \
            untimed(tmp_path / "local" / "runs" / point.dirname / LOG_NAME)


def test_a_failing_instance_is_reported_and_the_others_kept(
        local_cluster: ClusterOptions, tmp_path: Path) -> None:
    manifest = write_manifest(tmp_path / "set.tsv", IDS[:2])
    broken = tmp_path / "broken.wav"
    broken.write_bytes(b"RIFF....WAVEfmt this is not audio")
    with manifest.open("a", encoding="utf-8") as f:
        f.write(f"broken\t{broken}\t1.0\tnothing\n")
    items = read_manifest(manifest)
    out = tmp_path / "ray"
    with pytest.raises((ClusterRunError, OptionError)) as caught:
        run_on_cluster(ModelOptions(), [ClusterRun(OPTIONS, out)], items, QUIET, local_cluster)
    assert "broken" in str(caught.value)
    kept = [json.loads(line)["simulst"]["id"] for line in (out / LOG_NAME).read_text().splitlines()]
    assert sorted(kept) == sorted(IDS[:2])
    assert not (out / "scores.json").exists()  # an incomplete run is not scored


# ------------------------------------------------------------------------------------------- two Ray nodes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_node(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """``ray start ... --block`` (it stops its node's processes when terminated), once the node is up."""
    ray_cli = str(Path(sys.executable).with_name("ray"))
    with log.open("wb") as f:
        process = subprocess.Popen([ray_cli, "start", *args, "--block"], stdout=f, stderr=subprocess.STDOUT, env=env,
                                   start_new_session=True)
    deadline = time.monotonic() + 120
    while "block forever" not in log.read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"ray start failed:\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.5)
    return process


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    """A head node and a worker node of one CPU each, as two `ray start` processes on this machine."""
    logs = tmp_path_factory.mktemp("nodes")
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    port = free_port()
    address = f"127.0.0.1:{port}"
    common = ["--node-ip-address", "127.0.0.1", "--num-cpus", "1"]
    nodes = [start_node(["--head", "--port", str(port), "--include-dashboard=false",
                         "--ray-client-server-port", str(free_port()),
                         "--dashboard-agent-listen-port", str(free_port()), *common], logs / "head.log", env)]
    try:
        nodes.append(start_node(["--address", address, "--dashboard-agent-listen-port", str(free_port()), *common],
                                logs / "worker.log", env))
        yield address, env
    finally:  # (a node's graceful stop takes about 35 s here; its processes share its session: killed with it)
        for node in reversed(nodes):
            os.killpg(node.pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        for node in nodes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.wait(max(0.1, deadline - time.monotonic()))
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.pid, signal.SIGKILL)
            node.wait()


def sweep_cli(manifest: Path, out: Path, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "simulst.cli", "sweep", str(manifest), "--output", str(out), "--policies", "la-2",
            "offline", "--chunks", "1000", "--no-progress-bar", *extra]


def untimed_table(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8") as f:
        return [{k: v for k, v in row.items() if not any(t in k for t in TIMED)} for row in csv.DictReader(f)]


def test_two_nodes_share_a_sweep_survive_a_killed_worker_and_resume(
        two_nodes: tuple[str, dict[str, str]], tmp_path: Path) -> None:
    address, env = two_nodes
    manifest = write_manifest(tmp_path / "set.tsv")
    subprocess.run(sweep_cli(manifest, tmp_path / "local", []), env=env, check=True, capture_output=True)

    out = tmp_path / "ray"
    command = sweep_cli(manifest, out, ["--cluster", "ray", "--ray-address", address])
    sweep = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    killed = None
    deadline = time.monotonic() + 600
    while killed is None and sweep.poll() is None and time.monotonic() < deadline:
        lines = [line for log in out.glob(f"runs/*/{NODES_LOG}") for line in log.read_text().splitlines()]
        if lines:  # a worker that finished a task has taken the next one: kill it mid-task
            killed = json.loads(lines[0])["pid"]
            os.kill(killed, signal.SIGKILL)
            done_then = len(lines)
        time.sleep(0.2)
    _, stderr = sweep.communicate(timeout=600)
    assert sweep.returncode == 0, stderr.decode()[-3000:]
    assert killed is not None and done_then < 2 * len(IDS), "the sweep ended before a worker could be killed"

    runs = sorted(p for p in (out / "runs").iterdir())
    nodes = [json.loads(line) for run in runs for line in (run / NODES_LOG).read_text().splitlines()]
    assert len({n["node"] for n in nodes}) == 2  # both nodes ran tasks
    assert len(nodes) == 2 * len(IDS) and all(n["pid"] != killed for n in nodes[done_then:])
    for run in runs:
        assert untimed(run / LOG_NAME) == untimed(tmp_path / "local" / "runs" / run.name / LOG_NAME)
    assert untimed_table(out / "sweep.csv") == untimed_table(tmp_path / "local" / "sweep.csv")

    # a rerun resumes: every instance is there, so nothing is submitted and the table is the same
    subprocess.run(command, env=env, check=True, capture_output=True)
    again = [line for run in runs for line in (run / NODES_LOG).read_text().splitlines()]
    assert len(again) == len(nodes)
    assert untimed_table(out / "sweep.csv") == untimed_table(tmp_path / "local" / "sweep.csv")


def test_cluster_flags_are_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = write_manifest(tmp_path / "set.tsv", IDS[:1])
    base = ["sweep", str(manifest), "--output", str(tmp_path / "o")]
    for extra, message in ((["--ray-address", "127.0.0.1:1"], "go with --cluster ray"),
                           (["--cluster", "ray", "--jobs", "2"], "--jobs is for local sweeps"),
                           (["--cluster", "ray", "--to", "es"], "runs locally"),
                           (["--cluster", "ray", "--ray-cpus-per-task", "0"], "CPUs per task")):
        code = main(base + extra)
        stderr = capsys.readouterr().err
        assert code != 0 and message in stderr, (extra, stderr[-500:])
    shutil.rmtree(tmp_path / "o", ignore_errors=True)
