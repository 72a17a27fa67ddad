"""What a request must pass before its fields are read: the Host header, the API key, a JSON content
type, a body within its size, JSON of bounded nesting.

Without an API key the server trusts whoever can reach it, so two browser attacks are shut out the way
Jupyter and Ollama shut them out. A web page can make the browser POST to 127.0.0.1 (cross-site request
forgery), but only as a "simple" request (text/plain, a form, or no content type), never with
application/json without a CORS preflight this server does not grant: POST must be application/json
(415). A page can also point its own domain name at 127.0.0.1 (DNS rebinding) and read the answers as
same-origin; its requests then carry that name in Host: without a key, Host must name this server's own
address (403). With a key neither attack works, and Host is not checked; nor when the server listens on
every address (--host 0.0.0.0), where any machine of the network may use it by choice.
"""
from __future__ import annotations

import asyncio
import hmac
import re

from fastapi import Request
from pydantic_core import from_json
from starlette.requests import ClientDisconnect

from .api_errors import ApiError
from .settings import ServeSettings

LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})
EVERY_ADDRESS = frozenset({"", "0.0.0.0", "::"})
HOST_HEADER = re.compile(r"(\[[0-9a-f:.]+\]|[^\s:/@\[\]]+)(?::\d*)?", re.IGNORECASE)  # name or [IPv6], port


def allowed_hosts(settings: ServeSettings) -> frozenset[str] | None:
    """The host names a request's Host header may carry, or None: any (a key is required, or every address
    is served)."""
    host = settings.host.strip("[]").lower()
    if settings.api_key or host in EVERY_ADDRESS:
        return None
    return LOOPBACK | {host}


def host_name(header: str) -> str | None:
    """The host of a Host header ("localhost:8080" -> "localhost", "[::1]:8080" -> "::1"), None if malformed."""
    match = HOST_HEADER.fullmatch(header.strip())
    return match[1].strip("[]").lower().rstrip(".") if match else None


def check_host(request: Request, allowed: frozenset[str] | None) -> None:
    if allowed is None:
        return
    header = request.headers.get("host", "")
    if host_name(header) not in allowed:
        raise ApiError(403, f"the Host header {header[:80]!r} does not name this server (without an API key it "
                       f"must be one of {', '.join(sorted(allowed))}, with or without the port); start "
                       "yggc serve with --api-key to serve other names", type="forbidden", code="invalid_host")


def check_auth(request: Request, key: str | None) -> None:
    if not key:
        return
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), key.encode()):
        raise ApiError(401, "incorrect API key: send it as the header 'Authorization: Bearer KEY'",
                       code="invalid_api_key")


def check_json_type(request: Request) -> None:
    media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media_type != "application/json":
        sent = f"not {media_type[:80]!r}" if media_type else "it came without one"
        raise ApiError(415, f"the request body must be JSON sent with 'Content-Type: application/json' ({sent})",
                       code="unsupported_media_type")


def too_large(size: str, limit: int) -> ApiError:
    return ApiError(413, f"the request body has {size} bytes; this server takes at most {limit}",
                    code="request_too_large")


async def read_body(request: Request, limit: int, timeout_s: float) -> bytes:
    """The body, read as it arrives: 413 as soon as it passes `limit` bytes (declared or not), 408 (and the
    connection closed) if it has not all arrived `timeout_s` seconds after its head."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large(declared, limit)
    chunks: list[bytes] = []
    try:
        await asyncio.wait_for(read_chunks(request, limit, chunks), timeout_s)  # asyncio.timeout needs Python 3.11
    except ClientDisconnect:
        raise ApiError(400, "the client went away before sending the whole body", code="invalid_json") from None
    except asyncio.TimeoutError:
        raise ApiError(408, f"the request body did not arrive within {timeout_s:g} s ({sum(map(len, chunks))} bytes "
                       "came); send it whole (yggc serve --body-timeout)", code="request_timeout",
                       headers={"Connection": "close"}) from None
    return b"".join(chunks)


async def read_chunks(request: Request, limit: int, chunks: list[bytes]) -> None:
    """Append the body's chunks to `chunks` as they arrive; 413 past `limit` bytes."""
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large(f"more than {limit}", limit)
        chunks.append(chunk)


def parse_json(body: bytes) -> object:
    """The body as JSON, or 400. pydantic-core's parser (Rust) refuses nesting deeper than its limit (200)
    itself, where Python's json module would recurse until RecursionError."""
    try:
        return from_json(body)
    except ValueError as e:
        raise ApiError(400, f"the request body {json_fault(str(e))}", code="invalid_json") from None


def json_fault(error: str) -> str:
    """What is wrong with a body, from pydantic-core's error ("unexpected end of hex escape at line 1 column 14")."""
    if "recursion limit" in error:
        return f"nests arrays and objects too deep ({error})"
    at = error[error.rfind(" at line "):] if " at line " in error else ""
    if "surrogate" in error or "end of hex escape" in error:  # serde_json's words for an unpaired \ud800-\udfff
        return (f"holds a lone UTF-16 surrogate{at}: a \\u escape in d800-dfff is half a character, valid only as a "
                "high (d800-dbff) then low (dc00-dfff) pair; send the text as UTF-8 or escape whole pairs")
    return f"is not valid JSON ({error})"
