"""One request at a time on a Runtime: interleaved, concurrent, abandoned and interrupted requests never
yield tokens decoded on a KV cache another request overwrote."""
import threading

import pytest

from yggc.errors import RuntimeBusy, StreamInterrupted

PROMPTS = ["def fibonacci(n):", "import os\n", "class Point:"]


@pytest.fixture(scope="module")
def refs(demo_runtime):
    return {p: demo_runtime.generate(p, 40).tokens for p in PROMPTS}


def test_a_stream_resumed_after_another_request_raises(demo_runtime, refs):
    rt = demo_runtime
    first = rt.stream_tokens(PROMPTS[0], 40)
    head = next(first) + next(first)
    assert head == refs[PROMPTS[0]][:len(head)]
    assert rt.generate(PROMPTS[1], 40).tokens == refs[PROMPTS[1]]  # the newer request decodes correctly...
    with pytest.raises(StreamInterrupted, match="another request on the same Runtime"):
        next(first)  # ...and the older one refuses to go on rather than yield tokens from a reused cache
    assert [t for c in rt.stream_tokens(PROMPTS[0], 40) for t in c] == refs[PROMPTS[0]]


def test_text_stream_interrupted_the_same_way(demo_runtime, refs):
    rt = demo_runtime
    pieces = rt.stream(PROMPTS[2], 40)
    next(pieces)
    second = rt.stream_tokens(PROMPTS[0], 40)
    assert next(second) == refs[PROMPTS[0]][:1]
    with pytest.raises(StreamInterrupted):
        list(pieces)
    assert [t for c in second for t in c] == refs[PROMPTS[0]][1:]


def test_another_thread_waits_or_gets_runtime_busy(demo_runtime, refs):
    rt = demo_runtime
    held = rt.stream_tokens(PROMPTS[0], 40)
    next(held)
    got, errors = {}, []

    def other(blocking):
        try:
            got[blocking] = rt.generate(PROMPTS[1], 40, blocking=blocking).tokens
        except RuntimeBusy as e:
            errors.append(e)

    t = threading.Thread(target=other, args=(False,))
    t.start()
    t.join(10)
    assert len(errors) == 1 and "one request at a time" in str(errors[0]) and False not in got
    waiter = threading.Thread(target=other, args=(True,))
    waiter.start()
    waiter.join(0.5)
    assert waiter.is_alive()  # waits while the stream holds the Runtime
    rest = [t for c in held for t in c]  # the holder finishes undisturbed
    assert refs[PROMPTS[0]][-len(rest):] == rest
    waiter.join(30)
    assert got[True] == refs[PROMPTS[1]]


def test_closed_or_dropped_streams_free_the_runtime(demo_runtime, refs):
    rt = demo_runtime
    s = rt.stream_tokens(PROMPTS[0], 40)
    next(s)
    s.close()
    assert not rt.requests.busy
    s = rt.stream(PROMPTS[1], 40)
    next(s)
    del s  # abandoned half-way: garbage collection closes it
    assert not rt.requests.busy
    assert rt.generate(PROMPTS[2], 40, blocking=False).tokens == refs[PROMPTS[2]]


def test_a_failed_request_frees_the_runtime(demo_runtime):
    rt = demo_runtime
    with pytest.raises(Exception, match="empty"):
        rt.generate([], 8)
    with pytest.raises(Exception, match="top-p"):
        rt.generate("x", 8, top_p=0.0)
    assert not rt.requests.busy
