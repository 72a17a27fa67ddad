"""The official openai client against a live server returns exactly what Runtime.generate gives."""
import threading

import httpx
import pytest
from live_server import MODEL, metric

PROMPT = "def fibonacci(n):"
MESSAGES = [{"role": "system", "content": "You write Python."}, {"role": "user", "content": "def add(a, b):"}]


def completion_text(client, stream: bool, **kw) -> str:
    out = client.completions.create(model=MODEL, stream=stream, **kw)
    return "".join(c.choices[0].text for c in out) if stream else out.choices[0].text


def chat_text(client, stream: bool, **kw) -> str:
    out = client.chat.completions.create(model=MODEL, stream=stream, **kw)
    return "".join(c.choices[0].delta.content or "" for c in out if c.choices) if stream else out.choices[0].message.content


@pytest.mark.parametrize("stream", [False, True])
def test_greedy_text_equals_runtime_generate(live, stream):
    rt, client = live.runtime, live.client()
    ref = rt.generate(PROMPT, 48)
    assert completion_text(client, stream, prompt=PROMPT, max_tokens=48, temperature=0) == ref.text
    chat_ref = rt.generate(messages=MESSAGES, max_new_tokens=32)
    assert chat_text(client, stream, messages=MESSAGES, max_tokens=32, temperature=0) == chat_ref.text


def test_non_streaming_response_carries_usage_and_speculative_stats(live):
    rt = live.runtime
    ref = rt.generate(PROMPT, 24)
    out = live.client().completions.create(model=MODEL, prompt=PROMPT, max_tokens=24, temperature=0)
    assert out.choices[0].finish_reason == "length"
    assert (out.usage.prompt_tokens, out.usage.completion_tokens) == (ref.stats.n_prompt, len(ref.tokens))
    stats = out.model_extra["yggc"]
    assert stats["speculative"] and stats["tree"] == {"depth": 3, "width": 2, "verify": 5}
    assert stats["suffix_branches"]  # a greedy request's default, as rt.generate's
    assert stats["n_iterations"] == ref.stats.n_iterations and stats["mean_accepted_length"] >= 1.0


def test_stream_ends_with_finish_stats_usage_and_done(live):
    with httpx.stream("POST", f"{live.url}/v1/chat/completions", timeout=60,
                      json={"model": MODEL, "messages": MESSAGES, "max_tokens": 8, "temperature": 0, "stream": True,
                            "stream_options": {"include_usage": True}}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = [line for line in r.iter_lines() if line]
    assert all(e.startswith("data: ") for e in events) and events[-1] == "data: [DONE]"
    import json

    objs = [json.loads(e[6:]) for e in events[:-1]]
    assert objs[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert objs[-2]["choices"][0]["finish_reason"] == "length" and "n_iterations" in objs[-2]["yggc"]
    assert objs[-1]["choices"] == [] and objs[-1]["usage"]["completion_tokens"] == 8


def test_seeded_sampling_repeats_and_matches_the_runtime(live):
    rt, client = live.runtime, live.client()
    kw = dict(prompt=PROMPT, max_tokens=32, temperature=0.8, top_p=0.95, seed=7)
    a, b = completion_text(client, False, **kw), completion_text(client, True, **kw)
    assert a == b == rt.generate(PROMPT, 32, temperature=0.8, top_p=0.95, seed=7).text


@pytest.mark.parametrize("stream", [False, True])
def test_stop_strings_cut_the_text(live, stream):
    ref = live.runtime.generate(PROMPT, 48).text
    stop = ref[ref.index("return"):][:9]  # a stop string somewhere in the middle of the answer
    out = live.client().completions.create(model=MODEL, prompt=PROMPT, max_tokens=48, temperature=0, stop=[stop, "@@"],
                                           stream=stream)
    chunks = list(out) if stream else [out]
    assert "".join(c.choices[0].text for c in chunks) == ref[:ref.index(stop)]
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_concurrent_clients_get_their_own_complete_answers(live):
    rt = live.runtime
    prompts = ["def fibonacci(n):", "import os\n", "class Point:"]
    refs = [rt.generate(p, 40).text for p in prompts]
    got = {}

    def ask(i):
        got[i] = completion_text(live.client(), i % 2 == 0, prompt=prompts[i], max_tokens=40, temperature=0)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [got.get(i) for i in range(3)] == refs


def test_a_client_that_disconnects_frees_the_server(live):
    client = live.client()
    before = httpx.get(f"{live.url}/metrics").text
    stream = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=400, temperature=0, stream=True)
    chunks = [next(iter(stream)) for _ in range(3)]
    assert all(c.choices[0].text is not None for c in chunks)
    stream.close()  # gone mid-stream
    out = client.completions.create(model=MODEL, prompt="import os\n", max_tokens=8, temperature=0)
    assert out.usage.completion_tokens == 8  # the next request runs
    after = httpx.get(f"{live.url}/metrics").text
    cancelled = 'yggc_requests_total{outcome="cancelled"}'
    assert metric(after, cancelled) == metric(before, cancelled) + 1
    decoded = metric(after, "yggc_generated_tokens_total") - metric(before, "yggc_generated_tokens_total") - 8
    assert 3 <= decoded < 200  # stopped soon after the disconnect, far from max_tokens=400


def test_models_health_and_metrics(live):
    client = live.client()
    assert [m.id for m in client.models.list()] == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL
    assert httpx.get(f"{live.url}/health").json()["status"] == "ok"
    page = httpx.get(f"{live.url}/metrics")
    assert page.headers["content-type"].startswith("text/plain")
    for name in ("yggc_queue_depth", "yggc_requests_rejected_total", "yggc_time_per_output_token_seconds_count",
                 "yggc_time_to_first_token_seconds_count", "yggc_accepted_length_count"):
        assert metric(page.text, name) >= 0
    assert metric(page.text, 'yggc_requests_total{outcome="completed"}') > 0
    assert metric(page.text, "yggc_accepted_length_sum") >= metric(page.text, "yggc_accepted_length_count") > 0


def test_a_non_streaming_client_that_gives_up_cancels_its_decode(live):
    before = httpx.get(f"{live.url}/metrics").text
    with pytest.raises(httpx.TimeoutException):
        httpx.post(f"{live.url}/v1/completions", timeout=0.3,
                   json={"model": MODEL, "prompt": PROMPT, "max_tokens": 400, "temperature": 0})
    out = live.client().completions.create(model=MODEL, prompt="import os\n", max_tokens=8, temperature=0)
    assert out.usage.completion_tokens == 8
    after = httpx.get(f"{live.url}/metrics").text
    cancelled = 'yggc_requests_total{outcome="cancelled"}'
    assert metric(after, cancelled) == metric(before, cancelled) + 1
    # stopped before max_tokens=400: how many tokens fit in the 0.3 s before the client gave up and the server saw it
    # depends on the CPU (~200 on a Zen 5 with the eager demo pair)
    assert metric(after, "yggc_generated_tokens_total") - metric(before, "yggc_generated_tokens_total") - 8 < 400


@pytest.mark.parametrize("stream", [False, True])
def test_chat_logprobs_are_the_runtimes(live, stream):
    """logprobs / top_logprobs through the official client: one entry per token, equal to Runtime.generate's."""
    rt, client = live.runtime, live.client()
    ref = rt.generate(messages=MESSAGES, max_new_tokens=16, logprobs=3)
    out = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=16, temperature=0, stream=stream,
                                         logprobs=True, top_logprobs=3)
    chunks = list(out) if stream else [out]
    entries = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [e.logprob for e in entries] == pytest.approx([lp.logprob for lp in ref.logprobs], abs=1e-6)
    assert [e.token for e in entries] == [rt.tokenizer.decode([lp.token], skip_special_tokens=False)
                                          for lp in ref.logprobs]
    assert all(len(e.top_logprobs) == 3 and e.top_logprobs[0].logprob >= e.logprob for e in entries)
    assert bytes(entries[0].bytes).decode() == entries[0].token


def test_completion_logprobs_in_the_legacy_format(live):
    rt = live.runtime
    ref = rt.generate(PROMPT, 12, logprobs=2)
    out = live.client().completions.create(model=MODEL, prompt=PROMPT, max_tokens=12, temperature=0, logprobs=2)
    lp = out.choices[0].logprobs
    assert lp.token_logprobs == pytest.approx([x.logprob for x in ref.logprobs], abs=1e-6)
    assert len(lp.tokens) == len(lp.top_logprobs) == 12 and all(len(t) <= 2 for t in lp.top_logprobs)
    assert lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset)
    plain = live.client().completions.create(model=MODEL, prompt=PROMPT, max_tokens=12, temperature=0)
    assert plain.choices[0].logprobs is None and plain.choices[0].text == out.choices[0].text


def test_a_follow_up_turn_reuses_the_cache_and_answers_as_a_cold_one(live):
    """The second turn of a chat prefills only what it adds (usage.prompt_tokens_details.cached_tokens) and gets
    the answer a request with cache_prompt: false gets."""
    client = live.client()
    first = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=24, temperature=0)
    turn = MESSAGES + [{"role": "assistant", "content": first.choices[0].message.content},
                       {"role": "user", "content": "Now subtract."}]
    cold = client.chat.completions.create(model=MODEL, messages=turn, max_tokens=24, temperature=0,
                                          extra_body={"cache_prompt": False})
    assert cold.usage.prompt_tokens_details.cached_tokens == 0
    client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=24, temperature=0)
    warm = client.chat.completions.create(model=MODEL, messages=turn, max_tokens=24, temperature=0)
    assert warm.choices[0].message.content == cold.choices[0].message.content
    assert warm.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens


SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}


@pytest.mark.parametrize("stream", [False, True])
def test_a_json_schema_response_format_is_followed_and_equals_the_runtimes(live, stream):
    import json

    from yggc.runtime.constraint import GrammarSpec

    rt, client = live.runtime, live.client()
    messages = [{"role": "user", "content": "Give a person as JSON."}]
    ref = rt.generate(messages=messages, max_new_tokens=64, grammar=GrammarSpec("json_schema", json.dumps(SCHEMA)))
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}}
    text = chat_text(client, stream, messages=messages, max_tokens=64, temperature=0, response_format=fmt)
    assert text == ref.text
    if ref.stats.stop_reason == "eos":
        value = json.loads(text)
        assert set(value) == {"name", "age"} and isinstance(value["age"], int)
    else:
        assert text.startswith("{")


def test_a_gbnf_grammar_on_completions(live):
    import re

    out = live.client().completions.create(model=MODEL, prompt=PROMPT, max_tokens=16, temperature=0,
                                           extra_body={"grammar": 'root ::= ("yes" | "no") " " [0-9] [0-9]?'})
    assert re.fullmatch(r"(yes|no) [0-9]{1,2}", out.choices[0].text) and out.choices[0].finish_reason == "stop"


@pytest.mark.parametrize("flag", ["suffix", "suffix_branches"])
def test_a_server_drafting_from_the_text_answers_what_the_verifier_alone_does(demo_runtime, flag):
    """`yggc serve --suffix` (each request drafts from its own text) and `--with-suffix` (its repeats join the
    drafter's tree): the answers are the verifier's own."""
    from live_server import start

    from yggc.serve.settings import ServeSettings

    server, stop = start(demo_runtime, ServeSettings(MODEL, queue_size=2, **{flag: True}))
    try:
        prompt = "def add(a, b):\n    return a + b\n\ndef add(a, b):\n"
        ref = demo_runtime.generate(prompt, 40, decoder=demo_runtime.decoder(speculative=False))
        out = server.client().completions.create(model=MODEL, prompt=prompt, max_tokens=40, temperature=0)
        assert out.choices[0].text == ref.text
        assert out.model_extra["yggc"]["n_accept"] > 0  # the repeated function was drafted and taken
        if flag == "suffix":
            assert out.model_extra["yggc"]["tree"] == {"depth": 6, "width": 2, "verify": 8}
    finally:
        stop()
