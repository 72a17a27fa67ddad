"""tools/bench_verify_packages.py: packages lowered apart time side by side, one row per package and a column per
width; packages whose logits differ are refused before any timing, or with --other-ops timed with their argmax
agreement reported."""
from __future__ import annotations

import bench_verify_packages as tool
import pytest
from checkpoints import write_checkpoint
from yggc.passes import package_cache

NAME = "llama_tied_llama3"
SMALL = ["--max-seq", "128"]


@pytest.mark.slow
def test_packages_of_one_model_time_side_by_side_and_other_weights_are_refused(checkpoint, tmp_path, capsys):
    model = checkpoint(NAME)
    other = tmp_path / "other"
    write_checkpoint(other, NAME, seed=1234)  # the same shapes, other weights
    packages = [tmp_path / "a" / "v.pt2", tmp_path / "b" / "v.pt2", tmp_path / "c" / "v.pt2"]
    with package_cache.using(package_cache.cache_root()):  # the run's: b is a's lowering again, from the cache
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


def test_packages_with_the_first_ones_weights_read_its_constants_file(tmp_path):
    """Copies of the same weights sit on other physical pages: every package of equal constants reads the first's."""
    packages = []
    for name, weights in (("a", b"same"), ("b", b"same"), ("c", b"else")):
        (tmp_path / name).mkdir()
        packages.append(tmp_path / name / "v.pt2")
        packages[-1].write_bytes(name.encode())
        (tmp_path / name / "v.constants.safetensors").write_bytes(weights)
        (tmp_path / name / "yggc_kernels.so").write_bytes(name.encode())
    into = tmp_path / "links"
    into.mkdir()
    a, b, c = tool.one_constants(packages, into)
    assert a == packages[0] and c == packages[2]  # the first, and other weights, load as they are
    assert b.parent.parent == into and b.read_bytes() == b"b"  # a copy of b's package
    assert b.with_name("v.constants.safetensors").resolve() == packages[0].with_name("v.constants.safetensors")
    assert b.with_name("yggc_kernels.so").read_bytes() == b"b"  # with its own kernel library
