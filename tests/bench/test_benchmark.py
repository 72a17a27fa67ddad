"""`yggc bench --quick` end to end on a tiny random pair: the rows it runs and the equality column.

Nothing here is timed; the compiled rows are left out (no bundle in the empty cache: --quick skips them).
"""
import argparse
import json

import pytest
from checkpoints import write_checkpoint

from yggc.bench import harness as benchmark
from yggc.cli import bench as bench_verb

EAGER_ROWS = ["hf-ar", "hf-assisted", "yggc-ar-eager", "yggc-chain", "yggc-tree-static"]
PROMPTS = ["def add(a, b):\n    return", "class Point:\n    def __init__(self, x, y):", "for i in range(10):\n",
           "import os\nprint(os.path"]


def bench(*argv: str) -> int:
    """`yggc bench ARGV` through the same hook the CLI uses."""
    parser = argparse.ArgumentParser(prog="yggc")
    bench_verb.add_parser(parser.add_subparsers(dest="command"))
    return bench_verb.main(parser.parse_args(["bench", *argv]))


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench")
    v = write_checkpoint(root / "v", "llama_gqa", seed=21)
    d = write_checkpoint(root / "d", "llama_gqa", seed=22, base=v, noise=0.03)
    prompts = root / "prompts.json"
    prompts.write_text(json.dumps({"prompts": [{"text": t} for t in PROMPTS]}))
    common = ["--quick", "-m", str(v), "-md", str(d), "--prompts-file", str(prompts), "--bundle-cache",
              str(root / "bundles"), "--chain-depths", "2,3", "--tree-grid", "3x2x6,4x2x8"]
    return root, common


def table_rows(out: str) -> dict[str, list[str]]:
    lines = [line for line in out.splitlines() if line.startswith("| ")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    return {cells[0]: dict(zip(head, cells)) for cells in
            ([c.strip() for c in line.strip("|").split("|")] for line in lines[1:])}


def test_quick_bench_rows_and_equality(setup, capsys):
    root, common = setup
    code = bench(*common, "--json", str(root / "raw.json"))
    out, err = capsys.readouterr()
    assert code == 0, err
    rows = table_rows(out)
    assert list(rows) == EAGER_ROWS
    assert rows["hf-ar"]["equal to hf-ar"] == "(reference)"
    assert all(rows[r]["equal to hf-ar"] == "yes" for r in EAGER_ROWS[1:])
    assert "skipping yggc-ar-compiled" in err and "skipping yggc-full" in err
    assert "machine:" in out and "torch" in out and "floor:" in out
    raw = json.loads((root / "raw.json").read_text())
    assert [r["name"] for r in raw["rows"]] == EAGER_ROWS
    for r in raw["rows"]:
        assert len(r["samples"]) == 2 and all(len(s["tokens"]) == 32 for s in r["samples"])
    timed = [r for r in raw["rows"] if r["verify_ms"] is not None]
    assert [r["name"] for r in timed] == EAGER_ROWS[2:]  # the yggc rows
    for r in timed:  # each yggc row's verify step against the floor measured around its own timing decode
        assert r["floor_ms"] > 0
        assert rows[r["name"]]["verify ms (x floor)"] == f"{r['verify_ms']:.3f} ({r['verify_ms'] / r['floor_ms']:.2f}x)"
    spec = {r["name"]: r for r in raw["rows"]}["yggc-tree-static"]
    assert any(k > 1 for s in spec["samples"] for k in s["per_iter"])  # the near-copy drafter gets accepted
    eff = raw["target_efficiency"]  # each speculative row against the AR row of its engine
    assert set(eff) == {"yggc-chain", "yggc-tree-static"} and "target efficiency" in out
    for e in eff.values():
        assert e["ar_row"] == "yggc-ar-eager"
        assert e["target_efficiency"] == pytest.approx(e["ar_step_ms"] / e["verify_ms"], abs=1e-4)
        assert e["speedup_if_drafting_were_free"] == pytest.approx(e["mean_accepted"] * e["target_efficiency"], abs=1e-3)


def test_quick_bench_fails_on_a_mismatch(setup, capsys, monkeypatch):
    _, common = setup
    real = benchmark.yggc_runner

    def corrupt_chain(decoder):
        run = real(decoder)
        if type(getattr(decoder, "proposer", None)).__name__ != "StandaloneProposer" or decoder.shape.width != 1:
            return run

        def wrong(prompt, n, params):
            res = run(prompt, n, params)
            res.tokens[5] += 1
            return res

        return wrong

    monkeypatch.setattr(benchmark, "yggc_runner", corrupt_chain)
    code = bench(*common, "--rows", "yggc-ar-eager,yggc-chain")
    out, err = capsys.readouterr()
    assert code == 1
    assert table_rows(out)["yggc-chain"]["equal to yggc-ar-eager"] == "NO: prompt 0 position 5; prompt 1 position 5"
    assert "FAIL: yggc-chain differs" in err


def test_temperature_mode_has_no_equality_column(setup, capsys):
    _, common = setup
    assert bench(*common, "--rows", "yggc-ar-eager,yggc-chain", "--temp", "1") == 0
    rows = table_rows(capsys.readouterr()[0])
    assert list(rows) == ["yggc-ar-eager", "yggc-chain"] and not any("equal" in k for k in rows["yggc-chain"])


def test_quick_bench_without_transformers_checks_against_yggc_ar(setup, capsys, monkeypatch):
    _, common = setup
    monkeypatch.setattr(benchmark, "have_transformers", lambda: False)
    assert bench(*common, "--rows", "hf-ar,yggc-ar-eager,yggc-tree-static") == 0
    out, err = capsys.readouterr()
    rows = table_rows(out)
    assert "skipping hf-ar: transformers is not installed" in err
    assert list(rows) == ["yggc-ar-eager", "yggc-tree-static"]
    assert rows["yggc-tree-static"]["equal to yggc-ar-eager"] == "yes"


def test_reference_is_the_verifier_alone_of_the_benchmarked_dtype():
    from yggc.bench.rows import Row, reference_row

    rows = [Row(name, None, "") for name in ("hf-ar", "hf-assisted", "yggc-ar-eager", "yggc-ar-compiled", "yggc-full")]
    assert reference_row(rows).name == "hf-ar"  # float32: transformers' greedy output
    assert reference_row(rows, "bfloat16").name == "yggc-ar-compiled"  # bf16: yggc's own verifier decoding
    assert reference_row(rows[2:3], "float32").name == "yggc-ar-eager"
    assert reference_row(rows[:1], "bfloat16").name == "hf-ar"
    assert reference_row(rows[1:2]) is None
