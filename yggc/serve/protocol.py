"""The HTTP/1.1 layer under the app: uvicorn's h11 protocol with a request's head bounded in time, size and
count, and every error the parser raises answered in OpenAI's error JSON.

uvicorn reads a head for as long as a client likes and answers a malformed one with a text/plain 400. Here a
head must arrive within HttpLimits.header_timeout_s of a connection's first byte, or of the answer before it
on a kept-alive connection (else 408; a connection that sent nothing is closed without one); a head over
max_head_bytes is 431 (414 while its request line has not ended), a request target over max_url_bytes 414
and more than max_headers fields 431. The body's limits are the app's (guards.read_body).
Every such answer closes the connection. h11 is used whichever parsers are installed, so the limits hold
the same everywhere.
"""
from __future__ import annotations

import asyncio
import http
import json

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from .api_errors import ApiError
from .settings import HttpLimits


def head_error(e: h11.RemoteProtocolError, limits: HttpLimits) -> ApiError:
    """The answer to a head h11 (or LimitedConnection) refused."""
    if e.error_status_hint == 414:
        return ApiError(414, f"the request's URL is longer than {limits.max_url_bytes} bytes; send a shorter one",
                        code="uri_too_long")
    if e.error_status_hint == 431:
        return ApiError(431, f"the request's headers are too large ({e}); this server takes at most "
                        f"{limits.max_head_bytes} bytes of request line and headers and {limits.max_headers} header "
                        "fields", code="request_header_fields_too_large")
    status = e.error_status_hint if 400 <= e.error_status_hint < 500 else 400  # never a 5xx for the client's bytes
    return ApiError(status, f"malformed HTTP/1.1 request ({e}); send a valid request line, "
                    "headers and Content-Length", code="invalid_http_request")


class LimitedConnection(h11.Connection):
    """h11's server side that checks each request's head against the limits and keeps the last error it raised
    (uvicorn answers it through send_400_response, which is given only a fixed message)."""

    def __init__(self, limits: HttpLimits, on_head):
        super().__init__(h11.SERVER, max_incomplete_event_size=limits.max_head_bytes)
        self.limits, self.on_head = limits, on_head
        self.error: h11.RemoteProtocolError | None = None

    def next_event(self):
        try:
            event = super().next_event()
        except h11.RemoteProtocolError as e:
            if e.error_status_hint == 431 and b"\n" not in self.trailing_data[0]:  # the request line is the long part
                e = h11.RemoteProtocolError("request line too long", error_status_hint=414)
            self.error = e
            raise e from None
        if isinstance(event, h11.Request):
            self.on_head()
            self.error = self.refusal(event)
            if self.error is not None:
                raise self.error
        return event

    def refusal(self, request: h11.Request) -> h11.RemoteProtocolError | None:
        """What is too large in a head that came whole (h11 bounds only one still arriving), or None."""
        if len(request.target) > self.limits.max_url_bytes:
            return h11.RemoteProtocolError("URL too long", error_status_hint=414)
        if len(request.headers) > self.limits.max_headers:
            return h11.RemoteProtocolError(f"{len(request.headers)} header fields", error_status_hint=431)
        size = len(request.method) + len(request.target) + 11 + sum(len(k) + len(v) + 4 for k, v in request.headers)
        if size > self.limits.max_head_bytes:  # "GET / HTTP/1.1\r\n", "name: value\r\n"
            return h11.RemoteProtocolError(f"{size} bytes", error_status_hint=431)
        return None


class LimitedH11(H11Protocol):
    """uvicorn's H11Protocol with LimitedConnection and a deadline for each request's head. Give uvicorn
    `functools.partial(LimitedH11, limits=...)` as Config(http=...)."""

    def __init__(self, *args, limits: HttpLimits, **kw):
        super().__init__(*args, **kw)
        self.limits = limits
        self.conn = LimitedConnection(limits, self.head_arrived)
        self.head_timer: asyncio.TimerHandle | None = None
        self.head_begun = False  # a byte of the awaited head has arrived

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self.head_arrived()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self.head_begun = self.head_begun or (self.head_timer is not None and bool(data))
        super().data_received(data)

    def on_response_complete(self) -> None:
        if not self.transport.is_closing():  # before uvicorn reads a pipelined request's head
            self.await_head()
        super().on_response_complete()

    def await_head(self) -> None:
        self.head_arrived()
        self.head_timer = self.loop.call_later(self.limits.header_timeout_s, self.head_timed_out)

    def head_arrived(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
        self.head_timer, self.head_begun = None, False

    def head_timed_out(self) -> None:
        begun, self.head_timer = self.head_begun, None
        if self.transport.is_closing():
            return
        if not begun:  # an idle connection: closed, as uvicorn closes one kept alive
            self.transport.close()
            return
        self.refuse(ApiError(408, f"the request's head (request line and headers) did not arrive within "
                             f"{self.limits.header_timeout_s:g} s; send it whole (yggc serve --header-timeout)",
                             code="request_timeout"))

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a head h11 refused, as JSON with the status the error asks for."""
        error = self.conn.error or h11.RemoteProtocolError(msg)
        self.conn.error = None
        self.refuse(head_error(error, self.limits))

    def refuse(self, e: ApiError) -> None:
        """Answer e and close: written as bytes, since h11's state after a refused head may allow no answer."""
        body = json.dumps(e.body()).encode()
        head = (f"HTTP/1.1 {e.status} {http.HTTPStatus(e.status).phrase}\r\ncontent-type: application/json\r\n"
                f"content-length: {len(body)}\r\nconnection: close\r\n\r\n")
        self.transport.write(head.encode() + body)
        self.transport.close()
