"""Requests that break HTTP itself, over raw sockets (issue 82): a head or body that stalls gets a JSON 408 by
its deadline while other clients are served, an idle connection is closed, heads too large are a JSON 431 or
414, and whatever the parser refuses is a JSON 400, never text."""
import json
import socket
import threading
import time

import httpx
import pytest
from live_server import MODEL, read_response, start

from yggc.serve.settings import HttpLimits, ServeSettings

LIMITS = HttpLimits(header_timeout_s=1.0, body_timeout_s=1.5)
LATE = 1.0  # how far past its deadline an answer may come on a busy 2-core machine


@pytest.fixture(scope="module")
def server(demo_runtime):
    live, stop = start(demo_runtime, ServeSettings(MODEL, queue_size=2, limits=LIMITS))
    yield live
    assert httpx.get(f"{live.url}/health").json()["status"] == "ok"  # still serving after every test here
    stop()


def connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=LIMITS.body_timeout_s + 10)


def answer(sock: socket.socket) -> tuple[int, dict, dict]:
    """Status, headers and JSON body of the one answer, and the connection is closed after it."""
    head, body = read_response(sock)
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    assert sock.recv(1) == b"", "the connection stays open after the answer"
    return int(lines[0].split()[1]), headers, json.loads(body)


def assert_error(got: tuple[int, dict, dict], status: int, code: str) -> None:
    got_status, headers, body = got
    assert got_status == status and headers["content-type"] == "application/json", got
    assert set(body["error"]) == {"message", "type", "param", "code"} and body["error"]["code"] == code, body


def head(url: str, target: str = "/v1/completions", extra: str = "", length: int | None = None) -> bytes:
    host = url.removeprefix("http://")
    size = f"Content-Length: {length}\r\n" if length is not None else ""
    return (f"POST {target} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{size}{extra}\r\n"
            .encode())


def test_a_stalled_body_is_408_by_its_deadline_while_another_client_is_served(server):
    served = {}

    def other_client():
        r = httpx.post(f"{server.url}/v1/completions", timeout=30,
                       json={"model": MODEL, "prompt": "def f(x):", "max_tokens": 2, "temperature": 0})
        served["status"], served["at"] = r.status_code, time.perf_counter()

    with connect(server.url) as sock:
        sock.sendall(head(server.url, length=100) + b"{")  # 99 bytes never come
        sent = time.perf_counter()
        thread = threading.Thread(target=other_client)
        thread.start()
        got = answer(sock)
        took = time.perf_counter() - sent
        thread.join(30)
    assert_error(got, 408, "request_timeout")
    assert "1 bytes came" in got[2]["error"]["message"] and "--body-timeout" in got[2]["error"]["message"]
    assert LIMITS.body_timeout_s - 0.1 < took < LIMITS.body_timeout_s + LATE
    assert served["status"] == 200 and served["at"] - sent < LIMITS.body_timeout_s  # answered meanwhile


def test_a_head_dripped_byte_by_byte_is_408_by_its_deadline(server):
    """The deadline bounds the whole head, not the gap between bytes (slowloris)."""
    data = head(server.url, length=2)
    with connect(server.url) as sock:
        sent = time.perf_counter()
        sock.settimeout(0.2)
        for byte in data[:-2]:  # never the blank line that ends the head
            sock.sendall(bytes([byte]))
            try:
                if sock.recv(65536, socket.MSG_PEEK):
                    break
            except TimeoutError:
                continue
        sock.settimeout(10)
        got = answer(sock)
        took = time.perf_counter() - sent
    assert_error(got, 408, "request_timeout")
    assert "--header-timeout" in got[2]["error"]["message"]
    assert LIMITS.header_timeout_s - 0.1 < took < LIMITS.header_timeout_s + LATE


def test_a_connection_that_sends_nothing_is_closed_without_an_answer(server):
    with connect(server.url) as sock:
        opened = time.perf_counter()
        assert sock.recv(1) == b""
        assert time.perf_counter() - opened < LIMITS.header_timeout_s + LATE


def test_a_kept_alive_connection_has_a_deadline_for_its_next_head(server):
    with connect(server.url) as sock:
        host = server.url.removeprefix("http://")
        sock.sendall(f"GET /health HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        status, _ = read_response(sock)
        assert status.startswith(b"HTTP/1.1 200 ")
        sock.sendall(b"GET /health HTTP/1.1\r\n")  # and no more
        assert_error(answer(sock), 408, "request_timeout")


BIG = 100_000
TOO_LARGE = [  # (request line and headers after the Host, status, code)
    ("GET /v1/models HTTP/1.1\r\nX-Big: " + "x" * BIG + "\r\n", 431, "request_header_fields_too_large"),
    ("GET /v1/models HTTP/1.1\r\n" + "".join(f"X-{i}: y\r\n" for i in range(2000)), 431,
     "request_header_fields_too_large"),
    ("GET /v1/models HTTP/1.1\r\n" + "".join(f"X-{i}: y\r\n" for i in range(LIMITS.max_headers)), 431,
     "request_header_fields_too_large"),  # with the Host header, one too many
    ("GET /v1/models?q=" + "a" * BIG + " HTTP/1.1\r\n", 414, "uri_too_long"),
    ("GET /v1/" + "a" * LIMITS.max_url_bytes + " HTTP/1.1\r\n", 414, "uri_too_long"),  # within the head's size
]


@pytest.mark.parametrize("request_head, status, code", TOO_LARGE, ids=["100KB-header", "2000-headers",
                                                                       "101-headers", "100KB-url", "8KB-url"])
def test_a_head_too_large_is_a_json_431_or_414(server, request_head, status, code):
    line, _, rest = request_head.partition("\r\n")
    with connect(server.url) as sock:
        sock.sendall(f"{line}\r\nHost: {server.url.removeprefix('http://')}\r\n{rest}\r\n".encode())
        assert_error(answer(sock), status, code)


def test_a_head_within_the_limits_is_served(server):
    host = server.url.removeprefix("http://")
    target = "/v1/models?q=" + "a" * (LIMITS.max_url_bytes - len("/v1/models?q="))
    fields = "".join(f"X-{i}: y\r\n" for i in range(LIMITS.max_headers - 1))
    with connect(server.url) as sock:
        sock.sendall(f"GET {target} HTTP/1.1\r\nHost: {host}\r\n{fields}\r\n".encode())
        status, body = read_response(sock)
    assert status.startswith(b"HTTP/1.1 200 ") and json.loads(body)["data"][0]["id"] == MODEL


PARSER_ERRORS = [b"GARBAGE\r\n\r\n", b"GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
                 b"POST /v1/completions HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                 b"GET / HTTP/1.1\r\nBad Header\r\n\r\n", b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
                 b"GET /\x00 HTTP/1.1\r\n\r\n"]


@pytest.mark.parametrize("data", PARSER_ERRORS, ids=range(len(PARSER_ERRORS)))
def test_what_the_http_parser_refuses_is_a_json_400(server, data):
    with connect(server.url) as sock:
        sock.sendall(data)
        got = answer(sock)
    assert_error(got, 400, "invalid_http_request")
    assert got[2]["error"]["message"].startswith("malformed HTTP/1.1 request (")
