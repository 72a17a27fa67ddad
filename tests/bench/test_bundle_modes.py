"""`yggc bench --turns` and `--json-schema`: a chat's second turn cold and cached; TPOT under a JSON schema."""
import pytest

from yggc.bench.structured import schema_table, schema_tpot
from yggc.bench.turns import FOLLOW_UPS, TurnTimes, conversation, second_turn, turns_table
from yggc.cli.main import main


def test_the_next_turn_reuses_the_ones_before_and_starts_with_the_same_token(demo_runtime):
    rt = demo_runtime
    question = "Write a function that adds two numbers."
    times = second_turn(rt, question, 16, 2)  # one answer and a follow-up
    first = rt.encode(messages=[{"role": "user", "content": question}])
    follow_up = rt.encode(messages=[{"role": "user", "content": FOLLOW_UPS[0]}])
    assert times.prompt_tokens > len(first) + len(follow_up) // 2
    assert len(first) <= times.cached_tokens < times.prompt_tokens
    assert times.cold_ms > 0 and times.warm_ms > 0
    chat = conversation(rt, question, 16, 150)  # turns until the prompt holds 150 tokens
    assert len(rt.encode(messages=chat)) >= 150 and len(chat) >= 5 and chat[-1]["role"] == "user"
    assert [m["content"] for m in chat[2::2]] == list(FOLLOW_UPS[:len(chat[2::2])])


def test_the_table_lists_each_prompt_and_the_median_ratio():
    text = turns_table([TurnTimes(100, 80, 10.0, 2.0), TurnTimes(50, 40, 8.0, 4.0), TurnTimes(70, 60, 9.0, 0.9)])
    assert text.splitlines()[2] == "| 100 | 80 | 10.0 | 2.0 | 0.200 |"
    assert text.splitlines()[-1] == "median cached / cold: 0.200"


def test_turns_needs_a_bundle(capsys):
    assert main(["bench", "--turns"]) == 2
    assert capsys.readouterr().err.strip() == "yggc: error: --turns measures a bundle; pass --bundle BUNDLE"


def test_json_schema_tpot_decodes_both_modes_and_follows_the_schema(demo_runtime):
    import json

    pytest.importorskip("llguidance")
    schema = json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
                         "additionalProperties": False})
    free, constrained = schema_tpot(demo_runtime, ["Give a number as JSON."], schema, 24, 1)
    assert (free.mode, constrained.mode, free.answers, constrained.answers) == ("free", "json_schema", 1, 1)
    text = schema_table([free, constrained])
    assert text.splitlines()[3].startswith("| json_schema |") and text.splitlines()[-1].startswith("json_schema / free")
