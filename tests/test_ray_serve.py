"""``simulst serve --cluster ray --replicas 2`` on a local Ray instance, with the real Whisper tiny.en: concurrent
streams land on different replicas and each output equals its single-process output; ``/health`` and ``/metrics``
name both replicas; a replica killed mid-stream ends only its own stream, with an error; SIGINT drains the
replicas (the open stream gets its final) and stops Ray; a one-process server names itself in ``ready`` too; bad
flag combinations and an unreachable cluster are refused cleanly; the KubeRay manifest's Serve config builds the
application.

One deployment (a ``simulst serve --cluster ray`` process, which starts its own Ray instance) is shared by the
module's tests, in order: the replica kill comes after the tests that need both replicas, the shutdown last.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import yaml
from websockets.asyncio.client import connect

from simulst.audio.io import load_audio
from simulst.cli.main import build_parser, main
from simulst.cli.options import model_from_args
from simulst.cli.serve import server_config
from simulst.errors import OptionError
from simulst.server.app import create_app
from simulst.server.client import ClientResult, pcm16, stream_audio
from simulst.server.protocol import StartRequest
from simulst.server.service import Service
from tests.server_fixtures import serving
from tests.shared_assets import DATA, JFK, JFK_PHRASE, needs_shared, words

needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="Ray is not installed (simulst[ray])")
pytestmark = [needs_shared, needs_ray, pytest.mark.real, pytest.mark.ray,
              pytest.mark.usefixtures("one_ray_at_a_time")]

ROOT = Path(__file__).resolve().parents[1]
RATE = 16000
# the deployment's and the references' options. A live server decodes whatever audio has arrived (catch-up), so a
# replica that receives two 100 ms frames at once decodes at other points than the reference's; the float32 decoder
# reads both clips' words alike at those points, the bfloat16 one (the preset's on a CPU with bfloat16) reads the
# FLEURS clip's "Even in the middle" at some of them and "Even the middle" at others. Its punctuation may differ
# with them ("... of a sentence" without the full stop, after ", even in the middle" committed at another point),
# so the outputs are compared as words.
FLAGS = ["--max-streams", "2", "--log-level", "warning", "--precision", "fp32"]
FLEURS = DATA / "audio" / "fleurs-en-dev" / "fleurs-en-001.wav"  # 8.8 s
NORMAL_CLOSURE, GOING_AWAY = 1000, 1001


def free_port() -> int:
    """A free port in 18000-18999 (other work on this machine uses the usual Ray and Serve ports)."""
    for port in random.sample(range(18000, 19000), 1000):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 18000-18999")


@dataclass
class Cluster:
    """The ``simulst serve --cluster ray`` process and its address."""

    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    def health(self) -> dict[str, Any]:
        response = httpx.get(f"{self.http}/health", timeout=10)
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def stop(self) -> int | None:
        """SIGINT, as Ctrl-C: the server drains and stops Ray; its exit code (None: it had to be killed)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                return self.process.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)  # it and the Ray processes it started
                self.process.wait()
                return None
        return self.process.returncode


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    port = free_port()
    log = tmp_path_factory.mktemp("ray_serve") / "serve.log"
    env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}  # a Ray instance of its own
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "simulst.cli", "serve", "--cluster", "ray", "--replicas", "2", "--port", str(port),
             *FLAGS], stdout=sink, stderr=subprocess.STDOUT, env={**env, "HF_HUB_OFFLINE": "1"}, cwd=ROOT,
            start_new_session=True)
    running = Cluster(process, port, log)
    try:
        deadline = time.monotonic() + 240
        while True:
            try:
                if len(running.health()["replicas"]) == 2:
                    break
            except (httpx.HTTPError, KeyError):
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the deployment did not start:\n{running.output()}")
            time.sleep(1.0)
        yield running
    finally:
        running.stop()


@dataclass(frozen=True)
class Clip:
    name: str
    audio: np.ndarray
    reference: str  # its output from one process with the same options


@pytest.fixture(scope="module")
def service() -> Service:
    """What a one-process ``simulst serve`` with the deployment's flags serves."""
    args = build_parser().parse_args(["serve", *FLAGS])
    return Service(model_from_args(args), server_config(args))


@pytest.fixture(scope="module")
def clips(service: Service) -> dict[str, Clip]:
    """Each recording's single-process output: a stream of the one-process server's service, built from the same
    flags, with the clients' start message, fed the 16-bit audio in the clients' 100 ms frames."""
    out = {}
    for name, path in (("jfk", JFK), ("fleurs", FLEURS)):
        audio = load_audio(path)
        heard = np.frombuffer(pcm16(audio), dtype="<i2").astype(np.float32) / 32768.0
        stream = service.open(StartRequest(sample_rate=RATE)).stream
        for pos in range(0, heard.shape[0], RATE // 10):
            stream.push(heard[pos : pos + RATE // 10])
        stream.finish()
        out[name] = Clip(name, audio, stream.text)
    return out


async def two_streams(url: str, first: Clip, second: Clip, during: Any = None) -> tuple[ClientResult, ClientResult]:
    """Two clients at the pace of speech, the second starting once the first is streaming; ``during(results)``
    runs while both stream (once both are ready)."""
    a = asyncio.create_task(stream_audio(url, first.audio, RATE))
    await asyncio.sleep(1.0)
    b = asyncio.create_task(stream_audio(url, second.audio, RATE))
    if during is not None:
        await asyncio.sleep(2.0)
        await during()
    return await a, await b


def test_streams_land_on_different_replicas_with_single_process_outputs(cluster: Cluster,
                                                                        clips: dict[str, Clip]) -> None:
    seen: dict[str, Any] = {}

    async def look() -> None:
        seen["health"] = await asyncio.to_thread(cluster.health)
        seen["metrics"] = (await asyncio.to_thread(httpx.get, f"{cluster.http}/metrics", timeout=10)).text

    # Serve's router sends a new request to the less loaded of two replicas it probes; in one full local suite
    # (2026-11-26) both streams still went to one replica, with no probe reported late in the proxy's log (cause
    # not found). The spreading is asked of one of up to three tries, everything else of the try that spread
    same: list[str] = []
    for _ in range(3):
        a, b = asyncio.run(two_streams(cluster.ws, clips["jfk"], clips["fleurs"], look))
        assert a.ready is not None and b.ready is not None, (a.error, b.error)
        if a.ready["replica"] != b.ready["replica"]:
            break
        same.append(a.ready["replica"])
    assert a.ready["replica"] != b.ready["replica"], ("both streams on one replica in every try", same)
    for result, clip in ((a, clips["jfk"]), (b, clips["fleurs"])):
        assert result.error is None and result.close_code == NORMAL_CLOSURE, result.error
        assert words(result.text) == words(clip.reference), (clip.name, result.text, clip.reference)
    health = seen["health"]  # taken while both streamed: one stream on each replica
    names = {r["replica"] for r in health["replicas"]}
    assert names == {a.ready["replica"], b.ready["replica"]}, health
    assert health["streams"] == 2 and all(r["streams"] == 1 for r in health["replicas"]), health
    assert health["capacity"] == 4 and health["replica"] in names
    for name in names:
        assert f'simulst_streams_open{{kind="live",replica="{name}"}} 1.0' in seen["metrics"]


def test_page_config_and_openai_endpoint_behind_the_proxy(cluster: Cluster) -> None:
    page = httpx.get(f"{cluster.http}/", timeout=10)
    assert page.status_code == httpx.codes.OK and "<html" in page.text.lower()
    assert httpx.get(f"{cluster.http}/api/config", timeout=10).json()["max_streams"] == 2
    with JFK.open("rb") as f:
        response = httpx.post(f"{cluster.http}/v1/audio/transcriptions", timeout=120,
                              files={"file": ("jfk.wav", f.read(), "audio/wav")},
                              data={"model": "whisper-1", "response_format": "json"})
    assert response.status_code == httpx.codes.OK, response.text
    assert JFK_PHRASE.search(" ".join(re.sub(r"[^a-z' ]", " ", response.json()["text"].lower()).split()))


def test_a_killed_replica_ends_only_its_own_stream(cluster: Cluster, clips: dict[str, Clip]) -> None:
    victim: dict[str, Any] = {}
    jfk = clips["jfk"]

    async def kill_the_first_clients_replica() -> None:
        replica = (await asyncio.to_thread(cluster.health))["replicas"][0]  # one of the two (each has a stream)
        victim.update(replica)
        os.kill(replica["pid"], signal.SIGKILL)  # as the kernel's OOM killer would

    a, b = asyncio.run(two_streams(cluster.ws, jfk, jfk, kill_the_first_clients_replica))
    assert a.ready is not None and b.ready is not None and a.ready["replica"] != b.ready["replica"]
    killed, survivor = (a, b) if a.ready["replica"] == victim["replica"] else (b, a)
    assert killed.ready is not None and killed.ready["replica"] == victim["replica"], (victim, a.ready, b.ready)
    assert killed.final is None and killed.error is not None, killed
    assert "ended without its final" in killed.error and victim["replica"] in killed.error, killed.error
    assert killed.close_code != NORMAL_CLOSURE
    print(f"the killed replica's client: close code {killed.close_code}, error {killed.error!r}")
    assert survivor.error is None and survivor.close_code == NORMAL_CLOSURE, survivor.error
    assert words(survivor.text) == words(jfk.reference), (survivor.text, jfk.reference)
    health = cluster.health()  # the dead replica stopped reporting: it is no longer listed
    assert victim["replica"] not in {r["replica"] for r in health["replicas"]}, health


def test_sigint_drains_the_replicas_then_stops(cluster: Cluster, clips: dict[str, Clip]) -> None:
    async def interrupted() -> ClientResult:
        client = asyncio.create_task(stream_audio(cluster.ws, clips["jfk"].audio, RATE))
        await asyncio.sleep(4.0)
        cluster.process.send_signal(signal.SIGINT)
        return await client

    result = asyncio.run(interrupted())
    assert result.ready is not None and result.error is None, (result.error, cluster.output())
    assert result.final is not None and result.close_code == GOING_AWAY
    assert 0 < result.final["source_ms"] < 1000 * clips["jfk"].audio.shape[0] / RATE  # ended early, with a final
    try:
        code = cluster.process.wait(timeout=90)  # (the replicas drained: Serve deletes them, Ray stops)
    except subprocess.TimeoutExpired:
        code = None
    assert code == 0, cluster.output()


def test_a_one_process_server_names_itself_in_ready(service: Service) -> None:
    """Clients can rely on the ``replica`` key: one process names itself HOST:PID."""

    async def ready(url: str) -> dict[str, Any]:
        async with connect(url) as ws:
            await ws.send(json.dumps({"type": "start"}))
            message: dict[str, Any] = json.loads(await ws.recv())
            await ws.send(json.dumps({"type": "end"}))
            return message

    with serving(create_app(service)) as running:
        message = asyncio.run(ready(running.ws))
        health = httpx.get(f"{running.http}/health", timeout=10).json()
    assert message["type"] == "ready" and message["replica"] == f"{socket.gethostname()}:{os.getpid()}"
    assert health["replica"] == message["replica"] and "replicas" not in health


# ------------------------------------------------------------------------------------------------ options
@pytest.mark.parametrize(("flags", "message"), [
    (["--replicas", "2"], "--replicas needs --cluster ray"),
    (["--autoscale", "1:2", "--replica-cpus", "2"], "--autoscale, --replica-cpus need --cluster ray"),
    (["--ray-address", "10.0.0.1:6380"], "--ray-address needs --cluster ray"),
    (["--cluster", "ray", "--replicas", "2", "--autoscale", "1:3"], "not both"),
    (["--cluster", "ray", "--replicas", "0"], "--replicas must be >= 1"),
    (["--cluster", "ray", "--autoscale", "3:1"], "1 <= MIN <= MAX"),
    (["--cluster", "ray", "--autoscale", "four"], "--autoscale takes MIN:MAX"),
    (["--cluster", "ray", "--replica-cpus", "0"], "--replica-cpus must be > 0"),
])
def test_bad_cluster_flags_are_refused(flags: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", *flags]) == 2
    assert message in capsys.readouterr().err


def test_an_unreachable_cluster_is_a_clean_error(capsys: pytest.CaptureFixture[str]) -> None:
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    assert main(["serve", "--cluster", "ray", "--ray-address", address, "--port", str(free_port())]) == 2
    assert f"cannot reach the Ray cluster at {address}" in capsys.readouterr().err


def test_bad_cluster_flags_exit_non_zero_from_the_command() -> None:
    done = subprocess.run([sys.executable, "-m", "simulst.cli", "serve", "--replicas", "2"], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 2 and "simulst: error: --replicas needs --cluster ray" in done.stderr


def test_kuberay_manifest_builds_the_application() -> None:
    """The RayService's Serve config is valid for Serve and its import path builds the deployment."""
    from ray.serve.schema import ServeDeploySchema

    from simulst.cli.serve import ray_app
    from simulst.server.cluster import HEADROOM

    manifest = yaml.safe_load((ROOT / "deploy" / "kuberay" / "rayservice.yaml").read_text())
    assert manifest["kind"] == "RayService"
    config = ServeDeploySchema.model_validate(yaml.safe_load(manifest["spec"]["serveConfigV2"]))
    [app] = config.applications
    assert app.import_path == "simulst.cli.serve:ray_app" and app.route_prefix == "/"
    application = ray_app(dict(app.args))
    deployment = application._bound_deployment
    assert deployment._deployment_config.max_ongoing_requests == 4 + HEADROOM  # its --max-streams 4
    assert deployment._deployment_config.autoscaling_config.max_replicas == 4  # its --autoscale 1:4
    with pytest.raises(OptionError, match="--replicas must be >= 1"):
        ray_app({"flags": "--replicas 0"})
    with pytest.raises(OptionError, match="unrecognized arguments"):
        ray_app({"flags": "--replicaz 2"})
