"""``simulst serve``: the streaming server (:mod:`simulst.server`) on uvicorn, or with ``--cluster ray`` on Ray
Serve (:mod:`simulst.server.cluster`, imported only then: Ray is an optional extra, ``simulst[ray]``)."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import ipaddress
import logging
import os
import re
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from simulst.cli.options import (
    add_stream_arguments,
    model_from_args,
    model_options_from_args,
    stream_options_from_args,
)
from simulst.errors import OptionError
from simulst.models.catalog import is_catalog_name
from simulst.server.protocol import Limits

if TYPE_CHECKING:
    from simulst.server.cluster import Scaling
    from simulst.server.service import ServerConfig  # (the service loads torch: imported when the server starts)

CLUSTER_FLAGS = ("--ray-address", "--replicas", "--autoscale", "--replica-cpus")


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``serve``."""
    text = ("serve live transcription / translation: a web page with microphone capture, a websocket stream "
            "API at /ws (many concurrent streams: decoded in batches on a GPU, one stream per core on a CPU; "
            "--batching), OpenAI-compatible file endpoints and Prometheus metrics at /metrics")
    p = sub.add_parser("serve", help=text, description=text)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--max-streams", type=int, default=16,
                   help="the most concurrent streams (websockets + file requests); more are refused (default 16)")
    p.add_argument("--transcripts", metavar="DIR", default=None,
                   help="append every stream's committed output to DIR/<time>-<stream>.jsonl, flushed per emission")
    p.add_argument("--batching", choices=("auto", "on", "off"), default="auto",
                   help="on: decode concurrent streams in batched model calls; off: each stream's due work is a "
                        "job, run --workers at a time, reading all the stream's pending audio when it starts; "
                        "auto (default): on for a GPU, off on a CPU, where it measured better "
                        "(bench/results/serve_load.md)")
    p.add_argument("--workers", type=int, default=0, metavar="N",
                   help="without batching, the most streams decoded at once, each on one core (1: one at a time on "
                        "all the torch threads; default 0: as many as torch has threads, the cores)")
    p.add_argument("--mt", default="apertium", help="MT back-end for cascade streams (\"to\"): apertium (default)")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"),
                   help="the least severe messages uvicorn and simulst log on stderr (the JSON access lines are "
                        "always written; default info)")
    access = p.add_argument_group("access, limits and operation")
    access.add_argument("--token", default=os.environ.get("SIMULST_TOKEN"),
                        help="a shared secret clients must present, as an 'Authorization: Bearer TOKEN' header or "
                             "(a browser's websocket) the subprotocol 'bearer.TOKEN'; never in the URL; also guards "
                             "/metrics. Default: $SIMULST_TOKEN, else none")
    access.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                        help="a web origin (scheme://host[:port]) whose pages may use the server, besides its own "
                             "and loopback ones; repeatable; '*' allows any")
    access.add_argument("--ssl-certfile", default=None, metavar="PEM",
                        help="serve https / wss with this certificate (chain), with --ssl-keyfile")
    access.add_argument("--ssl-keyfile", default=None, metavar="PEM", help="the certificate's private key")
    access.add_argument("--max-per-client", type=int, default=8,
                        help="the most connections one client address may hold open at once (websockets and "
                             "uploads; default 8)")
    access.add_argument("--max-upload-mb", type=float, default=25.0,
                        help="the largest HTTP request body, in MiB; larger uploads are refused with 413 before "
                             "they are read (default 25)")
    access.add_argument("--max-audio-s", type=float, default=Limits.max_audio_s,
                        help="the longest audio of one stream or one uploaded file, in seconds (an upload's "
                             "decoding stops there); 0: no limit (default 7200)")
    access.add_argument("--max-speed", type=float, default=Limits.max_speed,
                        help="cut off clients sending audio faster than this many times real time (default 2)")
    access.add_argument("--start-timeout-s", type=float, default=Limits.start_timeout_s,
                        help="close a websocket that sends no start message within this time (default 5)")
    access.add_argument("--shutdown-grace-s", type=float, default=10.0,
                        help="on SIGTERM / Ctrl-C, how long open streams get to finish: each is ended as if its "
                             "client had sent 'end' and gets its final; the process then exits 0 (default 10)")
    cluster = p.add_argument_group("cluster (Ray Serve; docs/cluster-serve.md)")
    cluster.add_argument("--cluster", choices=("local", "ray"), default="local",
                         help="local (default): one process on this machine; ray: the same app deployed on Ray "
                              "Serve, as replicas that each load the model (needs simulst[ray])")
    cluster.add_argument("--ray-address", default=None, metavar="ADDRESS",
                         help="the Ray cluster to deploy on (HOST:PORT of its head, or ray://HOST:10001); default: "
                              "$RAY_ADDRESS, else a Ray instance started on this machine for the server's life")
    cluster.add_argument("--replicas", type=int, default=None, metavar="N",
                         help="replicas, each with its own model and its own --max-streams streams (default 1)")
    cluster.add_argument("--autoscale", default=None, metavar="MIN:MAX",
                         help="instead of --replicas: from MIN to MAX replicas, scaled by the open streams per "
                              "replica")
    cluster.add_argument("--replica-cpus", type=float, default=None, metavar="CPUS",
                         help="Ray CPUs per replica, and its torch threads (default 1)")
    add_stream_arguments(p)
    p.set_defaults(func=run_serve)


def server_config(args: argparse.Namespace) -> ServerConfig:
    """The server's configuration from the parsed arguments (validated; raises ``OptionError``)."""
    if args.max_streams < 1:
        raise OptionError(f"--max-streams must be >= 1, got {args.max_streams}")
    if not 0 < args.port < 65536:
        raise OptionError(f"--port must be 1..65535, got {args.port}")
    for flag, value in (("--max-speed", args.max_speed), ("--max-upload-mb", args.max_upload_mb),
                        ("--start-timeout-s", args.start_timeout_s)):
        if not value > 0:
            raise OptionError(f"{flag} must be > 0, got {value}")
    if args.max_per_client < 1:
        raise OptionError(f"--max-per-client must be >= 1, got {args.max_per_client}")
    if args.workers < 0:
        raise OptionError("--workers must be >= 0 (0: one per torch thread)")
    if args.max_audio_s < 0 or args.shutdown_grace_s < 0:
        raise OptionError("--max-audio-s and --shutdown-grace-s must be >= 0")
    for path in (args.ssl_certfile, args.ssl_keyfile):
        if path is not None and not Path(path).is_file():
            raise OptionError(f"no such file: {path}")
    if (args.ssl_certfile is None) != (args.ssl_keyfile is None):
        raise OptionError("--ssl-certfile and --ssl-keyfile go together")
    limits = Limits(max_speed=args.max_speed, start_timeout_s=args.start_timeout_s,
                    max_audio_s=args.max_audio_s or None)
    from simulst.server.service import ServerConfig

    name = args.model or "whisper-tiny.en"
    return ServerConfig(model_name=Path(name).name if os.sep in name else name,
                        options=stream_options_from_args(copy.copy(args), task="transcribe"),
                        translate_options=stream_options_from_args(copy.copy(args), task="translate"),
                        limits=limits, max_streams=args.max_streams,
                        token=args.token, transcripts=Path(args.transcripts) if args.transcripts else None,
                        batched=args.batching == "on" or (args.batching == "auto" and args.device != "cpu"),
                        workers=args.workers,
                        mt=args.mt, default_language=args.language, allow_origins=tuple(args.allow_origin),
                        max_per_client=args.max_per_client, max_body_bytes=round(args.max_upload_mb * (1 << 20)),
                        shutdown_grace_s=args.shutdown_grace_s)


def cluster_scaling(args: argparse.Namespace) -> Scaling | None:
    """The replicas of ``--cluster ray`` (None: one local process), validated; raises ``OptionError``."""
    values = (args.ray_address, args.replicas, args.autoscale, args.replica_cpus)
    given = [flag for flag, value in zip(CLUSTER_FLAGS, values, strict=True) if value is not None]
    if args.cluster != "ray":
        if given:
            raise OptionError(f"{', '.join(given)} {'needs' if len(given) == 1 else 'need'} --cluster ray")
        return None
    if args.replicas is not None and args.autoscale is not None:
        raise OptionError("give --replicas N or --autoscale MIN:MAX, not both")
    if args.replicas is not None and args.replicas < 1:
        raise OptionError(f"--replicas must be >= 1, got {args.replicas}")
    cpus = 1.0 if args.replica_cpus is None else args.replica_cpus
    if not cpus > 0:
        raise OptionError(f"--replica-cpus must be > 0, got {args.replica_cpus}")
    autoscale = None
    if args.autoscale is not None:
        match = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", args.autoscale)
        if match is None:
            raise OptionError(f"--autoscale takes MIN:MAX replicas, e.g. 1:4; got {args.autoscale!r}")
        low, high = int(match[1]), int(match[2])
        if not 1 <= low <= high:
            raise OptionError(f"--autoscale MIN:MAX needs 1 <= MIN <= MAX, got {args.autoscale!r}")
        autoscale = (low, high)
    from simulst.server.cluster import Scaling  # (plain data; the module imports Ray, checked by run_serve)

    return Scaling(replicas=args.replicas or 1, autoscale=autoscale, replica_cpus=cpus)


def run_serve(args: argparse.Namespace) -> int:
    """Load the model and serve until interrupted (SIGTERM / SIGINT: a graceful shutdown, then exit status 0)."""
    if args.cluster == "ray":
        _require_ray()
    scaling = cluster_scaling(args)
    config = server_config(args)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.token is None and not _loopback(args.host):
        print(f"simulst: warning: serving on {args.host} without --token: anyone who reaches it can use it",
              file=sys.stderr)
    if scaling is not None:
        return _run_cluster(args, config, scaling)
    import uvicorn  # lazy: only the server needs it

    from simulst.server import accesslog
    from simulst.server.app import create_app
    from simulst.server.service import Service
    from simulst.server.shutdown import GracefulServer

    model = model_from_args(args, task="transcribe")
    app = create_app(Service(model, config))
    limits = config.limits
    uvicorn_config = uvicorn.Config(
        app, host=args.host, port=args.port, log_level=args.log_level, access_log=False,  # (ours has no tokens)
        ws_max_size=limits.frame_bytes(limits.max_rate) + 1024, ssl_certfile=args.ssl_certfile,
        ssl_keyfile=args.ssl_keyfile)
    accesslog.configure()
    scheme = "https" if args.ssl_certfile else "http"
    print(f"simulst: serving {config.model_name} on {scheme}://{args.host}:{args.port}/ (websocket /ws, "
          f"OpenAI /v1/audio/transcriptions, /metrics); Ctrl-C stops", file=sys.stderr, flush=True)
    GracefulServer(uvicorn_config, app.state.hub.drain, config.shutdown_grace_s).run()
    return 0


def _require_ray() -> None:
    try:
        import ray  # noqa: F401
        from ray import serve  # noqa: F401
    except ImportError as err:
        raise OptionError(f"--cluster ray needs Ray Serve ({err}): pip install 'simulst[ray]'") from err


def _run_cluster(args: argparse.Namespace, config: ServerConfig, scaling: Scaling) -> int:
    """Deploy on Ray Serve and serve until SIGINT / SIGTERM, then drain the replicas and shut down."""
    from simulst.server.cluster import ClusterServer

    # (a replica's working directory is not this one: paths are made absolute)
    if args.model and Path(args.model).exists() and not is_catalog_name(args.model):
        args.model = str(Path(args.model).resolve())
    if args.ctc_head and Path(args.ctc_head).exists():
        args.ctc_head = str(Path(args.ctc_head).resolve())
    if config.transcripts is not None:
        config = dataclasses.replace(config, transcripts=config.transcripts.resolve())
    model = model_options_from_args(args, task="transcribe")  # (each replica loads it)
    address = args.ray_address or os.environ.get("RAY_ADDRESS") or None
    scheme = "https" if args.ssl_certfile else "http"
    where = f"the Ray cluster at {address}" if address else "a local Ray instance"
    print(f"simulst: deploying {config.model_name} on {where}: {scaling.describe()}", file=sys.stderr, flush=True)
    server = ClusterServer(config, model, scaling, args.host, args.port, address, args.ssl_certfile,
                           args.ssl_keyfile)
    print(f"simulst: serving {config.model_name} on Ray Serve at {scheme}://{args.host}:{args.port}/ (websocket "
          f"/ws, OpenAI /v1/audio/transcriptions, /health and /metrics of every replica); Ctrl-C stops",
          file=sys.stderr, flush=True)
    server.run_until_signalled()
    return 0


def ray_app(args: dict[str, Any]) -> Any:
    """The Serve application of a Serve config file (``serve run`` / ``serve deploy``, KubeRay's ``RayService``):
    ``import_path: simulst.cli.serve:ray_app`` with ``args: {flags: "--replicas 2 --max-streams 4 ..."}``, the
    flags of ``simulst serve --cluster ray`` (the config's ``http_options`` place the proxy: ``--host``,
    ``--port``, TLS and ``--ray-address`` do not apply)."""
    from simulst.server.cluster import application

    unknown = sorted(set(args) - {"flags"})
    if unknown:
        raise OptionError(f"unknown argument(s) {', '.join(unknown)}: give the serve flags as args.flags")
    parser = _RaisingParser(prog="simulst")
    register(parser.add_subparsers())
    parsed = parser.parse_args(["serve", "--cluster", "ray", *shlex.split(str(args.get("flags", "")))])
    scaling = cluster_scaling(parsed)
    assert scaling is not None
    return application(server_config(parsed), model_options_from_args(parsed, task="transcribe"), scaling)


class _RaisingParser(argparse.ArgumentParser):
    """A parser whose errors raise ``OptionError`` (a Serve config's flags are parsed inside Ray, not a shell)."""

    def error(self, message: str) -> NoReturn:
        raise OptionError(f"simulst serve flags: {message}")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
