"""Every class of bad input gets its 4xx with OpenAI's error JSON, and the server keeps serving."""
import json
import threading
import time

import httpx
import openai
import pytest
from live_server import MODEL, assert_openai_error, start

OK = {"model": MODEL, "prompt": "def f(x):", "max_tokens": 4}
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
JSON = {"content-type": "application/json"}

CASES = [  # (path, body: dict or raw text, status, error code, param)
    ("completions", "{not json", 400, "invalid_json", None),
    ("completions", "[1, 2]", 400, "invalid_json", None),
    ("completions", {**OK, "model": "gpt-4o"}, 404, "model_not_found", "model"),
    ("completions", {k: v for k, v in OK.items() if k != "model"}, 400, "missing_required_parameter", "model"),
    ("completions", {**OK, "prompt": "x " * 600}, 400, "context_length_exceeded", "prompt"),
    ("completions", {**OK, "prompt": [1, 2, 99999]}, 400, "invalid_value", "prompt"),
    ("completions", {**OK, "prompt": ""}, 400, "invalid_value", "prompt"),
    ("completions", {**OK, "prompt": ["a", "b"]}, 400, "unsupported_parameter", "prompt"),
    ("completions", {**OK, "temperature": 2.5}, 400, "invalid_value", "temperature"),
    ("completions", {**OK, "temperature": "hot"}, 400, "invalid_value", "temperature"),
    ("completions", {**OK, "top_p": 0}, 400, "invalid_value", "top_p"),
    ("completions", {**OK, "max_tokens": 0}, 400, "invalid_value", "max_tokens"),
    ("completions", {**OK, "max_tokens": True}, 400, "invalid_value", "max_tokens"),
    ("completions", {**OK, "seed": -1}, 400, "invalid_value", "seed"),
    ("completions", {**OK, "stop": ["a", "b", "c", "d", "e"]}, 400, "invalid_value", "stop"),
    ("completions", {**OK, "stop": [""]}, 400, "invalid_value", "stop"),
    ("completions", {**OK, "n": 2}, 400, "unsupported_parameter", "n"),
    ("completions", {**OK, "logprobs": 21}, 400, "invalid_value", "logprobs"),
    ("completions", {**OK, "cache_prompt": "no"}, 400, "invalid_value", "cache_prompt"),
    ("completions", {**OK, "grammar": ""}, 400, "invalid_value", "grammar"),
    ("completions", {**OK, "grammar": 'root ::= "a" missing'}, 400, "invalid_value", "grammar"),
    ("chat/completions", {**CHAT, "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, 400,
     "invalid_value", "response_format"),
    ("chat/completions", {**CHAT, "response_format": {"type": "xml"}}, 400, "invalid_value", "response_format"),
    ("chat/completions", {**CHAT, "response_format": {"type": "json_object"}, "grammar": 'root ::= "a"'}, 400,
     "invalid_value", "grammar"),
    ("chat/completions", {**CHAT, "logprobs": 1}, 400, "invalid_value", "logprobs"),
    ("chat/completions", {**CHAT, "top_logprobs": 2}, 400, "invalid_value", "top_logprobs"),
    ("chat/completions", {**CHAT, "logprobs": True, "top_logprobs": 21}, 400, "invalid_value", "top_logprobs"),
    ("completions", {**OK, "presence_penalty": 0.5}, 400, "unsupported_parameter", "presence_penalty"),
    ("completions", {**OK, "stream": "yes"}, 400, "invalid_value", "stream"),
    ("chat/completions", {**CHAT, "messages": []}, 400, "invalid_value", "messages"),
    ("chat/completions", {**CHAT, "messages": [{"role": "robot", "content": "hi"}]}, 400, "invalid_value", "messages[0]"),
    ("chat/completions", {**CHAT, "messages": [{"role": "user", "content": 5}]}, 400, "invalid_value",
     "messages[0].content"),
    ("chat/completions", {**CHAT, "tools": [{"type": "function"}]}, 400, "unsupported_parameter", "tools"),
    ("chat/completions", {**CHAT, "messages": [{"role": "user", "content": "x " * 600}]}, 400,
     "context_length_exceeded", "messages"),
]


@pytest.mark.parametrize("path, body, status, code, param", CASES, ids=[f"{c[0]}-{c[3]}-{c[4]}" for c in CASES])
def test_bad_request_gets_openai_error_json(live, path, body, status, code, param):
    content = body if isinstance(body, str) else json.dumps(body)
    r = httpx.post(f"{live.url}/v1/{path}", content=content, headers=JSON)
    assert_openai_error(r, status, code, param)


def test_unknown_route_method_and_huge_body(live):
    assert_openai_error(httpx.get(f"{live.url}/v1/nothing"), 404, "not_found")
    assert_openai_error(httpx.get(f"{live.url}/v1/completions"), 405, "method_not_allowed")
    huge = json.dumps({**OK, "prompt": "x" * (2 << 20)})
    assert_openai_error(httpx.post(f"{live.url}/v1/completions", content=huge, headers=JSON), 413, "request_too_large")
    assert httpx.post(f"{live.url}/v1/completions", json=OK).status_code == 200  # still serving


def test_the_openai_client_raises_its_own_errors(live, monkeypatch):
    client = live.client()
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.completions.create(model="gpt-4o", prompt="x")
    with pytest.raises(openai.BadRequestError, match="top_p must be"):
        client.chat.completions.create(model=MODEL, messages=CHAT["messages"], top_p=0)
    monkeypatch.setattr(live.runtime.verifier, "chat", None)
    with pytest.raises(openai.BadRequestError, match="no chat template"):
        client.chat.completions.create(model=MODEL, messages=CHAT["messages"])


@pytest.mark.parametrize("text", [r"\ud800", r"a\ud800b", r"\udc00", r"\ud800\u0041"])
def test_a_lone_surrogate_is_named(live, text):
    r = httpx.post(f"{live.url}/v1/completions", content=f'{{"model": "{MODEL}", "prompt": "{text}"}}', headers=JSON)
    assert_openai_error(r, 400, "invalid_json")
    assert r.json()["error"]["message"].startswith("the request body holds a lone UTF-16 surrogate at line 1 column ")


ALTERNATIVES = 3000  # more than llguidance's 2,000 items in a parser row, which fails only once tokens come
OVERSIZE = [("completions", {**OK, "grammar": "root ::= " + " | ".join(f'"{i}"' for i in range(ALTERNATIVES))},
             "grammar"),
            ("chat/completions", {**CHAT, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
                "anyOf": [{"type": "object", "properties": {f"k{i}": {"type": "integer"}}, "required": [f"k{i}"]}
                          for i in range(ALTERNATIVES)]}}}}, "response_format")]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path, body, param", OVERSIZE, ids=["gbnf", "json_schema"])
def test_a_grammar_too_large_is_a_400_before_any_token(live, path, body, param, stream):
    with httpx.stream("POST", f"{live.url}/v1/{path}", json={**body, "stream": stream}, timeout=60) as r:
        r.read()
    assert_openai_error(r, 400, "invalid_value", param)
    assert "too large to follow" in r.json()["error"]["message"]


def test_a_grammar_that_fails_while_decoding_names_its_field(live, monkeypatch):
    """What the probe cannot find (a limit passed many tokens in) still names the grammar's field."""
    from yggc.runtime.constraint import Constraint, GrammarError

    def fail(self, tokens):
        raise GrammarError("the grammar could not go on after token 1 (Parser Error); simplify the grammar")

    monkeypatch.setattr(Constraint, "commit", fail)
    r = httpx.post(f"{live.url}/v1/completions", json={**OK, "grammar": 'root ::= "yes" | "no"'}, timeout=60)
    assert_openai_error(r, 400, None, "grammar")
    assert "could not go on" in r.json()["error"]["message"]


def test_api_key_and_full_queue(demo_runtime):
    """A server with a key and a one-request queue: 401 without the key; with the Runtime held by another
    thread, one request decodes (waiting for it), one waits in the queue, the third gets 429 with Retry-After."""
    from yggc.serve.settings import ServeSettings

    server, stop = start(demo_runtime, ServeSettings(MODEL, api_key="sekret", queue_size=1))
    try:
        with pytest.raises(openai.AuthenticationError, match="incorrect API key"):
            server.client(api_key="wrong").models.list()
        assert httpx.get(f"{server.url}/health").status_code == 200  # health and metrics need no key
        client, worker = server.client(api_key="sekret"), server.app.state.worker
        held = demo_runtime.stream_tokens("x", 4)
        next(held)  # this thread holds the Runtime: the decoding thread will wait for it
        answers = []
        ask = lambda: answers.append(client.completions.create(  # noqa: E731
            model=MODEL, prompt="def", max_tokens=4, temperature=0))  # greedy: OpenAI's default T = 1 may draw EOS early
        threads = [threading.Thread(target=ask), threading.Thread(target=ask)]
        threads[0].start()
        wait_for(lambda: worker.current is not None)
        threads[1].start()
        wait_for(lambda: worker.depth == 1)
        with pytest.raises(openai.RateLimitError, match="queue is full") as refused:
            client.completions.create(model=MODEL, prompt="def", max_tokens=4)
        assert refused.value.response.headers["retry-after"] == "1"  # which OpenAI's client waits for
        held.close()
        for t in threads:
            t.join(60)
        assert [a.usage.completion_tokens for a in answers] == [4, 4]
        assert "yggc_requests_rejected_total 1" in httpx.get(f"{server.url}/metrics").text
    finally:
        stop()


def wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, "timed out"
        time.sleep(0.01)
