"""``simulst serve``: the streaming server (:mod:`simulst.server`) on uvicorn."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import sys
from pathlib import Path

from simulst.cli.options import add_stream_arguments, model_from_args, stream_options_from_args
from simulst.errors import OptionError
from simulst.server.protocol import Limits
from simulst.server.service import ServerConfig


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``serve``."""
    text = ("serve live transcription / translation: a web page with microphone capture, a websocket stream "
            "API at /ws (many concurrent streams, decoded in batches) and OpenAI-compatible file endpoints")
    p = sub.add_parser("serve", help=text, description=text)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--max-streams", type=int, default=16,
                   help="the most concurrent streams (websockets + file requests); more are refused (default 16)")
    p.add_argument("--token", default=os.environ.get("SIMULST_TOKEN"),
                   help="a shared secret clients must present (?token=, the start message, or Authorization: "
                        "Bearer); default: $SIMULST_TOKEN, else none")
    p.add_argument("--transcripts", metavar="DIR", default=None,
                   help="append every stream's committed output to DIR/<time>-<stream>.jsonl, flushed per emission")
    p.add_argument("--batching", choices=("auto", "on", "off"), default="auto",
                   help="on: decode concurrent streams in batched model calls; off: one stream at a time, each "
                        "reading all its pending audio when its turn comes; auto (default): on for a GPU, off on "
                        "a CPU, where it measured better (bench/results/serve_load.md)")
    p.add_argument("--mt", default="apertium", help="MT back-end for cascade streams (\"to\"): apertium (default)")
    p.add_argument("--max-speed", type=float, default=Limits.max_speed,
                   help="cut off clients sending audio faster than this many times real time (default 2)")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    add_stream_arguments(p)
    p.set_defaults(func=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    """Load the model and serve until interrupted."""
    import uvicorn  # lazy: only the server needs it

    from simulst.server.app import create_app
    from simulst.server.service import Service

    if args.max_streams < 1:
        raise OptionError(f"--max-streams must be >= 1, got {args.max_streams}")
    if not 0 < args.port < 65536:
        raise OptionError(f"--port must be 1..65535, got {args.port}")
    if args.max_speed <= 0:
        raise OptionError(f"--max-speed must be > 0, got {args.max_speed}")
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.token is None and not _loopback(args.host):
        print(f"simulst: warning: serving on {args.host} without --token: anyone who reaches it can use it",
              file=sys.stderr)
    options = stream_options_from_args(args)
    model = model_from_args(args, task="transcribe")
    limits = Limits(max_speed=args.max_speed)
    name = args.model or "whisper-tiny.en"
    config = ServerConfig(model_name=Path(name).name if os.sep in name else name, options=options, limits=limits,
                          max_streams=args.max_streams, token=args.token,
                          transcripts=Path(args.transcripts) if args.transcripts else None,
                          batched=args.batching == "on" or (args.batching == "auto" and args.device != "cpu"),
                          mt=args.mt, default_language=args.language)
    app = create_app(Service(model, config))
    print(f"simulst: serving {config.model_name} on http://{args.host}:{args.port}/ (websocket /ws, "
          f"OpenAI /v1/audio/transcriptions); Ctrl-C stops", file=sys.stderr, flush=True)
    ws_max = limits.frame_bytes(limits.max_rate) + 1024
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, ws_max_size=ws_max)
    return 0


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
