"""`yggc serve BUNDLE`: load the bundle, bind the socket, run uvicorn quietly (one startup line)."""
from __future__ import annotations

import socket
import sys
from pathlib import Path

from ..errors import YggcError
from ..runtime.runtime import Runtime
from .settings import ServeSettings


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket (port 0: any free port), or a YggcError naming the address."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as e:
        raise YggcError(f"cannot listen on {host}:{port} ({e.strerror or e}); pick another --port or --host") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def startup_line(settings: ServeSettings, runtime: Runtime, host: str, port: int) -> str:
    mode = (f"tree D={runtime.shape.depth} W={runtime.shape.width} V={runtime.shape.verify}" if runtime.speculate
            else "autoregressive (the plan's verdict)")
    url_host = f"[{host}]" if ":" in host else host
    key = ", API key required" if settings.api_key else ""
    return (f"yggc: serving {settings.model_id!r} ({mode}) at http://{url_host}:{port}/v1 "
            f"(queue {settings.queue_size}{key}); Ctrl-C stops")


def serve(bundle: str | Path, host: str = "127.0.0.1", port: int = 8080, api_key: str | None = None,
          queue_size: int = 8, alias: str | None = None) -> None:
    """Serve until interrupted. uvicorn logs warnings and errors only; no access log."""
    import uvicorn

    from .app import create_app

    runtime = Runtime.load(bundle)
    path = Path(bundle).resolve()
    settings = ServeSettings(alias or path.name, api_key, queue_size, int((path / "manifest.json").stat().st_mtime))
    app = create_app(runtime, settings)
    sock = bind(host, port)
    config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=5)
    print(startup_line(settings, runtime, host, sock.getsockname()[1]), file=sys.stderr, flush=True)
    uvicorn.Server(config).run(sockets=[sock])
