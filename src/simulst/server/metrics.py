"""The server's Prometheus metrics (``GET /metrics``, text exposition format).

Each app has its own registry (several apps may live in one process, as in the tests). What is exported:

* ``simulst_streams_open{kind}``: streams being decoded, ``live`` (websockets: ``/ws`` and Realtime sessions with
  audio) and ``file`` (uploads); ``simulst_connections_waiting``: websockets accepted that have not sent their
  ``start`` (a Realtime session: its first event) yet;
* ``simulst_scheduler_busy_streams``: streams with a decoding job queued or running (the scheduler's queue);
  ``simulst_scheduler_lag_seconds``: the most audio any live stream has received and not yet had decoded;
  ``simulst_scheduler_jobs_total``: jobs run;
* ``simulst_stream_average_lagging_seconds`` and ``simulst_stream_real_time_factor``: histograms, one observation
  per websocket stream that reached its ``final`` (AL on the output words, computation-unaware, with the
  output's own length as the reference length as SimulEval without references; RTF: the stream's compute
  time over its audio's duration);
* ``simulst_streams_total{outcome}``: websocket streams by how they ended (``final``, ``error``, ``left``);
  a Realtime session's streams (one per commit) are counted, and observed in the histograms, as ``/ws`` streams
  are, in the same series (an operator watches one server's load and latency, whichever endpoint carries it;
  the access log tells the endpoints apart);
* ``simulst_refusals_total{reason}``: connections and requests refused, by reason (:data:`REFUSALS`);
* ``simulst_http_requests_total{method, route, status}``: HTTP requests by route template (``other`` for none).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from simulst.evaluation.latency import average_lagging
from simulst.types import Emission

# why a connection or a request was refused
REFUSALS = ("full", "auth", "origin", "per_client", "start_timeout", "idle", "oversize", "flood", "protocol",
            "shutdown")
OUTCOMES = ("final", "error", "left")
CONTENT_TYPE = CONTENT_TYPE_LATEST


class SchedulerView(Protocol):
    """What the metrics read from the scheduler at each scrape."""

    def open_streams(self, live: bool) -> int: ...

    def busy_streams(self) -> int: ...

    def lag_s(self) -> float: ...

    jobs: int


class Metrics:
    """The metrics of one app.

    Args:
        scheduler: read at each scrape.
        waiting: the number of websockets waiting for their ``start``, read at each scrape.
    """

    def __init__(self, scheduler: SchedulerView, waiting: Callable[[], int]) -> None:
        self.registry = registry = CollectorRegistry(auto_describe=True)
        streams = Gauge("simulst_streams_open", "Streams being decoded", ["kind"], registry=registry)
        streams.labels("live").set_function(lambda: scheduler.open_streams(live=True))
        streams.labels("file").set_function(lambda: scheduler.open_streams(live=False))
        Gauge("simulst_connections_waiting", "Websockets accepted that have not sent their start message",
              registry=registry).set_function(waiting)
        Gauge("simulst_scheduler_busy_streams", "Streams with a decoding job queued or running",
              registry=registry).set_function(scheduler.busy_streams)
        Gauge("simulst_scheduler_lag_seconds", "The most audio a live stream has received and not had decoded",
              registry=registry).set_function(scheduler.lag_s)
        Gauge("simulst_scheduler_jobs", "Decoding jobs run since the start (a counter)",
              registry=registry).set_function(lambda: scheduler.jobs)
        self.al = Histogram("simulst_stream_average_lagging_seconds",
                            "Average lagging of a websocket stream's output words (at its end)", registry=registry,
                            buckets=(0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 10.0, 20.0))
        self.rtf = Histogram("simulst_stream_real_time_factor",
                             "Compute time over audio duration of a websocket stream (at its end)", registry=registry,
                             buckets=(0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 5.0))
        self.streams = Counter("simulst_streams", "Websocket streams by how they ended", ["outcome"],
                               registry=registry)
        self.refusals = Counter("simulst_refusals", "Connections and requests refused, by reason", ["reason"],
                                registry=registry)
        self.requests = Counter("simulst_http_requests", "HTTP requests", ["method", "route", "status"],
                                registry=registry)
        for outcome in OUTCOMES:
            self.streams.labels(outcome)
        for reason in REFUSALS:
            self.refusals.labels(reason)

    def refused(self, reason: str) -> None:
        """Count a refusal (``reason`` one of :data:`REFUSALS`)."""
        if reason not in REFUSALS:
            raise ValueError(f"unknown refusal reason {reason!r}; known: {', '.join(REFUSALS)}")
        self.refusals.labels(reason).inc()

    def ended(self, outcome: str) -> None:
        """Count a websocket stream's end (``outcome`` one of :data:`OUTCOMES`)."""
        self.streams.labels(outcome).inc()

    def finished(self, emissions: Sequence[Emission], source_ms: float, compute_s: float) -> None:
        """Observe a stream that reached its final: its AL (when it wrote words) and RTF (when it had audio)."""
        if source_ms <= 0:
            return
        al = stream_average_lagging(emissions, source_ms)
        if al is not None:
            self.al.observe(al / 1000.0)
        self.rtf.observe(compute_s / (source_ms / 1000.0))

    def request(self, method: str, route: str, status: int) -> None:
        """Count an HTTP request."""
        self.requests.labels(method, route, str(status)).inc()

    def render(self) -> bytes:
        """The exposition text."""
        return generate_latest(self.registry)


def stream_average_lagging(emissions: Sequence[Emission], source_ms: float) -> float | None:
    """AL in ms of a stream's output words (each word delayed by its emission's ``source_ms``), |Y*| = |Y|;
    None for an output without words."""
    delays = [e.source_ms for e in emissions for _ in e.text.split()]
    if not delays:
        return None
    return average_lagging(delays, source_ms, len(delays))
