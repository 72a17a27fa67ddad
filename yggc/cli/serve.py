"""`yggc serve BUNDLE`: flags only; the server lives in yggc.serve, imported when the command runs
(FastAPI and uvicorn come with the optional extra: pip install 'yggc[serve]')."""
from __future__ import annotations

import argparse
import os
import sys

from ..serve.settings import HttpLimits
from .arg_types import Verbs, seconds, whole_number

MISSING_EXTRA = "yggc serve needs the serve extra: pip install 'yggc[serve]'"


def port_number(text: str) -> int:
    port = whole_number(0)(text)
    if port > 65535:
        raise argparse.ArgumentTypeError(f"expected a port 0..65535, got {port}")
    return port


def add_parser(sub: Verbs) -> None:
    """`yggc serve`: its flags; main runs it."""
    p = sub.add_parser(
        "serve", help="serve a bundle over an OpenAI-compatible HTTP API",
        description="Serve a compiled bundle over HTTP with the OpenAI API: POST /v1/chat/completions and "
                    "/v1/completions (stream true/false), GET /v1/models, /health and /metrics (Prometheus). "
                    "One request decodes at a time; the others wait in a FIFO queue (429 when it is full). Every "
                    "error is OpenAI's error JSON. A request's URL may hold 8 KiB (else 414), its request line and "
                    "headers 16 KiB and 100 fields (else 431), its body 1 MiB or 32 bytes per context token, "
                    "whichever is more (else 413).")
    p.add_argument("bundle", help="a bundle written by `yggc compile`")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=port_number, default=8080, help="port to listen on (default 8080; 0 = any free one)")
    p.add_argument("--api-key", metavar="KEY", default=os.environ.get("YGGC_API_KEY"),
                   help="require 'Authorization: Bearer KEY' on /v1/* (default: $YGGC_API_KEY, else no key; an "
                        "empty key is refused). Without a key, requests must name this server in their Host header")
    p.add_argument("--queue", type=whole_number(1), default=8,
                   help="requests that may wait while one decodes; more get 429 (default 8)")
    p.add_argument("--header-timeout", metavar="S", type=seconds, default=HttpLimits.header_timeout_s,
                   help="seconds a client has to send a request's line and headers, from its first byte (or the "
                        f"answer before it); then 408 (default {HttpLimits.header_timeout_s:g})")
    p.add_argument("--body-timeout", metavar="S", type=seconds, default=HttpLimits.body_timeout_s,
                   help=f"seconds a client has to send a request's body after its headers; then 408 (default "
                        f"{HttpLimits.body_timeout_s:g})")
    p.add_argument("-a", "--alias", metavar="NAME",
                   help="the model name clients send (default: the bundle folder's name)")
    p.add_argument("--suffix", action="store_true",
                   help="draft from each request's own repeats instead of the bundle's drafter (as yggc run --suffix)")
    branches = p.add_mutually_exclusive_group()
    branches.add_argument("--with-suffix", action="store_true",
                          help="add each request's suffix matches to the drafter's tree as extra branches at T > 0 "
                               "too (greedy requests get them by default; as yggc run --with-suffix)")
    branches.add_argument("--no-suffix", action="store_true",
                          help="the drafter's tree alone, without suffix branches, greedy requests too")
    p.add_argument("--threads", "-t", type=whole_number(1), help="torch/OpenMP threads (default: torch's, one per core)")
    p.set_defaults(main=main)


def main(args: argparse.Namespace) -> int:
    """Serve the bundle until interrupted -> the exit code (2 without the serve extra)."""
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        print(MISSING_EXTRA, file=sys.stderr)
        return 2
    from ..serve.server import serve
    from .run import set_threads, suffix_choice

    if args.suffix and (args.with_suffix or args.no_suffix):
        flag = "--with-suffix" if args.with_suffix else "--no-suffix"
        print(f"yggc serve: --suffix drafts from the text alone, without the drafter; drop {flag}", file=sys.stderr)
        return 2
    set_threads(args.threads)
    limits = HttpLimits(header_timeout_s=args.header_timeout, body_timeout_s=args.body_timeout)
    serve(args.bundle, args.host, args.port, args.api_key, args.queue, args.alias, args.suffix, suffix_choice(args),
          limits)
    return 0
