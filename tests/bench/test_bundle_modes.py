"""`yggc bench --turns` and `--json-schema`: a chat's second turn cold and cached; TPOT under a JSON schema.
`--shapes`, `--ablation` and `--sampling-rules` on a bundle without compiled packages (tests/eager_bundle.py): the
rows each mode decodes, their columns and equality checks, the exact prices of the T > 0 rules."""
import json
import re

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
    pytest.importorskip("llguidance")
    schema = json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
                         "additionalProperties": False})
    free, constrained = schema_tpot(demo_runtime, ["Give a number as JSON."], schema, 24, 1)
    assert (free.mode, constrained.mode, free.answers, constrained.answers) == ("free", "json_schema", 1, 1)
    text = schema_table([free, constrained])
    assert text.splitlines()[3].startswith("| json_schema |") and text.splitlines()[-1].startswith("json_schema / free")


def table_rows(text: str) -> dict[str, list[str]]:
    """First cell -> the other cells of every markdown body row in `text`."""
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines() if line.startswith("| ")]
    return {r[0]: r[1:] for r in rows[1:]}


def test_shapes_rows_are_ar_the_plan_and_each_shape_all_equal(capsys, eager_bundle, tmp_path):
    code = main(["bench", "--bundle", str(eager_bundle), "--shapes", "1x1x1,2x2x4", "--prompts", "2", "-n", "12",
                 "--repeats", "1", "--host-bubble", "--json", str(tmp_path / "rows.json")])
    rows = table_rows(capsys.readouterr().out)
    assert code == 0 and list(rows) == ["compiled AR", "plan D2 W2 V3", "D1 W1 V1", "D2 W2 V4"]
    assert all(r[3] == "yes" for r in rows.values()) and rows["compiled AR"][:1] + rows["compiled AR"][2:3] == [
        "1.00", "1.00x"]
    assert rows["compiled AR"][4:6] == ["-", "-"]
    for r in (r for name, r in rows.items() if name != "compiled AR"):
        draft, verify = (float(x) for x in r[5].split(" / "))  # each at most its iteration's bubble, so medians too
        assert float(r[4]) > 0 and 0 <= draft <= float(r[4]) and 0 <= verify <= float(r[4])
    assert all(float(r[0]) >= 1.0 for r in rows.values())  # mean accepted length counts the bonus token
    saved = json.loads((tmp_path / "rows.json").read_text())
    assert [len(r["tpot_ms"]) for r in saved.values()] == [2] * 4  # 2 prompts x 1 repeat, warm-up excluded


def test_a_row_that_differs_from_the_first_is_caught(demo_runtime):
    from yggc.bench.side_by_side import decode_rows

    class Shifted:  # the AR decoder's tokens, each one higher
        def __init__(self, dec):
            self.dec, self.stats = dec, None

        def stream(self, *args):
            for chunk in self.dec.stream(*args):
                self.stats = self.dec.stats
                yield [t + 1 for t in chunk]

    ar = demo_runtime.decoder(speculative=False)
    rows = decode_rows({"ar": ar, "tree": demo_runtime.decoder(), "shifted": Shifted(ar)}, [[1, 2, 3]], 6, 1)
    assert [r.equal for r in rows.values()] == [True, True, False]


def test_ablation_adds_pruning_to_the_best_unpruned_tree(capsys, eager_bundle):
    code = main(["bench", "--bundle", str(eager_bundle), "--ablation", "--prompts", "1", "-n", "12", "--repeats", "1"])
    rows = table_rows(capsys.readouterr().out)
    assert code == 0 and list(rows) == ["ar", "static (no pruning)", "+ verify pruning"]  # no depth predictor kept
    assert [r[0] for r in rows.values()] == ["-", "D2 W2 V4", "D2 W2 V3"] and all(r[-1] == "yes" for r in rows.values())
    measured, estimated = rows["+ verify pruning"][3].split(" / ")
    assert float(measured) > 0 and float(estimated) > 0 and rows["ar"][3] == "-"


def test_ablation_needs_a_calibrated_bundle():
    from yggc.bench.ablation import unpruned_shape
    from yggc.errors import YggcError
    from yggc.plan.bundle_plan import BundlePlan
    from yggc.plan.shape import TreeShape

    with pytest.raises(YggcError, match="compiled with --calib"):
        unpruned_shape(BundlePlan(TreeShape(2, 2, 3)))  # a plan from fixed compile flags


def test_sampling_rules_price_every_draft_under_the_rules_that_fit(capsys, eager_bundle, tmp_path):
    code = main(["bench", "--bundle", str(eager_bundle), "--sampling-rules", "chain:3x1x3,rrs:2x2x3,point-mass:1x2x2",
                 "--temps", "1.0", "--prompts", "2", "-n", "12", "--repeats", "2", "--exact", "--json",
                 str(tmp_path / "rules.json")])
    assert code == 0
    rows = table_rows(capsys.readouterr().out)
    assert list(rows) == ["ar", "greedy plan D2 W2 V3", "T=1.0 ar", "T=1.0 chain D3 W1 V3", "T=1.0 rrs D2 W2 V3",
                          "T=1.0 point-mass D1 W2 V2"]
    assert rows["ar"][0] == rows["T=1.0 ar"][0] == "1.00" and rows["T=1.0 point-mass D1 W2 V2"][2] == "-"
    results = json.loads((tmp_path / "rules.json").read_text())
    chain, tree = results["T=1.0 chain D3 W1 V3"], results["T=1.0 rrs D2 W2 V3"]
    assert set(chain) >= {"exact block", "exact token"} and set(tree) >= {"exact rrs", "exact traversal"}
    # 1 + an expected accepted length: at most the chain's 3 drafts, the tree's depth 2, plus the bonus token
    assert all(1.0 <= chain[k] <= 4.0 for k in ("exact block", "exact token"))
    assert all(1.0 <= tree[k] <= 3.0 for k in ("exact rrs", "exact traversal"))


@pytest.mark.parametrize("argv, message", [
    (["--sampling-rules", "beam:2x2x3"], "unknown rule 'beam'"),
    (["--sampling-rules", "rrs:2x2"], "DxWxV like 4x2x8"),
    (["--shapes", "1x1x1", "--ablation"], "--shapes and --ablation are separate measurements"),
])
def test_a_bad_mode_line_is_one_error_before_the_bundle_loads(capsys, tmp_path, argv, message):
    assert main(["bench", "--bundle", str(tmp_path / "none"), *argv]) == 2
    assert message in capsys.readouterr().err


def test_temperatures_must_be_positive(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "--sampling-rules", "rrs:1x2x2", "--temps", "0"])
    assert re.search(r"--temps: expected temperatures > 0", capsys.readouterr().err)


def test_the_suffix_rows_equal_compiled_ar(capsys, eager_bundle):
    code = main(["bench", "--bundle", str(eager_bundle), "--rows", "yggc-ar-compiled,yggc-suffix,yggc-full-suffix",
                 "--prompts", "2", "-n", "24", "--repeats", "1"])
    out = capsys.readouterr().out
    assert code == 0
    head = next(line for line in out.splitlines() if line.startswith("| "))
    column = [c.strip() for c in head.strip("|").split("|")].index("equal to yggc-ar-compiled") - 1
    rows = table_rows(out)
    assert list(rows) == ["yggc-ar-compiled", "yggc-suffix", "yggc-full-suffix"]
    assert rows["yggc-suffix"][column] == rows["yggc-full-suffix"][column] == "yes"
    assert "suffix drafts D6 W2 V8" in out and "+ suffix branches" in out
