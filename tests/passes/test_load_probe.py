"""passes/load_probe.py: a package test-loaded in a child process; a crash or failure there is one clear line."""
import pytest
from yggc.passes.load_probe import CHILD, probe_load
from yggc.passes.toolchain import configured_compiler, lower_probe

from yggc.errors import YggcError


def test_the_toolchain_probe_package_loads_and_passes_the_probe(tmp_path):
    path = lower_probe(configured_compiler(), "cpu", tmp_path / "ok.pt2")  # what toolchain.py builds per compiler
    probe_load(path, "cpu")  # the child imports this process's yggc and loads the package through it


def test_a_loader_crash_in_the_child_is_one_line_naming_the_signal(tmp_path):
    crash = "import ctypes; ctypes.string_at(0)"  # what torch 2.11's loader did with CUDA packages
    with pytest.raises(YggcError, match=r"^loading compiled bucket w1\.pt2 on cuda killed a test process \(SIGSEGV\): "
                       r"torch .*'s AOTInductor loader cannot load .*; nothing was written"):
        probe_load(tmp_path / "w1.pt2", "cuda", child=crash)


def test_a_package_that_fails_to_load_names_the_loaders_message(tmp_path):
    (tmp_path / "bad.pt2").write_bytes(b"not a zip archive")
    with pytest.raises(YggcError, match=r"^compiled bucket bad\.pt2 cannot be loaded on cpu in a test process "
                       r"\(yggc\.errors\.YggcError: compiled bucket bad\.pt2 cannot be loaded .*\); nothing was written"):
        probe_load(tmp_path / "bad.pt2", "cpu", child=CHILD)
