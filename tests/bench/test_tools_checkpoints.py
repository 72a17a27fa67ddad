"""tools/random_checkpoint.py and tools/bench_drafters.py on tiny models: a cut-down drafter computes its target's
logits when the layers add nothing; two drafters side by side decode the verifier's own greedy tokens."""
import json
import sys

import bench_drafters
import pytest
import random_checkpoint
import torch
from checkpoints import write_checkpoint


def run_tool(monkeypatch, module, *argv: str) -> None:
    monkeypatch.setattr(sys, "argv", [f"{module.__name__}.py", *argv])
    module.main()


@pytest.mark.parametrize("kind", ["mixtral", "llama"])
def test_the_cut_down_drafter_equals_its_target_when_the_layers_add_nothing(monkeypatch, tmp_path, kind):
    from transformers import AutoModelForCausalLM

    target, drafter = tmp_path / "t", tmp_path / "d"
    run_tool(monkeypatch, random_checkpoint, "--kind", kind, "--hidden", "64", "--layers", "2", "--intermediate",
             "32", "--experts", "3", "--vocab", "300", "--residual-scale", "0", "--out", str(target))
    run_tool(monkeypatch, random_checkpoint, "--drafter-of", str(target), "--out", str(drafter))
    cfg = json.loads((drafter / "config.json").read_text())
    assert (cfg["model_type"], cfg["num_hidden_layers"], cfg["vocab_size"]) == ("llama", 1, 300)
    ids = torch.randint(0, 300, (1, 12), generator=torch.Generator().manual_seed(0))
    t, d = (AutoModelForCausalLM.from_pretrained(p).eval() for p in (target, drafter))
    with torch.no_grad():
        torch.testing.assert_close(d(ids).logits, t(ids).logits)  # both: lm_head(norm(embed(ids)))


def test_two_drafters_side_by_side_equal_the_verifier(monkeypatch, capsys, tmp_path):
    v = write_checkpoint(tmp_path / "v", "llama_gqa", seed=31)
    d1 = write_checkpoint(tmp_path / "d1", "llama_gqa", seed=32, base=v, noise=0.02)
    d2 = write_checkpoint(tmp_path / "d2", "llama_gqa", seed=33, base=v, noise=0.2)
    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps({"prompts": [{"text": "def add(a, b):"}, {"text": "for i in range(10):"}]}))
    capsys.readouterr()
    run_tool(monkeypatch, bench_drafters, "-m", str(v), "-md", str(d1), "-md2", str(d2), "--shapes", "2x1x2,2x2x3",
             "--prompts-file", str(prompts), "-n", "10", "--dtype", "float32", "--threads", "1")
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in capsys.readouterr().out.splitlines()
            if line.startswith("| ") and not line.startswith("| decoding")]
    assert [r[0] for r in rows] == ["ar", "drafter 2x1x2", "drafter 2x2x3", "drafter2 2x1x2", "drafter2 2x2x3"]
    assert all(r[-1] == "yes" for r in rows) and rows[0][1] == "1.00"
    assert all(float(r[1]) >= 1.0 for r in rows)  # tokens per verify call count the bonus token
