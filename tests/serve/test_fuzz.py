"""A seeded fuzz of the live server: over a thousand malformed or hostile requests on loopback, each
answered with an allowed status (never a 5xx), every 4xx to a /v1 POST in OpenAI's error JSON, every
stream read to its end, no traceback logged; afterwards the server still answers a greedy request
exactly as the Runtime does.

The requests mix random JSON values in every field (wrong types, NaN and Infinity as raw text, huge
integers, negative numbers, empty, unicode and very long strings, surrogate escapes), missing required
and extra unknown fields, nesting under and over the parser's limit, truncated or invalid JSON and
invalid UTF-8 bytes, wrong Content-Types, random paths under /v1 and random methods, bad Host headers,
grammars and JSON schemas that are broken or hostile, logprobs out of range; streaming and not. Over raw
sockets (issue 82): request lines and headers the HTTP parser refuses, heads too large (431) or URLs too long
(414), heads and bodies that stall (408 by their deadline), idle connections (closed); grammars too large to
follow (400 naming the field, streams too), lone surrogates (named), and bursts past the queue (429 with
Retry-After). The sequence depends on SEED alone (not on the answers), so a failure names the request index
that reproduces it."""
from __future__ import annotations

import json
import logging
import random
import socket
import threading
import time
from dataclasses import dataclass, field

import httpx
import pytest
from live_server import MODEL, start

from yggc.serve.guards import host_name
from yggc.serve.params import CHAT_FIELDS, TEXT_FIELDS
from yggc.serve.settings import HttpLimits, ServeSettings

SEED = 0x5EED_F022
N_REQUESTS = 1200
MAX_BODY = 64 * 1024      # no body is larger (the server's own limit, 1 MiB, is tested elsewhere)
MAX_LONG_DECODES = 6      # requests that may decode more than SHORT tokens (a chat without max_tokens, ...)
SHORT = 16
# a trailing slash is a 404 with error JSON (FastAPI(redirect_slashes=False)), not a redirect that skips the Host check
ALLOWED = {200, 400, 401, 403, 404, 405, 408, 413, 414, 415, 422, 429, 431}
LIMITS = HttpLimits(header_timeout_s=0.5, body_timeout_s=0.5)  # short, so that a stalled request costs little
QUEUE = 4
MAX_STALLS = 20           # requests that wait for a deadline (0.5 s each), each in a thread beside the others
BURST = 8                 # concurrent requests in a burst: one decodes, QUEUE wait, the rest get 429
LATE = 2.0                # how far past its deadline a 408 may come on a busy machine
HANG_S = 30               # an answer later than this is a hang
NESTING_LIMIT = 200       # pydantic-core's JSON parser refuses deeper nesting (guards.parse_json)
LOGGERS = ("yggc.serve", "uvicorn.error", "asyncio")


class Raw(str):
    """JSON text sent as it is: NaN, Infinity, 1e999, a surrogate escape."""


def dump(v, ascii_only: bool) -> str:
    """JSON text of v, with Raw pieces inserted verbatim (json.dumps would quote them)."""
    if isinstance(v, Raw):
        return str(v)
    if isinstance(v, dict):
        return "{" + ",".join(f"{dump(k if isinstance(k, Raw) else str(k), ascii_only)}:{dump(x, ascii_only)}"
                              for k, x in v.items()) + "}"
    if isinstance(v, list | tuple):
        return "[" + ",".join(dump(x, ascii_only) for x in v) + "]"
    return json.dumps(v, ensure_ascii=ascii_only)


SCALARS = [None, True, False, 0, 1, -1, 2, 0.5, -0.0, 1e-300, 3.14159, 2**31, 2**63 - 1, 2**63, 2**64, -2**63,
           10**40, -10**40, Raw("NaN"), Raw("Infinity"), Raw("-Infinity"), Raw("1e999"), Raw("-1e999"),
           Raw("1" + "0" * 400), Raw("-0"), Raw("1E+2"), "", " ", "0", "1", "true", "null", "NaN", "\x00", "\ufeff",
           "\u202e", "é", "日本語", "😀", "\U0010ffff", Raw('"\\ud800"'), Raw('"\\udfff"'), Raw('"\\ud83d\\ude00"'),
           Raw('"\\u0000"'), Raw('"a\\ud800b"'), Raw('"\\uDBFF\\uDFFF"'), MODEL, "gpt-4o", "text", "json_object",
           "json_schema", "user", "system", "assistant", "developer", "tool"]
TEXTS = ["def f(x):", "hi", "Hello, world", "import numpy as np\n", "x", "1 2 3", "The quick brown fox"]
ALPHABET = "abcxyz019 \n\t\"\\{}[]:,'<>|/é日😀\x00\x1f\u2028\ufeff"
UNKNOWN = ["json_schema", "guided_json", "guided_regex", "tools", "functions", "tool_choice", "n_probs", "",
           "__proto__", "constructor", "prompt\x00", "x" * 200, "ignore_eos", "MODEL", "Temperature", "max_tokens ",
           "😀", "mirostat", "min_tokens", "parallel_tool_calls", "metadata", "store", "modalities", "audio"]
FIELDS = sorted(CHAT_FIELDS | TEXT_FIELDS)

GBNF = ['root ::= "yes" | "no"', "root ::= [a-z]+", 'root ::= "a" root | "b"', 'root ::= item+\nitem ::= [0-9] " "',
        'root ::= root "a" | "a"', "root ::= root", 'root ::= "日本" | "😀"', 'root ::= "a"{2,3}',  # valid
        "", " ", "\n", "root ::=", 'root ::= "a', "root ::= [", 'root ::= (("a")', "root ::= x", '::= "a"',
        'root ::= "a" ::= "b"', "root ::= [z-a]", 'root ::= "\\x"', 'root ::= "a"{3,1}', 'root ::= "a"{99999999999}',
        "root ::= [^\\x00-\\U0010FFFF]", 'root ::= "\\uD800"', 'root ::= "\x00"', "\x00", "root ::= ()",
        'root ::= "a"{100000}', "root ::= " + "|".join(f'"{i}"' for i in range(3000)), "% ?x", "start: /a+/",
        "root ::= " + "(" * 150 + '"a"' + ")" * 150]
SCHEMAS = [{}, {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
           {"type": "string", "maxLength": 2}, {"enum": ["x", "y"]}, {"const": 1}, {"type": "boolean"},  # valid
           {"type": "nope"}, {"type": 5}, {"type": []}, {"$ref": "#/definitions/missing"},
           {"$ref": "http://evil.example/x"}, {"$ref": "file:///etc/passwd"}, {"type": "string", "pattern": "("},
           {"type": "string", "pattern": "a{99999}"}, {"minLength": -1}, {"type": "array", "minItems": 10, "maxItems": 1},
           {"anyOf": []}, {"enum": []}, {"allOf": [{"type": "string"}, {"type": "integer"}]},
           {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}, {"format": "email"},
           {"type": "string", "format": "nope"}, {"type": "integer", "minimum": 1e308, "maximum": -1e308},
           {"type": "number", "minimum": Raw("NaN")}, {"type": "array", "minItems": 10**20},
           {"type": "string", "minLength": 10**6}, {"x-guidance": {"whitespace_flexible": "yes"}}, {"x-guidance": 5},
           {"x-guidance": {"lenient": True}}, {"type": "string", "pattern": Raw('"\\ud800"')},
           {"properties": Raw("NaN")}, {"type": "object", "additionalProperties": {"$ref": "#"}},
           {"type": "array", "items": {"type": "integer"}, "minItems": 5000}]


def deep_schema(depth: int) -> Raw:
    """A JSON schema of objects nested depth deep (2 JSON levels each), as JSON text."""
    return Raw('{"type":"object","required":["a"],"properties":{"a":' * depth + '{"type":"integer"}' + "}}" * depth)


def nested(rng: random.Random, depth: int) -> Raw:
    """depth levels of arrays or objects around a scalar, as JSON text (too deep to build recursively)."""
    kinds = [rng.random() < 0.5 for _ in range(depth)]
    return Raw("".join("[" if k else '{"a":' for k in kinds) + rng.choice(["1", '"x"', "null", "NaN"])
               + "".join("]" if k else "}" for k in reversed(kinds)))


def long_text(rng: random.Random, n: int) -> str:
    if rng.random() < 0.5:
        return rng.choice(["x", "ab ", "日本", "😀", "\x00", " "]) * (n // 2)
    return "".join(rng.choice(ALPHABET) for _ in range(n))


def value(rng: random.Random, depth: int = 0):
    """A random JSON value of any type."""
    r = rng.random()
    if depth > 2 or r < 0.45:
        return rng.choice(SCALARS)
    if r < 0.55:
        return rng.choice([rng.randint(-2**70, 2**70), rng.uniform(-5, 5), rng.randint(-3, 30)])
    if r < 0.7:
        return long_text(rng, rng.choice([1, 5, 100, 3000, 20000]))
    if r < 0.85:
        return [value(rng, depth + 1) for _ in range(rng.randint(0, 5))]
    return {rng.choice(FIELDS + UNKNOWN + ["type", "text", "role", "content"]): value(rng, depth + 1)
            for _ in range(rng.randint(0, 4))}


def message(rng: random.Random):
    r = rng.random()
    if r < 0.4:
        return {"role": rng.choice(["user", "system", "assistant", "developer"]), "content": rng.choice(TEXTS)}
    if r < 0.55:  # roles of every type (a list or an object once made a 500: hashed for the lookup)
        return {"role": rng.choice(["user", "tool", "robot", "", "USER", None, 1, [], ["user"], {"a": 1},
                                      value(rng)]),
                "content": value(rng)}
    if r < 0.7:
        parts = [rng.choice([{"type": "text", "text": rng.choice(TEXTS)}, {"type": "image_url", "image_url": "x"},
                             {"type": "text"}, {"type": "text", "text": 5}, {"text": "a"}, "text", value(rng)])
                 for _ in range(rng.randint(0, 3))]
        return {"role": "user", "content": parts}
    if r < 0.8:
        return {"role": "user", "content": "hi", rng.choice(UNKNOWN + ["name", "tool_calls"]): value(rng)}
    if r < 0.9:
        return {"role": "user"}  # no content
    return value(rng)


def response_format(rng: random.Random):
    """Objects, near-misses and values of every type (5, "json_object", [], true once made a 500)."""
    r = rng.random()
    schema = rng.choice(SCHEMAS) if rng.random() < 0.85 else (deep_schema(rng.choice([5, 30, 60, 99, 120]))
                                                             if rng.random() < 0.5 else value(rng))
    if r < 0.5:
        return {"type": "json_schema", "json_schema": {"name": rng.choice(["x", "", None, 5]), "schema": schema,
                                                      "strict": rng.choice([True, False, None, "yes"])}}
    if r < 0.6:
        return {"type": "json_schema", "json_schema": rng.choice([schema, None, "x", [], {"name": "x"}])}
    if r < 0.75:
        return {"type": rng.choice(["json_object", "text", "json_schema"])}
    if r < 0.85:
        return {"type": value(rng)}
    return rng.choice(["json_object", "text", [], None, value(rng), {"type": "json_object", "schema": schema}])


def field_value(rng: random.Random, key: str, chat: bool):
    """A value aimed at key: near its valid range, or of its type but out of range."""
    ints = [-2**64, -1, 0, 1, 2, 3, 4, 20, 21, 50, 4096, 2**31, 2**63 - 1, 2**63, 2**64, 10**30]
    # 10**400: an integer beyond a float's range (once a 500: OverflowError in math.isfinite)
    numbers = [-1, -0.0, 0, 1e-300, 0.1, 0.5, 1, 1.0000001, 2, 2.5, 1e308, Raw("NaN"), Raw("Infinity"),
               Raw("-Infinity"), Raw("1e999"), "0.5", True, 10**400, -10**400]
    match key:
        case "model":
            return rng.choice([MODEL, MODEL.upper(), MODEL + " ", "", "gpt-4o", "demo\x00", "../" + MODEL, None, 5,
                               long_text(rng, 5000)])
        case "temperature" | "top_p" | "min_p":
            return rng.choice(numbers + [rng.uniform(-1, 3)])
        case "top_k" | "seed":
            return rng.choice(ints + ["4", 1.5, True, None, Raw("1e2")])
        case "max_tokens" | "max_completion_tokens":
            return rng.choice([-1, 0, 1, 2, 4, 1.0, 4.5, "4", True, False, None, [4], Raw("NaN"), 2**63, 2**64,
                               10**30, -2**64])
        case "stop":
            return rng.choice(["", "\n", "x", ["", "a"], ["a"] * 5, ["a", "b", "c", "d"], [None], [1], [["a"]], "😀",
                               [long_text(rng, 3000)], long_text(rng, 20000), Raw('"\\ud800"'), {"a": 1}, 5,
                               [Raw('"\\udc00"')], ["\x00"], []])
        case "logprobs":
            return rng.choice([True, False, None, "yes", 0, 1, 5, 1.5] + list(range(-3, 26)))
        case "top_logprobs":
            return rng.choice([True, False, None, "5", 1.5, -2**64, 2**64] + list(range(-3, 26)))
        case "stream":
            return rng.choice([True, False, None, "yes", 1, 0, [], {}, "true"])
        case "stream_options":
            return rng.choice([None, {}, {"include_usage": True}, {"include_usage": "yes"}, {"include_usage": None},
                               {"include_usage": True, "x": 1}, {"include_obfuscation": False}, [], "x", 5,
                               {"include_usage": [True]}])
        case "cache_prompt":
            return rng.choice([True, False, None, "no", 0, 1, []])
        case "grammar":
            return rng.choice(GBNF) if rng.random() < 0.8 else rng.choice(
                [value(rng), "".join(rng.choice('root::=|()[]"*+?{}-^\\ \nabc09') for _ in range(rng.randint(1, 60)))])
        case "response_format":
            return response_format(rng)
        case "prompt":
            return rng.choice([rng.choice(TEXTS), "", " ", "\x00", long_text(rng, rng.choice([100, 2000, 20000])),
                               "x " * 600, [rng.randint(0, 4200) for _ in range(rng.randint(0, 8))], [-1], [2**64],
                               [0] * 600, [1.5], [True], [[1, 2]], [[]], [""], ["a"], ["a", "b"], [[1], [2]],
                               [Raw("NaN")], {"text": "x"}, value(rng)])
        case "messages":
            return rng.choice([[message(rng) for _ in range(rng.randint(1, 4))], [], None, "hi", [[]], {"role": "user"},
                               [{"role": "user", "content": long_text(rng, 20000)}]])
        case "n" | "best_of":
            return rng.choice([1, 2, 0, -1, 1.0, True, None, "1", 2**64])
        case "frequency_penalty" | "presence_penalty" | "repetition_penalty":
            return rng.choice([0, 1, 0.0, 1.0, -2, 2, False, True, None, Raw("NaN")])
        case "logit_bias":
            return rng.choice([{}, {"1": 100}, {"x": "y"}, [], None, {"99999999": -100}, {Raw('"\\ud800"'): 1}])
        case "echo":
            return rng.choice([False, True, 0, None, "false"])
        case "suffix":
            return rng.choice(["", None, "x", 0, False])
        case "user":
            return rng.choice(["u-1", "", None, 5, long_text(rng, 3000), {"id": 1}])
    return value(rng)


@dataclass
class Request:
    method: str
    path: str
    content: bytes | None = None
    headers: dict = field(default_factory=dict)
    kind: str = ""
    expect: int | None = None        # the one status this request must get, where it is certain
    expect_code: str | None = None   # and its error code
    expect_param: str | None = None  # and its param, where one is certain
    expect_in: str = ""              # and words its message holds
    raw: bytes | None = None         # sent over a socket as it is ({HOST} replaced), and read to the close
    stall: bool = False              # raw: the server must answer (or close) by its deadline, the client sends no more
    burst: int = 0                   # sent this many times at once


def base(rng: random.Random, chat: bool) -> dict:
    body = {"model": MODEL, "max_tokens": rng.randint(1, 4), "temperature": rng.choice([0, 0, 0.7, 1.0])}
    if chat:
        body["messages"] = [{"role": "user", "content": rng.choice(TEXTS)}]
    else:
        body["prompt"] = rng.choice(TEXTS)
    if rng.random() < 0.4:
        body["stream"] = True
    return body


def mutated(rng: random.Random, chat: bool) -> dict:
    body = base(rng, chat)
    for _ in range(rng.choice([1, 1, 1, 2, 2, 3, 5])):
        r = rng.random()
        if r < 0.5:
            key = rng.choice(FIELDS)
            body[key] = field_value(rng, key, chat)
        elif r < 0.7:
            body[rng.choice(FIELDS)] = value(rng)
        elif r < 0.85 and body:
            del body[rng.choice(sorted(body))]
        else:
            body[rng.choice(UNKNOWN)] = value(rng)
    return body


def may_decode_long(body) -> bool:
    """Whether a body that might be valid could decode more than SHORT tokens (the loop allows a few)."""
    if not isinstance(body, dict):
        return False
    chat = "messages" in body
    limits = [body.get(k) for k in (("max_completion_tokens", "max_tokens") if chat else ("max_tokens",))]
    given = [v for v in limits if v is not None]
    if not given:
        return chat  # chat's default is the rest of the context; completions' is 16
    return any(isinstance(v, int) and not isinstance(v, bool) and v > SHORT for v in given)


def body_request(rng: random.Random, body, chat: bool, kind: str) -> Request:
    ascii_only = rng.random() < 0.5
    content = dump(body, ascii_only).encode("utf-8", "surrogatepass")
    return Request("POST", "/v1/chat/completions" if chat else "/v1/completions", content,
                   {"content-type": "application/json"}, kind)


def raw_bytes(rng: random.Random, chat: bool) -> Request:
    """Bodies that are not JSON (or not UTF-8) sent as application/json: always a 400 invalid_json."""
    good = json.dumps(base(rng, chat)).encode()
    r = rng.random()
    if r < 0.3:
        content = good[:rng.randrange(len(good))]
    elif r < 0.45:
        content = rng.randbytes(rng.randint(1, 2000))
    elif r < 0.65:
        bad = rng.choice([b"\xff", b"\xfe\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf4\x90\x80\x80", b"\x80",
                          b"\xe2\x82"])
        at = good.index(b'": "', good.index(b'"model"')) + 4  # inside the model's string
        content = good[:at] + bad + good[at:]
        if rng.random() < 0.5:  # or inside the prompt or the message
            key = b'"content": "' if chat else b'"prompt": "'
            at = good.index(key) + len(key)
            content = good[:at] + bad + good[at:]
    else:
        content = rng.choice([b"", b" ", b"\n", b"\xef\xbb\xbf" + good, good.decode().encode("utf-16"), good + b" x",
                              good + good, b"// c\n" + good, good.replace(b'"', b"'"), b"{", b"}", b"{}}", b"\x00",
                              good.replace(b":", b"=", 1), b"{" + b'"a":1,' * 5000 + b'"a":}'])
    try:  # a body that is valid JSON after all is not a certain 400 (none of these should be)
        json.loads(content)
        expect = None
    except ValueError:
        expect = 400
    return Request("POST", "/v1/chat/completions" if chat else "/v1/completions", content,
                   {"content-type": "application/json"}, "raw-bytes", expect, "invalid_json" if expect else None)


def nesting(rng: random.Random, chat: bool) -> Request:
    depth = rng.choice([rng.randint(1, NESTING_LIMIT - 5), rng.randint(NESTING_LIMIT + 5, 2000)])
    body = base(rng, chat)
    r = rng.random()
    if r < 0.3:
        doc = nested(rng, depth)
    elif r < 0.6:
        body[rng.choice(FIELDS + UNKNOWN)] = nested(rng, depth)
        doc = body
    elif chat and r < 0.8:  # a deep JSON schema: valid where it is within the limit
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "deep",
                                                                         "schema": deep_schema(depth // 2)}}
        doc = body
    else:
        body["stop"] = nested(rng, depth)
        doc = body
    req = body_request(rng, doc, chat, "nesting")
    if depth > NESTING_LIMIT + 4:
        req.expect, req.expect_code = 400, "invalid_json"
    return req


def content_type(rng: random.Random, chat: bool) -> Request:
    req = body_request(rng, base(rng, chat), chat, "content-type")
    ctype = rng.choice([None, "", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                        "application/jsonx", "application/json-patch+json", "application/*", "*/*", "json",
                        "application/json", "APPLICATION/JSON", "application/json ; charset=utf-8",
                        "application/json;charset=latin-1", "application/json; charset=utf-16", "text/json",
                        "application/json\tx", "application/ld+json", b"application/json\xff", b"\xff\xfe"])
    if ctype is None:
        del req.headers["content-type"]
    else:
        req.headers["content-type"] = ctype
    media = (ctype.decode("latin-1") if isinstance(ctype, bytes) else ctype or "").partition(";")[0].strip().lower()
    if media != "application/json":
        req.expect, req.expect_code = 415, "unsupported_media_type"
    return req


def host_header(rng: random.Random, chat: bool) -> Request:
    req = body_request(rng, base(rng, chat), chat, "host")
    host = rng.choice(["evil.example", "evil.example:1", "127.0.0.1.evil.example", "", "a@127.0.0.1",
                       "127.0.0.1:", "127.0.0.1:99999", "127.0.0.1:abc", "[::1", "[::1]", "[::2]:80", "::1",
                       "localhost", "LOCALHOST:1", "localhost.", "localhost..", "0.0.0.0", "127.0.0.2", "2130706433",
                       "127.1", "xn--e1afmkfd", "local host", "localhost/x", b"\xff.example", b"localhost\xff",
                       "x" * 2000])
    req.headers["host"] = host
    name = host_name(host.decode("latin-1") if isinstance(host, bytes) else host)
    if name not in {"localhost", "127.0.0.1", "::1"}:
        req.expect, req.expect_code = 403, "invalid_host"
    return req


PATHS = ["/v1", "/v1/", "/v1/completions", "/v1/chat/completions", "/v1/models", "/v1/models/" + MODEL,
         "/v1/models/x/y", "/v1/models/%ff%fe", "/v1/models/%00", "/v1/models/" + "a" * 3000, "/v1/completion",
         "/v1/chat", "/v1/chat/completions/", "/v1/completions/", "/v1/embeddings", "/v1/responses", "/v1/audio/speech",
         "/v1//completions", "/v1/%2e%2e/health", "/v1/%2e%2e/metrics", "/v1/%00", "/v1/%ff", "/v1/completions?x=1",
         "/v1/completions;x", "/v1/COMPLETIONS", "/v1/models/%2e%2e", "/v1/%E6%97%A5", "/v1/" + "a/" * 500]
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "TRACE", "PROPFIND", "FOO", "get", "CONNECT"]


def path_method(rng: random.Random, chat: bool) -> Request:
    method = rng.choice(METHODS)
    r = rng.random()
    content = None if r < 0.4 else json.dumps(base(rng, chat)).encode() if r < 0.8 else rng.randbytes(50)
    headers = {"content-type": "application/json"} if content is not None and rng.random() < 0.8 else {}
    return Request(method, rng.choice(PATHS), content, headers, "path-method")


PARSER_ERRORS = [b"GARBAGE\r\n\r\n", b"GET\r\n\r\n", b"GET / HTTP/1.1 x\r\n\r\n", b" / HTTP/1.1\r\n\r\n",
                 b"GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
                 b"POST /v1/completions HTTP/1.1\r\nHost: {HOST}\r\nContent-Length: abc\r\n\r\n",
                 b"POST /v1/completions HTTP/1.1\r\nHost: {HOST}\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                 b"POST /v1/completions HTTP/1.1\r\nHost: {HOST}\r\nTransfer-Encoding: gzip\r\n\r\n",
                 b"GET / HTTP/1.1\r\nBad Header\r\n\r\n", b"GET / HTTP/1.1\r\n: empty\r\n\r\n",
                 b"GET /\x00 HTTP/1.1\r\n\r\n", b"GET / HTTP/1.1\r\nX: a\x00b\r\n\r\n",
                 b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", b"GET / HTTP/1.1\r\n folded\r\n\r\n", b"GET / HTTP/1.1\r\nHost: {HOST}\r\nX\xff: y\r\n\r\n"]


def parser_error(rng: random.Random) -> Request:
    """Bytes h11 refuses: a JSON 400 (random bytes: whatever comes, in the error shape)."""
    if rng.random() < 0.8:
        return Request("RAW", "", kind="parser", raw=rng.choice(PARSER_ERRORS), expect=400,
                       expect_code="invalid_http_request")
    raw = rng.choice([rng.randbytes(rng.randint(1, 300)) + b"\r\n\r\n", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"])
    return Request("RAW", "", kind="parser", raw=raw)


def head_of(target: str, fields: str = "", method: str = "GET") -> bytes:
    return f"{method} {target} HTTP/1.1\r\nHost: {{HOST}}\r\nConnection: close\r\n{fields}\r\n".encode()


def large_head(rng: random.Random) -> Request:
    """A long URL (414), a large header or too many (431), or a head just within the limits (served)."""
    what = rng.choice(["url", "header", "count", "within"])
    if what == "url":
        raw = head_of("/v1/models?q=" + "a" * rng.choice([LIMITS.max_url_bytes, 12_000, 20_000, 100_000]))
        return Request("RAW", "", kind="large-head", raw=raw, expect=414, expect_code="uri_too_long")
    if what == "header":
        raw = head_of("/v1/models", "X-Big: " + "x" * rng.choice([LIMITS.max_head_bytes, 40_000, 100_000]) + "\r\n")
        return Request("RAW", "", kind="large-head", raw=raw, expect=431, expect_code="request_header_fields_too_large")
    if what == "count":  # with Host and Connection
        fields = "".join(f"X-{i}: y\r\n" for i in range(rng.choice([LIMITS.max_headers - 1, 150, 500, 2000])))
        return Request("RAW", "", kind="large-head", raw=head_of("/v1/models", fields), expect=431,
                       expect_code="request_header_fields_too_large")
    target = "/v1/models?q=" + "a" * rng.randint(0, LIMITS.max_url_bytes - 13)
    fields = "".join(f"X-{i}: y\r\n" for i in range(rng.randint(0, LIMITS.max_headers - 2)))
    return Request("RAW", "", kind="large-head", raw=head_of(target, fields), expect=200)


def stalled(rng: random.Random, chat: bool) -> Request:
    """A head or a body that stops coming (408 by its deadline), or a connection that sends nothing (closed)."""
    path = "/v1/chat/completions" if chat else "/v1/completions"
    body = json.dumps(base(rng, chat)).encode()
    what = rng.choice(["head", "body", "idle"])
    if what == "idle":
        return Request("RAW", "", kind="stall", raw=b"", stall=True)
    if what == "head":
        full = head_of(path, "Content-Type: application/json\r\n", "POST")
        return Request("RAW", "", kind="stall", raw=full[:rng.randint(1, len(full) - 3)], stall=True, expect=408,
                       expect_code="request_timeout", expect_in="--header-timeout")
    fields = f"Content-Type: application/json\r\nContent-Length: {len(body) + rng.randint(1, 100)}\r\n"
    return Request("RAW", "", kind="stall", raw=head_of(path, fields, "POST") + body[:rng.randint(0, len(body))],
                   stall=True, expect=408, expect_code="request_timeout", expect_in="--body-timeout")


def large_grammar(rng: random.Random, chat: bool) -> Request:
    """More alternatives in one rule than llguidance's parser takes in a row (2,000): refused before decoding."""
    body = base(rng, chat)
    body["grammar"] = "root ::= " + " | ".join(f'"{i}"' for i in range(rng.choice([2001, 2500, 4000])))
    req = body_request(rng, body, chat, "large-grammar")
    req.expect, req.expect_code, req.expect_param, req.expect_in = 400, "invalid_value", "grammar", "too large"
    return req


def lone_surrogate(rng: random.Random, chat: bool) -> Request:
    body = base(rng, chat)
    text = Raw('"' + rng.choice(["\\ud800", "a\\udbffb", "\\udc00", "\\ud800\\u0041", "x\\udfff"]) + '"')
    if chat:
        body["messages"][0]["content"] = text
    else:
        body["prompt"] = text
    req = body_request(rng, body, chat, "surrogate")
    req.expect, req.expect_code, req.expect_in = 400, "invalid_json", "lone UTF-16 surrogate"
    return req


def burst(rng: random.Random, chat: bool) -> Request:
    """BURST valid requests at once: each is 200 or a 429 with Retry-After."""
    body = {**base(rng, chat), "max_tokens": SHORT, "temperature": 0}
    return Request("POST", "/v1/chat/completions" if chat else "/v1/completions", json.dumps(body).encode(),
                   {"content-type": "application/json"}, "burst", burst=BURST)


def next_request(rng: random.Random) -> Request:
    chat = rng.random() < 0.5
    r = rng.random()
    if r < 0.15:  # the edges of issue 82
        r = rng.random()
        return (parser_error(rng) if r < 0.3 else large_head(rng) if r < 0.55 else stalled(rng, chat) if r < 0.7
                else large_grammar(rng, chat) if r < 0.8 else lone_surrogate(rng, chat) if r < 0.97
                else burst(rng, chat))
    r = rng.random()
    if r < 0.45:
        return body_request(rng, mutated(rng, chat), chat, "fields")
    if r < 0.52:  # grammar and response_format on a body that is otherwise valid
        body = base(rng, chat)
        key = "response_format" if chat and rng.random() < 0.6 else "grammar"
        body[key] = field_value(rng, key, chat)
        return body_request(rng, body, chat, "grammar")
    if r < 0.58:  # the prompt or the messages alone
        body = base(rng, chat)
        key = "messages" if chat else "prompt"
        body[key] = field_value(rng, key, chat)
        return body_request(rng, body, chat, key)
    if r < 0.64:
        body = base(rng, chat)
        for key in rng.sample(["logprobs", "top_logprobs"], rng.randint(1, 2)):
            body[key] = field_value(rng, key, chat)
        return body_request(rng, body, chat, "logprobs")
    if r < 0.71:
        return raw_bytes(rng, chat)
    if r < 0.77:
        return nesting(rng, chat)
    if r < 0.83:
        return content_type(rng, chat)
    if r < 0.89:
        return host_header(rng, chat)
    if r < 0.97:
        return path_method(rng, chat)
    body = base(rng, chat)  # a required field missing, or the body no object at all
    del body["messages" if chat else "prompt"]
    if rng.random() < 0.5:
        del body["model"]
    return body_request(rng, body if rng.random() < 0.8 else value(rng), chat, "missing")


class Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def error_shape(body: bytes) -> str | None:
    """Why body is not OpenAI's error JSON ({"error": {message, type, param, code}}), or None."""
    try:
        err = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError) as e:
        return f"not an error JSON ({type(e).__name__})"
    if not isinstance(err, dict) or set(err) != {"message", "type", "param", "code"}:
        return f"error fields {sorted(err) if isinstance(err, dict) else err!r}"
    if not (isinstance(err["message"], str) and err["message"] and isinstance(err["type"], str)):
        return "error message or type is not a non-empty string"
    if not all(err[k] is None or isinstance(err[k], str) for k in ("param", "code")):
        return "error param or code is neither null nor a string"
    return None


def stream_problem(body: bytes) -> str | None:
    """Why a 200 event stream is not whole (every data line JSON, no error, [DONE] last), or None."""
    data = [line[6:] for line in body.decode("utf-8").splitlines() if line.startswith("data: ")]
    if not data or data[-1] != "[DONE]":
        return "the stream does not end with [DONE]"
    for item in data[:-1]:
        obj = json.loads(item)
        if "error" in obj:
            kind = obj["error"].get("type") if isinstance(obj["error"], dict) else None
            if kind == "server_error":  # a 5xx sent inside a stream
                return f"a server error in the stream: {item[:300]}"
    return None


def check(req: Request, status: int | None, headers, body: bytes) -> str | None:
    """What is wrong with this answer (None: the server closed without one), or None."""
    if status is None:
        return None if req.stall and req.expect is None else "the connection closed without an answer"
    if status >= 500 or status not in ALLOWED:
        return f"status {status}"
    if req.expect is not None and status != req.expect:
        return f"status {status}, expected {req.expect}"
    if status == 429 and headers.get("retry-after") != "1":
        return "a 429 without Retry-After: 1"
    if 400 <= status < 500 and req.method != "HEAD":  # every path here is under /v1, not only the POSTs
        why = error_shape(body)
        if why:
            return why
        err = json.loads(body)["error"]
        if req.expect_code is not None and err["code"] != req.expect_code:
            return f"error code {err['code']!r}, expected {req.expect_code!r}"
        if req.expect_param is not None and err["param"] != req.expect_param:
            return f"error param {err['param']!r}, expected {req.expect_param!r}"
        if req.expect_in not in err["message"]:
            return f"the message does not say {req.expect_in!r}"
    if status == 200 and req.method == "POST" and req.path.rstrip("/").endswith("completions"):
        if headers.get("content-type", "").startswith("text/event-stream"):
            return stream_problem(body)
        answer = json.loads(body)
        if not answer.get("choices"):
            return "a 200 without choices"
    return None


Answer = tuple[int | None, dict, bytes]  # status (None: closed without one), headers, body


def send_raw(url: str, req: Request) -> list[Answer]:
    """req.raw over a fresh socket, read until the server closes it: its answers (pipelined requests get
    several), or one of status None when it closed without any."""
    address = url.removeprefix("http://")
    host, port = address.rsplit(":", 1)
    data = b""
    with socket.create_connection((host, int(port)), timeout=HANG_S) as sock:
        try:
            sock.sendall(req.raw.replace(b"{HOST}", address.encode()))
        except (BrokenPipeError, ConnectionResetError):  # refused before it was all sent: the answer is read below
            pass
        try:
            while chunk := sock.recv(65536):
                data += chunk
        except ConnectionResetError:
            pass
    answers = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = dict(line.lower().split(": ", 1) for line in lines[1:] if ": " in line)
        size = int(headers.get("content-length", len(rest)))
        answers.append((int(lines[0].split()[1]), headers, rest[:size]))
        data = rest[size:]
    return answers or [(None, {}, b"")]


def send_burst(client: httpx.Client, req: Request) -> list[Answer]:
    answers: list = [None] * req.burst

    def one(i: int) -> None:
        try:
            r = client.post(req.path, content=req.content, headers=req.headers)
            answers[i] = (r.status_code, r.headers, r.content)
        except httpx.HTTPError as e:
            answers[i] = e

    threads = [threading.Thread(target=one, args=(i,)) for i in range(req.burst)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(HANG_S)
    for a in answers:
        if not isinstance(a, tuple):
            raise a or TimeoutError("a burst request never ended")
    return answers


def send(client: httpx.Client, url: str, req: Request) -> list[Answer]:
    """The answers to req (a burst has several); raises for a hang or a dropped connection."""
    if req.raw is not None:
        return send_raw(url, req)
    if req.burst:
        return send_burst(client, req)
    with client.stream(req.method, req.path, content=req.content, headers=req.headers) as r:
        return [(r.status_code, r.headers, r.read())]  # a stream is read to its end


@pytest.fixture(scope="module")
def fuzzed(demo_runtime):
    """A server of its own, with deadlines short enough for a few stalled requests."""
    live, stop = start(demo_runtime, ServeSettings(MODEL, queue_size=QUEUE, limits=LIMITS))
    yield live
    stop()


def test_a_thousand_hostile_requests_get_4xx_and_the_server_keeps_answering(fuzzed):
    rng = random.Random(SEED)
    handler = Records()
    loggers = [logging.getLogger(name) for name in LOGGERS]
    for logger in loggers:
        logger.addHandler(handler)
    failures, statuses, spent, long_decodes, stalls, hangs = [], {}, {}, 0, [], []

    def answered(i: int, req: Request, answers: list[Answer]) -> None:
        for status, headers, body in answers:
            statuses[status] = statuses.get(status, 0) + 1
            why = check(req, status, headers, body)
            if why:
                failures.append((i, req, why, body[:500]))

    def stall(i: int, req: Request) -> None:
        """A stalled request, beside the others: the server answers them meanwhile."""
        started = time.perf_counter()
        try:
            answers = send_raw(fuzzed.url, req)
        except OSError as e:
            hangs.append(i)
            failures.append((i, req, f"{type(e).__name__}: {e}", b""))
            return
        took = time.perf_counter() - started
        if took > max(LIMITS.header_timeout_s, LIMITS.body_timeout_s) + LATE:
            failures.append((i, req, f"answered {took:.1f} s after the stall began", b""))
        answered(i, req, answers)

    t0 = time.perf_counter()
    try:
        # a fresh connection per request: on a kept-alive one each answer waits ~40 ms for a delayed ACK, as the
        # server's accepted sockets lack TCP_NODELAY (the listening socket is made with proto 0, and asyncio sets
        # TCP_NODELAY only where sock.proto == IPPROTO_TCP)
        with httpx.Client(base_url=fuzzed.url, timeout=HANG_S, limits=httpx.Limits(max_keepalive_connections=0)) as client:
            sent = 0
            while sent < N_REQUESTS:
                req = next_request(rng)
                if req.content is not None and len(req.content) > MAX_BODY:
                    continue
                if req.content is not None and may_decode_long(_body_of(req)):
                    if long_decodes >= MAX_LONG_DECODES:
                        continue
                    long_decodes += 1
                if req.stall:
                    if len(stalls) >= MAX_STALLS:
                        continue
                    stalls.append(threading.Thread(target=stall, args=(sent, req), daemon=True))
                    stalls[-1].start()
                    sent += 1
                    continue
                sent += max(1, req.burst)
                started = time.perf_counter()
                try:
                    answers = send(client, fuzzed.url, req)
                except (httpx.HTTPError, OSError) as e:  # a hang (timeout) or a dropped connection
                    if isinstance(e, httpx.TimeoutException | TimeoutError):
                        hangs.append(sent - 1)
                    failures.append((sent - 1, req, f"{type(e).__name__}: {e}", b""))
                    continue
                spent[req.kind] = spent.get(req.kind, 0.0) + time.perf_counter() - started
                answered(sent - 1, req, answers)
        for thread in stalls:
            thread.join(HANG_S)
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
    seconds = time.perf_counter() - t0
    shown = dict(sorted(statuses.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)))
    print(f"fuzz: {N_REQUESTS} requests in {seconds:.1f} s; statuses {shown} (None: closed without an answer); "
          f"5xx {sum(n for k, n in statuses.items() if k and k >= 500)}; hangs {len(hangs)}; stalled {len(stalls)} "
          f"beside the rest; seconds by kind "
          f"{({k: round(v, 1) for k, v in sorted(spent.items())})}")

    # the server still answers, and correctly (checked first, so that a bad answer above does not hide it)
    with httpx.Client(base_url=fuzzed.url, timeout=60) as client:
        prompt = "def fibonacci(n):"
        r = client.post("/v1/completions", json={"model": MODEL, "prompt": prompt, "max_tokens": 16, "temperature": 0})
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["text"] == fuzzed.runtime.generate(prompt, 16).text
        assert client.get("/health").json() == {"status": "ok", "queue_depth": 0}

    tracebacks = [r for r in handler.records
                  if r.exc_info or "Traceback" in r.getMessage() or "Traceback" in (r.exc_text or "")]
    report = "\n".join(f"#{i} [{req.kind}] {req.method} {req.path} {req.headers} "
                       f"{(req.content or req.raw or b'')[:300]!r}: {why} {body!r}" for i, req, why, body in failures[:20])
    logged = "\n".join(f"{r.name}: {r.getMessage()} {r.exc_info[1]!r}" if r.exc_info else f"{r.name}: {r.getMessage()}"
                       for r in tracebacks[:5])
    assert not failures and not tracebacks, (f"{len(failures)} bad answers, {len(tracebacks)} tracebacks logged; "
                                             f"the first answers:\n{report}\nthe first logged:\n{logged}")
    assert statuses.get(200, 0) >= 50 and statuses.get(400, 0) >= 300, statuses  # the mix reached both sides
    assert all(statuses.get(s) for s in (408, 414, 429, 431)), statuses  # and every edge of issue 82


def _body_of(req: Request):
    try:
        return json.loads(req.content)
    except (ValueError, RecursionError):
        return None
