"""tools/bench_suffix_branches.py: every configuration's row, outputs checked against the verifier alone, bad flags
one line."""
import json

from bench_suffix_branches import main


def test_each_shape_gets_a_row_and_equals_the_verifier(eager_bundle, tmp_path, capsys):
    prompts = tmp_path / "p.json"
    prompts.write_text(json.dumps({"prompts": [{"text": "a b c a b c a b c a"}, {"text": "x y z x y z x y"}]}))
    argv = [str(eager_bundle), "--prompts-file", str(prompts), "--prompts", "1", "-n", "12", "--rounds", "1",
            "--shapes", "6x2x8,16x2x20", "--min-chance", "0.2,0.1"]
    assert main(argv) == 0
    rows = [line.split(" | ") for line in capsys.readouterr().out.splitlines()[2:]]
    assert [(r[0], r[1]) for r in rows] == [("| 6x2x8", "0.2"), ("| 6x2x8", "0.1"), ("| 16x2x20", "0.2"),
                                            ("| 16x2x20", "0.1")]
    assert rows[0][-1] == "1.00x |" and all(float(r[3]) >= 1.0 for r in rows)  # tokens per verify call


def test_a_bad_shape_is_one_line(eager_bundle, capsys):
    assert main([str(eager_bundle), "--shapes", "6x2"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "tree shapes are written DxWxV" in err
