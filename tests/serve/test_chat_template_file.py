"""A bundle whose verifier keeps its chat template only in chat_template.jinja (as transformers 5 saves it):
/v1/chat/completions answers, under a JSON-schema response_format too, what the Runtime decodes."""
import json

import pytest
from eager_bundle import write_eager_bundle
from live_server import MODEL, start

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"], "additionalProperties": False}


def test_chat_completions_with_a_template_only_in_chat_template_jinja(tmp_path):
    pytest.importorskip("llguidance")
    from yggc.runtime.constraint import GrammarSpec
    from yggc.runtime.runtime import Runtime
    from yggc.serve.settings import ServeSettings

    runtime = Runtime.load(write_eager_bundle(tmp_path, template_file=True))
    assert runtime.verifier.chat is not None
    messages = [{"role": "user", "content": "A number as JSON."}]
    live, stop = start(runtime, ServeSettings(MODEL, queue_size=2))
    try:
        client = live.client()
        plain = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=8, temperature=0)
        fmt = {"type": "json_schema", "json_schema": {"name": "n", "schema": SCHEMA}}
        shaped = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=8, temperature=0,
                                                response_format=fmt)
    finally:
        stop()
    assert plain.choices[0].message.content == runtime.generate(messages=messages, max_new_tokens=8).text
    ref = runtime.generate(messages=messages, max_new_tokens=8, grammar=GrammarSpec("json_schema", json.dumps(SCHEMA)))
    assert shaped.choices[0].message.content == ref.text and ref.text.startswith("{")
