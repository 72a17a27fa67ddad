"""What a hostile client sends gets one clear JSON error, and the server stays responsive: long prompts are
refused before tokenizing and tokenized off the event loop, deep or endless bodies are refused, fields
yggc does not implement are refused by name, and a web page can neither post to a keyless server nor
read it through DNS rebinding."""
import asyncio
import json
import socket

import httpx
import pytest
from live_server import MODEL, assert_openai_error, read_response, start

from yggc.errors import YggcError
from yggc.serve.guards import allowed_hosts, host_name
from yggc.serve.settings import ServeSettings

OK = {"model": MODEL, "prompt": "def f(x):", "max_tokens": 2, "temperature": 0}
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "temperature": 0}


class TokenizerSpy:
    """The runtime's tokenizer, noting each text it encodes and whether that ran on an event loop."""

    def __init__(self, real):
        self.real, self.calls = real, []

    def note(self, text: str) -> None:
        try:
            asyncio.get_running_loop()
            on_loop = True
        except RuntimeError:
            on_loop = False
        self.calls.append((len(text), on_loop))

    def encode(self, text, *args, **kw):
        self.note(text)
        return self.real.encode(text, *args, **kw)

    def encode_batch(self, texts, *args, **kw):
        for text in texts:
            self.note(text)
        return self.real.encode_batch(texts, *args, **kw)

    def __getattr__(self, name):
        return getattr(self.real, name)


def test_a_huge_prompt_is_refused_before_tokenizing_and_prompts_tokenize_off_the_loop(live, monkeypatch):
    spy = TokenizerSpy(live.runtime.tokenizer)
    monkeypatch.setattr(live.runtime, "tokenizer", spy)
    huge = "x" * 1_000_000  # within the body limit, 2000 times what the 512-token context could hold
    for path, body, param in (("completions", {**OK, "prompt": huge}, "prompt"),
                              ("chat/completions", {**CHAT, "messages": [{"role": "user", "content": huge}]},
                               "messages")):
        r = httpx.post(f"{live.url}/v1/{path}", json=body, timeout=30)
        assert_openai_error(r, 400, "context_length_exceeded", param)
        assert "1000000 characters" in r.json()["error"]["message"]
    assert spy.calls == []  # never tokenized
    assert httpx.post(f"{live.url}/v1/completions", json=OK, timeout=60).status_code == 200
    assert httpx.post(f"{live.url}/v1/chat/completions", json=CHAT, timeout=60).status_code == 200
    assert len(spy.calls) == 2 and not any(on_loop for _, on_loop in spy.calls)


def test_deeply_nested_json_is_a_400(live):
    for depth in (1000, 100_000):
        r = httpx.post(f"{live.url}/v1/completions", content="[" * depth + "]" * depth,
                       headers={"content-type": "application/json"})
        assert_openai_error(r, 400, "invalid_json")
        assert "too deep" in r.json()["error"]["message"]


def test_a_chunked_body_is_refused_as_soon_as_it_passes_the_limit(live):
    """A body without Content-Length that never ends: the 413 comes while it is still being sent."""
    limit = ServeSettings(MODEL).max_body_bytes(live.runtime.verifier.layout.max_seq)
    host, port = live.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                     "Transfer-Encoding: chunked\r\n\r\n".encode())
        chunk = b"%x\r\n%s\r\n" % (1 << 16, b"x" * (1 << 16))
        for _ in range(2 * limit >> 16):  # twice the limit, and no last chunk
            sock.sendall(chunk)
        head, body = read_response(sock)
    assert head.startswith(b"HTTP/1.1 413 ")
    assert json.loads(body)["error"]["code"] == "request_too_large"


UNSUPPORTED = [  # (path, extra fields, the field the 400 names)
    ("completions", {"json_schema": {"type": "object"}}, "json_schema"),
    ("completions", {"guided_json": {"type": "object"}}, "guided_json"),
    ("completions", {"ignore_eos": True}, "ignore_eos"),
    ("completions", {"min_tokens": 8}, "min_tokens"),
    ("completions", {"stop_token_ids": [13]}, "stop_token_ids"),
    ("completions", {"typical_p": 0.5}, "typical_p"),
    ("completions", {"mirostat": 2}, "mirostat"),
    ("completions", {"max_completion_tokens": 4}, "max_completion_tokens"),  # chat's name
    ("completions", {"echo": True}, "echo"),
    ("chat/completions", {"guided_regex": "a+"}, "guided_regex"),
    ("chat/completions", {"stream": True, "stream_options": {"include_obfuscation": True}},
     "stream_options.include_obfuscation"),
    ("chat/completions", {"messages": [{"role": "user", "content": "hi", "name": "bob"}]}, "messages[0].name"),
]


@pytest.mark.parametrize("path, extra, field", UNSUPPORTED, ids=[f"{c[0]}-{c[2]}" for c in UNSUPPORTED])
def test_a_field_yggc_does_not_implement_is_refused_by_name(live, path, extra, field):
    r = httpx.post(f"{live.url}/v1/{path}", json={**(CHAT if path.startswith("chat") else OK), **extra}, timeout=30)
    assert_openai_error(r, 400, "unsupported_parameter", field)
    assert field.split(".")[-1] in r.json()["error"]["message"]


def test_fields_that_ask_for_nothing_more_are_accepted(live):
    harmless = {"user": "u-1", "n": 1, "logprobs": False, "presence_penalty": 0, "logit_bias": {}, "seed": None,
                "response_format": {"type": "text"}, "tools": [], "stream_options": None}
    assert httpx.post(f"{live.url}/v1/chat/completions", json={**CHAT, **harmless}, timeout=60).status_code == 200
    assert httpx.post(f"{live.url}/v1/completions", json={**OK, "user": "u-1", "echo": False, "suffix": None},
                      timeout=60).status_code == 200


def test_a_post_must_be_json(live):
    body = json.dumps(OK)
    for headers in ({"content-type": "text/plain"}, {"content-type": "application/x-www-form-urlencoded"}, {}):
        r = httpx.post(f"{live.url}/v1/completions", content=body, headers=headers)
        assert_openai_error(r, 415, "unsupported_media_type")
        assert "application/json" in r.json()["error"]["message"]
    ok = httpx.post(f"{live.url}/v1/completions", content=body,
                    headers={"content-type": "application/json; charset=utf-8"}, timeout=60)
    assert ok.status_code == 200


def test_without_a_key_the_host_header_must_name_this_server(live):
    port = live.url.rsplit(":", 1)[1]
    for host in ("evil.example", f"evil.example:{port}", f"127.0.0.1.evil.example:{port}", "", "a@127.0.0.1"):
        for method, path, body in (("GET", "/v1/models", None), ("POST", "/v1/completions", OK),
                                   ("GET", "/health", None)):
            r = httpx.request(method, f"{live.url}{path}", json=body, headers={"host": host})
            assert_openai_error(r, 403, "invalid_host")
    for host in (f"127.0.0.1:{port}", "localhost", f"LOCALHOST:{port}", f"[::1]:{port}", "localhost."):
        assert httpx.get(f"{live.url}/v1/models", headers={"host": host}).status_code == 200


def test_the_hosts_a_keyless_server_answers():
    assert host_name("[::1]:8080") == "::1" and host_name("Example.COM:80") == "example.com"
    assert host_name("a b") is None and host_name("x@127.0.0.1") is None
    assert allowed_hosts(ServeSettings(MODEL, host="10.1.2.3")) == {"localhost", "127.0.0.1", "::1", "10.1.2.3"}
    assert allowed_hosts(ServeSettings(MODEL, host="0.0.0.0")) is None  # every address: the network by choice
    assert allowed_hosts(ServeSettings(MODEL, api_key="k")) is None
    with pytest.raises(YggcError, match="the API key is empty"):  # not "no key": that would fail open
        ServeSettings(MODEL, api_key="")


def test_with_a_key_the_host_is_not_checked(demo_runtime):
    server, stop = start(demo_runtime, ServeSettings(MODEL, api_key="sekret", queue_size=1))
    try:
        evil = {"host": "evil.example"}
        assert_openai_error(httpx.get(f"{server.url}/v1/models", headers=evil), 401, "invalid_api_key")
        r = httpx.get(f"{server.url}/v1/models", headers={**evil, "authorization": "Bearer sekret"})
        assert r.status_code == 200
    finally:
        stop()


def test_a_model_without_a_tokenizer_asks_for_token_ids(live, monkeypatch):
    monkeypatch.setattr(live.runtime, "tokenizer", None)
    for path, body, param in (("completions", OK, "prompt"), ("chat/completions", CHAT, "messages")):
        r = httpx.post(f"{live.url}/v1/{path}", json=body)
        assert_openai_error(r, 400, "invalid_value", param)
        message = r.json()["error"]["message"]
        assert "list of token ids" in message and "--" not in message
    r = httpx.post(f"{live.url}/v1/completions", json={**OK, "prompt": [1, 2, 3]}, timeout=60)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 2


def test_the_shipped_chat_template_reaches_the_bundle(tmp_path):
    """`yggc compile` copies the demo verifier's tokenizer_config.json (chat template, end of turn) into the
    bundle, so the README's chat example answers on the demo bundle (test_process.py asks it)."""
    from yggc.passes.write_bundle import BundleWriter

    from yggc.runtime.chat import load_chat_template
    from yggc.runtime.loading import demo_pair_dirs, load_tokenizer

    verifier = demo_pair_dirs()[0]
    template = load_chat_template(verifier)
    assert template is not None and template.render([{"role": "user", "content": "hi"}])
    eot = load_tokenizer(verifier).token_to_id(template.eos_token)
    assert eot == json.loads((verifier / "config.json").read_text())["eos_token_id"]  # stops where it did
    with pytest.raises(ValueError, match="finish"):  # copy, look, and leave without committing a bundle
        with BundleWriter(tmp_path / "b") as writer:
            assert load_chat_template(writer.copy_model_dir(verifier, "verifier")) == template
