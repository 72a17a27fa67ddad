"""`yggc serve BUNDLE`: load the bundle, bind the socket, run uvicorn quietly (one startup line).

SIGTERM (or Ctrl-C) stops it gracefully: the listening socket closes, the requests waiting in the queue
are answered 503 at once, the one decoding may run GRACE_S seconds more and is then stopped (its stream
ends with a 503 error event and [DONE]), and SIGTERM's exit status is 0.
"""
from __future__ import annotations

import asyncio
import functools
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import uvicorn  # the serve extra: yggc.cli.serve checks it is installed before importing this module

from ..errors import YggcError
from ..runtime.runtime import Runtime
from .protocol import LimitedH11
from .settings import HttpLimits, ServeSettings
from .worker import DecodeWorker

GRACE_S = 3.0  # how long the request decoding at SIGTERM may go on before it is stopped


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket (port 0: any free port), or a YggcError naming the address."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # asyncio sets TCP_NODELAY on it
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as e:
        raise YggcError(f"cannot listen on {host}:{port} ({e.strerror or e}); pick another --port or --host") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def decoding_label(settings: ServeSettings, runtime: Runtime, sampling: bool) -> str:
    """What greedy (sampling=False) or sampled requests decode with, e.g. "tree D=2 W=4 V=7 + suffix branches"."""
    shape, speculate = runtime.plan_for(sampling)
    if not speculate:
        return "autoregressive (the plan's verdict)"
    branches = " + suffix branches" if runtime.suffix_branches_for(sampling, settings.suffix_branches) else ""
    unpriced = ", the greedy plan's, unpriced" if sampling and not runtime.sampling_plan else ""
    return f"tree {shape}{branches}{unpriced}"


def startup_line(settings: ServeSettings, runtime: Runtime, host: str, port: int) -> str:
    greedy, sampled = (decoding_label(settings, runtime, sampling) for sampling in (False, True))
    mode = "suffix drafts" if settings.suffix else f"greedy: {greedy}; T > 0: {sampled}"
    url_host = f"[{host}]" if ":" in host else host
    key = ", API key required" if settings.api_key else ""
    return (f"yggc: serving {settings.model_id!r} ({mode}) at http://{url_host}:{port}/v1 "
            f"(queue {settings.queue_size}{key}); Ctrl-C stops")


class DrainingServer(uvicorn.Server):
    """uvicorn's server, whose shutdown first answers the queue 503, and stops the running job after GRACE_S."""

    def __init__(self, config: uvicorn.Config, worker: DecodeWorker):
        super().__init__(config)
        self.worker = worker

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.worker.refuse_waiting()
        stop = asyncio.get_running_loop().call_later(
            GRACE_S, self.worker.abort_current, f"the server is shutting down; this request was stopped after "
            f"{GRACE_S:g} s")
        try:
            await super().shutdown(sockets)
        finally:
            stop.cancel()


def uvicorn_config(app, settings: ServeSettings, **kw) -> uvicorn.Config:
    """uvicorn's settings for the app: h11 with the request limits (protocol.py), warnings and errors only, no
    access log."""
    return uvicorn.Config(app, http=functools.partial(LimitedH11, limits=settings.limits), log_level="warning",
                          access_log=False, **kw)


def serve(bundle: str | Path, host: str = "127.0.0.1", port: int = 8080, api_key: str | None = None,
          queue_size: int = 8, alias: str | None = None, suffix: bool = False,
          suffix_branches: bool | None = None, limits: HttpLimits = HttpLimits()) -> None:
    """Serve until SIGTERM or Ctrl-C. suffix_branches: as ServeSettings. The settings are checked (an empty
    api_key is a YggcError) before the bundle loads."""
    from .app import create_app

    path = Path(bundle).resolve()
    manifest = path / "manifest.json"
    created = int(manifest.stat().st_mtime) if manifest.is_file() else 0  # a bundle without one: Runtime.load says so
    settings = ServeSettings(alias or path.name, api_key, queue_size, created, host, suffix, suffix_branches, limits)
    runtime = Runtime.load(bundle)
    app = create_app(runtime, settings)
    sock = bind(host, port)
    # uvicorn waits for the connections at most this long, past the grace given to the decoding request
    config = uvicorn_config(app, settings, timeout_graceful_shutdown=GRACE_S + 2)
    print(startup_line(settings, runtime, host, sock.getsockname()[1]), file=sys.stderr, flush=True)
    with sigterm_returns():
        DrainingServer(config, app.state.worker).run(sockets=[sock])


@contextmanager
def sigterm_returns() -> Iterator[None]:
    """uvicorn re-raises the signal it stopped on once it has shut down; by then SIGTERM's work is done, so
    it must not kill the process (exit 143): the server returns and `yggc serve` exits 0."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread gets signals
        yield
        return
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
