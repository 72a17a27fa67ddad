"""tools/bench_sampled.py: one row per bundle and the verifier alone, the same seeds for every row, bad flags one
line."""
import json

from bench_sampled import main


def test_each_bundle_gets_a_row_drawing_the_same_seeds(eager_bundle, tmp_path, capsys):
    prompts = tmp_path / "p.json"
    prompts.write_text(json.dumps({"prompts": [{"text": "a b c a b c a b c a"}, {"text": "x y z x y z x y"}]}))
    argv = [str(eager_bundle), str(eager_bundle), "--prompts-file", str(prompts), "--prompts", "1", "-n", "12",
            "--rounds", "2", "--temp", "0.8"]
    assert main(argv) == 0
    rows = [line.split(" | ") for line in capsys.readouterr().out.splitlines()[2:]]
    name = f"{eager_bundle.name} (its greedy plan's tree)"
    assert [r[0] for r in rows] == [f"| 1. {name}", f"| 2. {name}", "| verifier alone"]
    assert rows[0][2] == rows[1][2] and float(rows[0][2]) >= 1.0  # one bundle twice: the same draws, the same tokens
    assert rows[2][2:] == ["1.00", "1.00x |"]


def test_greedy_is_refused_in_one_line(eager_bundle, capsys):
    assert main([str(eager_bundle), "--temp", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "bench_sampled: error: --temp must be > 0 (sampled requests), got 0"
