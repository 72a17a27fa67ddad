"""The openvino rows for real, on a tiny random Llama pair exported by optimum-cli: greedy float32 output of
OpenVINO GenAI equals yggc's eager AR output token for token (the bench's own equality column).

Skipped unless openvino-genai is importable and optimum-cli is found ($YGGC_OPTIMUM_CLI, PATH, or beside this
Python): CI installs neither (pip install 'yggc[openvino]' and optimum-intel, see the README).
"""
import json

import pytest
from checkpoints import write_checkpoint
from test_benchmark import PROMPTS, bench, table_rows

from yggc.bench.openvino import have_openvino_genai
from yggc.bench.openvino_ir import find_optimum_cli

pytestmark = pytest.mark.skipif(not (have_openvino_genai() and find_optimum_cli()),
                                reason="needs openvino-genai and optimum-cli (optimum-intel)")


def test_openvino_rows_equal_yggc_greedy_in_float32(tmp_path, capsys):
    v = write_checkpoint(tmp_path / "v", "llama_gqa", seed=31)
    d = write_checkpoint(tmp_path / "d", "llama_gqa", seed=32, base=v, noise=0.03)
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps({"prompts": [{"text": t} for t in PROMPTS]}))
    code = bench("--quick", "-m", str(v), "-md", str(d), "--prompts-file", str(prompts), "--prompts", "3", "-n", "16",
                 "--bundle-cache", str(tmp_path / "bundles"), "--rows", "yggc-ar-eager,openvino,openvino-spec",
                 "--json", str(tmp_path / "raw.json"))
    out, err = capsys.readouterr()
    assert code == 0, err
    rows = table_rows(out)
    assert list(rows) == ["openvino", "openvino-spec", "yggc-ar-eager"]
    assert rows["openvino"]["equal to yggc-ar-eager"] == "yes"
    assert rows["openvino-spec"]["equal to yggc-ar-eager"] == "yes"
    assert "fp32 weights, f32 compute, f32 KV cache" in rows["openvino"]["runs as"]
    assert err.count("exporting") == 2 and len(list((tmp_path / "openvino").glob("*-fp32"))) == 2
    raw = {r["name"]: r for r in json.loads((tmp_path / "raw.json").read_text())["rows"]}
    for name in ("openvino", "openvino-spec"):
        samples = raw[name]["samples"]
        assert len(samples) == 3 and all(len(s["tokens"]) == 16 and s["tpot_ms"] > 0 for s in samples)
        assert all(sum(s["per_iter"]) == 15 for s in samples)  # every token after the first, in steps
    assert any(k > 1 for s in raw["openvino-spec"]["samples"] for k in s["per_iter"])  # the near-copy drafter lands
