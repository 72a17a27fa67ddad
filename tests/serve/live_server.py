"""Helpers for the serve tests: a live server in a background thread, OpenAI's error JSON, Prometheus samples."""
import socket
import threading
import time
from dataclasses import dataclass

MODEL = "demo"


@dataclass
class Live:
    url: str     # http://127.0.0.1:PORT
    app: object  # the FastAPI app (app.state.worker, app.state.metrics)
    runtime: object

    def client(self, **kw):
        import openai

        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=kw.pop("api_key", "none"), max_retries=0,
                             timeout=60, **kw)


def start(runtime, settings):
    """Serve create_app(runtime, settings) until the returned stop() is called."""
    import uvicorn

    from yggc.serve.app import create_app
    from yggc.serve.server import uvicorn_config

    app = create_app(runtime, settings)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # TCP_NODELAY, as yggc serve
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn_config(app, settings))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not server.started and thread.is_alive() and time.time() < deadline:
        time.sleep(0.02)
    assert server.started, "the test server did not start"

    def stop():
        server.should_exit = True
        thread.join(10)

    return Live(f"http://127.0.0.1:{sock.getsockname()[1]}", app, runtime), stop


def read_response(sock: socket.socket) -> tuple[bytes, bytes]:
    """One HTTP answer's head and its body (by its Content-Length) from a raw socket."""
    data = b""
    while b"\r\n\r\n" not in data:
        got = sock.recv(65536)
        assert got, f"the connection closed before an answer: {data!r}"
        data += got
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
                 .split(b":")[1])
    while len(body) < length:
        body += sock.recv(65536)
    return head, body


def metric(text: str, name: str) -> float:
    """One sample's value from a Prometheus text page (name with its labels, as printed)."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise KeyError(name)


def assert_openai_error(r, status: int, code: str | None = None, param: str | None = None) -> None:
    """r (an httpx.Response) is OpenAI's error JSON with this status, code and param."""
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and isinstance(err["message"], str) and err["message"]
    assert err["code"] == code and err["param"] == param
