"""``simulst serve --cluster ray``: the server's app (:func:`~simulst.server.app.create_app`) deployed on Ray Serve.

The deployment has N replicas (``--replicas N``, or ``--autoscale MIN:MAX``), each a Ray actor with
``--replica-cpus`` CPUs that loads its own model and runs its own scheduler, as one ``simulst serve`` process does.
Serve's proxy (on every node with a replica, at ``--host``/``--port``) routes each HTTP request and each websocket
to a replica; a websocket is one request, so a stream stays on its replica for its life. The ``ready`` message
names the replica (``"replica"``).

**Routing and scaling.** A websocket is an ongoing request of its replica for as long as it is open. A replica
takes at most ``max_streams + HEADROOM`` ongoing requests: its streams, and a few short requests (``/health``,
``/metrics``, the page) so that a full replica still answers them. Serve sends a new request to the less loaded
of two replicas it samples, asking both for their load (``ROUTER_ENV``: set for a local Ray instance; a cluster
started with ``ray start`` takes them from its environment), so a full replica is sent a stream only when the other
one sampled is full too (it then refuses it as one process does: "the server is full", close 1013).
With ``--autoscale`` Serve keeps the mean open streams per replica near ``TARGET_LOAD × max_streams``
(:func:`deployment_options`).

**Health and metrics.** A request reaches one replica, so every replica reports its state (open streams, capacity,
jobs, its Prometheus exposition) every ``REPORT_S`` seconds to a small named actor, the :class:`Registry`; a
replica answering ``/health`` or ``/metrics`` adds the others' last reports to its own (:class:`RegistryPeers`).
``/health`` sums the streams, capacity and jobs, and lists the replicas; ``/metrics`` keeps every replica's series,
labelled ``replica="..."`` (sum them in PromQL: ``sum without (replica) (...)``). A replica that stops reporting
for ``STALE_S`` seconds (it died) is dropped from both.

**A replica that dies.** Serve's proxy closes its websockets without a close frame (code 1006) and a ``final``; the
client (:mod:`simulst.server.client`, the web page) reports that as an error. The other replicas' streams go on,
and Serve starts a replacement replica.

**Shutdown.** :meth:`ClusterServer.stop` tells the registry to close: each replica then drains as one process does
at SIGTERM (every open stream gets its ``final``, new ones are refused), then the application is deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import socket
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import ray
import torch
from fastapi import FastAPI
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from ray import serve

from simulst.config import ModelOptions
from simulst.errors import SimulstError
from simulst.models.loading import load_model
from simulst.server.app import Hub, create_app
from simulst.server.service import ServerConfig, Service

log = logging.getLogger("simulst.server")

APP = "simulst"  # the Serve application's name
NAMESPACE = "simulst"  # the Ray namespace of the registry actor
REPORT_S = 1.0  # how often each replica reports its state to the registry
STALE_S = 5.0  # a replica whose last report is older than this is gone
HEADROOM = 2  # ongoing requests a replica takes beyond its streams: /health, /metrics, the page
TARGET_LOAD = 0.75  # autoscaling: the open streams per replica Serve aims at, as a share of its capacity
CALL_TIMEOUT_S = 5.0  # the longest a replica waits for the registry
# Serve's router (in each proxy) reads these when a local Ray instance starts: it asks both sampled replicas their
# load for every new request (no cached load, which would prefer a busy replica it heard from over an idle one it has
# not), and waits up to 0.5 s for a busy replica's answer.
ROUTER_ENV = {"RAY_SERVE_QUEUE_LENGTH_CACHE_TIMEOUT_S": "0", "RAY_SERVE_QUEUE_LENGTH_RESPONSE_DEADLINE_S": "0.5"}


class ClusterError(SimulstError):
    """The Ray cluster or Serve could not be reached or started."""


@dataclass(frozen=True)
class Scaling:
    """How many replicas, of what size.

    Attributes:
        replicas: a fixed number of replicas (used when ``autoscale`` is None).
        autoscale: (min, max) replicas, scaled by the open streams per replica.
        replica_cpus: Ray CPUs per replica (its torch threads too, at least 1).
    """

    replicas: int = 1
    autoscale: tuple[int, int] | None = None
    replica_cpus: float = 1.0

    def describe(self) -> str:
        """E.g. ``2 replicas`` or ``1 to 4 replicas (autoscaled)``, with their CPUs."""
        cpus = f"{self.replica_cpus:g} CPU{'s' if self.replica_cpus != 1 else ''} each"
        if self.autoscale is not None:
            return f"{self.autoscale[0]} to {self.autoscale[1]} replicas (autoscaled), {cpus}"
        return f"{self.replicas} replica{'s' if self.replicas != 1 else ''}, {cpus}"


def deployment_options(config: ServerConfig, scaling: Scaling) -> dict[str, Any]:
    """Serve's deployment options: each replica's CPUs, its ongoing-request cap (its streams + ``HEADROOM``), a
    fixed replica count or the autoscaling config (target: ``TARGET_LOAD`` of a replica's streams), and a graceful
    shutdown long enough for its streams' finals."""
    options: dict[str, Any] = {
        "ray_actor_options": {"num_cpus": scaling.replica_cpus},
        "max_ongoing_requests": config.max_streams + HEADROOM,
        "graceful_shutdown_timeout_s": config.shutdown_grace_s + 10.0,
        "health_check_period_s": 5.0,
        "max_constructor_retry_count": 3,  # (a model that fails to load fails again: the deployment fails soon)
    }
    if scaling.autoscale is not None:
        low, high = scaling.autoscale
        options["autoscaling_config"] = {
            "min_replicas": low, "initial_replicas": low, "max_replicas": high,
            "target_ongoing_requests": max(1.0, TARGET_LOAD * config.max_streams),
        }
    else:
        options["num_replicas"] = scaling.replicas
    return options


def registry_name(app: str = APP) -> str:
    """The registry actor's name for the Serve application ``app``."""
    return f"{app}-registry"


# ------------------------------------------------------------------------------------------------ the registry
class Registry:
    """What the replicas last reported (a Ray actor, named :func:`registry_name`, in namespace ``NAMESPACE``), and
    whether they are to drain."""

    def __init__(self) -> None:
        self._reports: dict[str, tuple[float, dict[str, Any]]] = {}
        self._told: set[str] = set()  # the replicas told to drain
        self.closing = False

    def report(self, replica: str, state: dict[str, Any]) -> bool:
        """Keep a replica's state; returns True when the replicas are to drain (the server is shutting down)."""
        self._reports[replica] = (time.monotonic(), state)
        if self.closing:
            self._told.add(replica)
        return self.closing

    def reports(self) -> dict[str, dict[str, Any]]:
        """The live replicas' last states, each with its ``age_s``; reports older than ``STALE_S`` are dropped."""
        now = time.monotonic()
        for name in [n for n, (at, _) in self._reports.items() if now - at > STALE_S]:
            del self._reports[name]
        return {name: {**state, "age_s": round(now - at, 2)} for name, (at, state) in self._reports.items()}

    def forget(self, replica: str) -> None:
        """A replica stopped."""
        self._reports.pop(replica, None)

    def close(self) -> None:
        """Tell the replicas to drain (at their next report)."""
        self.closing = True

    def open(self) -> None:
        """A new deployment (a registry left by an earlier one is reused): the replicas serve."""
        self.closing = False
        self._told.clear()

    def drained(self) -> bool:
        """True once every live replica has been told to drain and reports no open stream."""
        return all(name in self._told and not state["streams"] for name, state in self.reports().items())


def registry_actor(name: str) -> Any:
    """The registry actor ``name``, created when it does not exist yet (detached: it outlives the replica or driver
    that created it; :meth:`ClusterServer.stop` kills it)."""
    return ray.remote(Registry).options(
        name=name, namespace=NAMESPACE, lifetime="detached", get_if_exists=True, num_cpus=0).remote()


# ------------------------------------------------------------------------------------------------ the replicas
class Replica:
    """One replica of the deployment: its own model, service, scheduler and app (built by Serve on the replica).

    Args:
        config: the server's configuration (``max_streams``: this replica's).
        model: the model to load.
        threads: torch CPU threads.
        registry: the registry actor's name.
    """

    def __init__(self, config: ServerConfig, model: ModelOptions, threads: int, registry: str) -> None:
        torch.set_num_threads(max(1, threads))
        self.name = serve.get_replica_context().replica_id.unique_id
        self.node = ray.util.get_node_ip_address()
        self.pid = os.getpid()
        self.registry_name = registry
        self.service = Service(load_model(model), config)
        self.hub: Hub | None = None
        self._registry: Any = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def __serve_build_asgi_app__(self) -> FastAPI:
        """The replica's app (Serve calls this once, in the replica's event loop); starts its reports."""
        app = create_app(self.service, self.name, RegistryPeers(self))
        self.hub = app.state.hub
        self._spawn(self._report_loop())
        return app

    def __del__(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._registry is not None:
            with contextlib.suppress(Exception):
                self._registry.forget.remote(self.name)

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def registry(self) -> Any:
        """The registry's handle (looked up, or created, again after a failure)."""
        if self._registry is None:
            self._registry = registry_actor(self.registry_name)
        return self._registry

    def state(self) -> dict[str, Any]:
        """What this replica reports: its health (:meth:`Hub.health`), where it runs, its metrics."""
        assert self.hub is not None
        return {**self.hub.health(), "node": self.node, "pid": self.pid,
                "metrics": self.hub.metrics.render().decode("utf-8")}

    async def call(self, method: str, *args: Any) -> Any:
        """Call a registry method (at most ``CALL_TIMEOUT_S``); the handle is dropped after a failure."""
        try:
            return await asyncio.wait_for(getattr(self.registry(), method).remote(*args), CALL_TIMEOUT_S)
        except Exception:
            self._registry = None
            raise

    async def _report_loop(self) -> None:
        hub = self.hub
        assert hub is not None
        failing = False
        while True:
            try:
                closing = await self.call("report", self.name, self.state())
                failing = False
            except Exception as err:  # the registry is being restarted, or gone with its cluster
                if not failing:
                    log.warning("replica %s cannot report to the registry: %s: %s", self.name, type(err).__name__,
                                err)
                failing, closing = True, False
            if closing and not hub.streams.closing:
                log.info("replica %s: the server is shutting down; draining its streams", self.name)
                self._spawn(hub.drain(self.service.config.shutdown_grace_s))
            await asyncio.sleep(REPORT_S)


class RegistryPeers:
    """The deployment's other replicas, from the registry (:class:`~simulst.server.app.Peers`)."""

    def __init__(self, replica: Replica) -> None:
        self.replica = replica

    async def states(self, own: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """Every live replica's last state, this one's fresh; only this one's when the registry cannot be read."""
        try:
            states: dict[str, dict[str, Any]] = await self.replica.call("reports")
        except Exception as err:
            log.warning("replica %s cannot read the registry: %s: %s", self.replica.name, type(err).__name__, err)
            states = {}
        states[self.replica.name] = {**self.replica.state(), **own, "age_s": 0.0}
        return states

    async def health(self, own: dict[str, Any]) -> dict[str, Any]:
        """The deployment's health: streams, capacity and jobs summed over the replicas, and each replica's."""
        states = await self.states(own)
        replicas = [{key: value for key, value in state.items() if key not in ("metrics", "status")}
                    for _, state in sorted(states.items())]
        return {"status": "ok", "replica": self.replica.name, "streams": sum(r["streams"] for r in replicas),
                "capacity": sum(r["capacity"] for r in replicas), "jobs": sum(r["jobs"] for r in replicas),
                "replicas": replicas}

    async def metrics(self, own: bytes) -> bytes:
        """Every replica's series, labelled ``replica``."""
        states = await self.states({})
        texts = {name: state["metrics"] for name, state in states.items()}
        texts[self.replica.name] = own.decode("utf-8")
        return labelled_metrics(texts)


class _Families:
    """A Prometheus collector of parsed metric families (for :func:`generate_latest`)."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self.families = list(families)

    def collect(self) -> Iterator[Metric]:
        yield from self.families


def labelled_metrics(texts: dict[str, str]) -> bytes:
    """One exposition of several replicas' expositions (``replica name -> text``), each series labelled with its
    replica: ``simulst_streams_open{kind="live",replica="r1"}``."""
    families: dict[tuple[str, str], Metric] = {}
    samples: dict[tuple[str, str], list[Sample]] = defaultdict(list)
    for replica, text in sorted(texts.items()):
        for family in text_string_to_metric_families(text):
            key = (family.name, family.type)
            families.setdefault(key, Metric(family.name, family.documentation, family.type))
            samples[key] += [sample._replace(labels={**sample.labels, "replica": replica})
                             for sample in family.samples]
    for key, family in families.items():
        family.samples = samples[key]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families.values()))
    return generate_latest(registry)


# A Serve deployment class: the app is built on each replica (``__serve_build_asgi_app__``).
SimulstDeployment = serve.deployment(name="SimulstReplica")(serve.ingress()(Replica))


def application(config: ServerConfig, model: ModelOptions, scaling: Scaling, app: str = APP) -> Any:
    """The Serve application (to ``serve.run``, or to return from a config file's import path): the deployment
    with ``scaling``'s replicas, each loading ``model`` and serving with ``config``. A model on a GPU
    (``--device cuda``) gives each replica one GPU (Ray shows it the one it assigned, as ``cuda``)."""
    threads = max(1, int(scaling.replica_cpus))
    options = deployment_options(config, scaling)
    if model.device.split(":")[0] == "cuda":
        options["ray_actor_options"]["num_gpus"] = 1
        model = dataclasses.replace(model, device="cuda")
    return SimulstDeployment.options(**options).bind(config, model, threads, registry_name(app))


# ------------------------------------------------------------------------------------------------ the driver
def _check_reachable(address: str) -> None:
    """Fail at once for a ``HOST:PORT`` cluster address where nothing listens (Ray itself would retry forever)."""
    host, _, port = address.rpartition(":")
    if "://" in address or not host or not port.isdigit():
        return  # (a ray:// or other address: Ray's own checks)
    try:
        socket.create_connection((host, int(port)), timeout=CALL_TIMEOUT_S).close()
    except OSError as err:
        raise ClusterError(f"cannot reach the Ray cluster at {address} ({err}): start it with `ray start --head`, "
                           "or give its head's address (--ray-address or $RAY_ADDRESS)") from err


def _deployment_failure() -> str:
    """Why the deployment failed, as Serve reports it (a replica's constructor error: its last lines), or ""."""
    try:
        deployments = serve.status().applications[APP].deployments.values()
    except Exception:
        return ""
    lines = [line for d in deployments for line in d.message.strip().splitlines()[-3:] if line.strip()]
    return ("\n" + "\n".join(lines)) if lines else ""


class ClusterServer:
    """``simulst serve --cluster ray`` from the driver's side: connects to (or starts) Ray, runs Serve's proxy on
    ``host:port`` and the application; :meth:`stop` drains it and shuts down what it started.

    Args:
        config: the server's configuration (``max_streams`` per replica).
        model: the model each replica loads.
        scaling: the replicas.
        host, port: where Serve's proxy listens.
        address: a Ray cluster's address (``ray://...`` or ``HOST:PORT``); None: start a local Ray instance.
        ssl_certfile, ssl_keyfile: serve https / wss.
    """

    def __init__(self, config: ServerConfig, model: ModelOptions, scaling: Scaling, host: str, port: int,
                 address: str | None = None, ssl_certfile: str | None = None,
                 ssl_keyfile: str | None = None) -> None:
        self.config = config
        self.started_ray = False
        try:
            if not ray.is_initialized():  # (a caller that connected already: its cluster is used)
                if address is not None:
                    _check_reachable(address)
                else:
                    for key, value in ROUTER_ENV.items():  # (a value the user set is kept)
                        os.environ.setdefault(key, value)
                ray.init(address=address or "local", include_dashboard=False, logging_level=logging.WARNING,
                         log_to_driver=False)
                self.started_ray = address is None
            http: dict[str, Any] = {"host": host, "port": port, "ssl_certfile": ssl_certfile,
                                    "ssl_keyfile": ssl_keyfile}
            serve.start(http_options=http)
            self.registry = registry_actor(registry_name())
            ray.get(self.registry.open.remote())
            serve.run(application(config, model, scaling), name=APP, route_prefix="/")
        except Exception as err:
            why = _deployment_failure() if ray.is_initialized() else ""
            self._shutdown_ray()
            if isinstance(err, SimulstError):
                raise
            raise ClusterError(f"cannot start the Ray Serve deployment: {type(err).__name__}: {err}{why}") from err

    def health(self) -> dict[str, dict[str, Any]]:
        """The replicas' last reports (without their metrics)."""
        reports: dict[str, dict[str, Any]] = ray.get(self.registry.reports.remote())
        return {name: {k: v for k, v in state.items() if k != "metrics"} for name, state in reports.items()}

    def stop(self) -> None:
        """Drain every replica (each open stream gets its final, within ``shutdown_grace_s``), delete the
        application, and stop Ray when this server started it."""
        try:
            ray.get(self.registry.close.remote())
            deadline = time.monotonic() + self.config.shutdown_grace_s + 2 * REPORT_S
            while time.monotonic() < deadline and not ray.get(self.registry.drained.remote()):
                time.sleep(0.2)
            serve.delete(APP)
            ray.kill(self.registry)
        except Exception as err:
            log.warning("the Serve application did not shut down cleanly: %s: %s", type(err).__name__, err)
        finally:
            self._shutdown_ray()

    def _shutdown_ray(self) -> None:
        """Stop the Ray instance this server started (Serve's proxy and controller with it)."""
        if self.started_ray:
            ray.shutdown()
            self.started_ray = False

    def run_until_signalled(self) -> None:
        """Block until SIGINT or SIGTERM, then :meth:`stop` (a second Ctrl-C while it drains forces the exit: a
        ``KeyboardInterrupt``, Ray stopped all the same)."""
        stopping = threading.Event()
        previous = {sig: signal.signal(sig, lambda *_: stopping.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            stopping.wait()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.stop()
