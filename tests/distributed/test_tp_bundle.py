"""A tensor-parallel bundle: `yggc compile --tp 2` lowers each rank's verifier slice with its collectives inside
the compiled graphs, and `yggc run --tp 2 BUNDLE` decodes exactly what the verifier alone decodes."""
import json
import os
import shutil
import subprocess
import sys

import pytest
from checkpoints import write_checkpoint

pytestmark = pytest.mark.slow  # compiles bundles: scheduled first (tests/conftest.py)

PROMPTS = ["3,1,4,1,5,9,2,6", "7,7,30,2"]


def yggc(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "yggc.cli", *argv], capture_output=True, text=True, timeout=900,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.fixture(scope="module")
def tp_bundle(tmp_path_factory):
    root = tmp_path_factory.mktemp("tp_bundle")
    v = write_checkpoint(root / "v", "llama_gqa", seed=11)
    d = write_checkpoint(root / "d", "llama_gqa", seed=12, base=v, noise=0.02)
    done = yggc("compile", "-m", str(v), "-md", str(d), "--tp", "2", "--depth", "1", "--width", "2",
                "--max-seq", "128", "-o", str(root / "b"))
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr  # every rank silences the same third-party noise
    return v, root / "b"


def test_tp_bundle_decodes_like_the_verifier_alone(tp_bundle):
    v, bundle = tp_bundle
    accepted = 0
    for ids in PROMPTS:
        split = yggc("run", "--tp", "2", str(bundle), "--prompt-ids", ids, "-n", "40", "--json")
        alone = yggc("run", "-m", str(v), "--prompt-ids", ids, "-n", "40", "--json", "--threads", "1")
        assert split.returncode == 0 and alone.returncode == 0, split.stderr
        assert len(split.stdout.strip().splitlines()) == 1  # rank 1 is silent
        stats = json.loads(split.stdout)
        assert stats["tokens"] == json.loads(alone.stdout)["tokens"]
        accepted += stats["n_accept"]
    assert accepted > 0  # the tree path ran: drafted tokens were accepted and their K/V compacted


def test_tp_manifest_names_each_ranks_verifier_packages(tp_bundle):
    _, bundle = tp_bundle
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["extra"]["tp"] == 2
    by_name: dict[str, list] = {}
    for b in manifest["buckets"]:
        by_name.setdefault(b["name"], []).append(b.get("rank"))
        assert (bundle / b["file"]).is_file()
    for name, ranks in by_name.items():  # the verifier's slices per rank; the replicated drafter once
        assert sorted(ranks, key=str) == ([0, 1] if name.startswith(("verifier", "verify")) else [None]), name


def test_world_mismatch_is_one_line(tp_bundle, tmp_path, capsys):
    from yggc.cli.main import main

    _, bundle = tp_bundle
    capsys.readouterr()
    assert main(["run", str(bundle), "--prompt-ids", "3,1"]) == 2  # refused before anything loads
    assert capsys.readouterr().err.strip() == (
        f"yggc: error: {bundle} was compiled for 2 tensor-parallel ranks, but 1 process(es) run it; run "
        f"`yggc run --tp 2 {bundle}` (or torchrun --nproc-per-node 2 -m yggc run {bundle})")
    single = tmp_path / "single"
    shutil.copytree(bundle, single)
    manifest = json.loads((single / "manifest.json").read_text())
    manifest["extra"]["tp"] = 1
    (single / "manifest.json").write_text(json.dumps(manifest))
    split = yggc("run", "--tp", "2", str(single), "--prompt-ids", "3,1")
    assert split.returncode == 2
    assert split.stderr.strip() == (f"yggc: error: {single} was compiled for one process, but 2 ranks run it; "
                                    "drop --tp (and torchrun), or re-run `yggc compile --tp 2`")


@pytest.mark.parametrize("flags, message", [
    (["--calib", "CALIB"], "a tensor-parallel compile takes a fixed tree (calibration under --tp is not built); "
                           "pass --depth and --width instead of --calib"),
    (["--opt", "O2"], "tensor-parallel bundles are built at --opt O1 with the inductor backend; drop --opt O2 / "
                      "--backend tensorrt"),
])
def test_tp_compile_refuses_what_it_cannot_build(tmp_path, capsys, flags, message):
    """Refused before any rank starts (so in this process: main() is what the console script runs)."""
    from yggc.cli.main import main

    v = write_checkpoint(tmp_path / "v", "llama_deep", seed=11)
    calib = tmp_path / "calib.txt"
    calib.write_text("some calibration text " * 20)
    flags = [str(calib) if f == "CALIB" else f for f in flags]
    capsys.readouterr()
    assert main(["compile", "-m", str(v), "-md", str(v), "--tp", "2", *flags, "-o", str(tmp_path / "b")]) == 2
    assert capsys.readouterr().err.strip() == f"yggc: error: {message}"
    assert not (tmp_path / "b").exists()
