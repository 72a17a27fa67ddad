"""`yggc bench --turns` and `--json-schema`: a chat's second turn cold and cached; TPOT under a JSON schema."""
import pytest

from yggc.bench.structured import schema_table, schema_tpot
from yggc.bench.turns import FOLLOW_UP, TurnTimes, second_turn, turns_table
from yggc.cli.main import main


def test_the_second_turn_reuses_the_first_and_starts_with_the_same_token(demo_runtime):
    rt = demo_runtime
    times = second_turn(rt, "Write a function that adds two numbers.", 16, 2)
    first = rt.encode(messages=[{"role": "user", "content": "Write a function that adds two numbers."}])
    turn_tail = rt.encode(messages=[{"role": "user", "content": FOLLOW_UP}])
    assert times.prompt_tokens > len(first) + len(turn_tail) // 2
    assert len(first) <= times.cached_tokens < times.prompt_tokens
    assert times.cold_ms > 0 and times.warm_ms > 0


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
