"""tools/bench_verify_packages.py: packages lowered apart time side by side, one row per package and a column per
width; packages whose logits differ are refused before any timing, or with --other-ops timed with their argmax
agreement reported."""
from __future__ import annotations

import bench_verify_packages as tool
import pytest
from checkpoints import write_checkpoint

NAME = "llama_tied_llama3"
SMALL = ["--max-seq", "128"]


@pytest.mark.slow
def test_packages_of_one_model_time_side_by_side_and_other_weights_are_refused(checkpoint, tmp_path, capsys):
    model = checkpoint(NAME)
    other = tmp_path / "other"
    write_checkpoint(other, NAME, seed=1234)  # the same shapes, other weights
    packages = [tmp_path / "a" / "v.pt2", tmp_path / "b" / "v.pt2", tmp_path / "c" / "v.pt2"]
    for path, source in zip(packages, (model, model, other)):
        path.parent.mkdir()
        tool.main(["lower", "-m", str(source), "-o", str(path), *SMALL])
    capsys.readouterr()

    tool.main(["time", "-m", str(model), str(packages[0]), str(packages[1]), "--widths", "1,3", "--context", "16",
               "--repeats", "6", *SMALL])
    lines = capsys.readouterr().out.splitlines()
    assert "logits equal at every width" in lines[0]
    assert lines[1] == "| package | W=1 | W=3 |"
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ")[1:] for line in lines[3:]}
    assert set(rows) == {str(packages[0]), str(packages[1])}
    assert all(float(ms.rstrip(" |")) > 0 for cells in rows.values() for ms in cells)

    with pytest.raises(SystemExit, match="the packages' logits differ at 1 rows"):
        tool.main(["time", "-m", str(model), str(packages[0]), str(packages[2]), "--widths", "1", "--context", "16",
                   *SMALL])

    capsys.readouterr()
    tool.main(["time", "-m", str(model), str(packages[0]), str(packages[2]), "--widths", "1", "--context", "16",
               "--repeats", "3", "--other-ops", *SMALL])  # where an op's version changed the bits
    first = capsys.readouterr().out.splitlines()[0]
    agreement = float(first.split("argmax agreement with the first >= ")[1].split(";")[0])
    assert 0 <= agreement < 1  # other weights: some row's argmax differs
