"""passes/toolchain.py: the compile builds with the first C++ compiler whose packages load; none is one clear line."""
import os
import re
import shutil

import pytest
from yggc.passes import toolchain
from yggc.passes.toolchain import candidate_compilers, loadable_compiler

from yggc.errors import YggcError

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ on PATH")


def script(path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def broken_compiler(tmp_path) -> str:
    """Answers --version like a compiler, fails every build (as a compiler whose packages cannot be built)."""
    return script(tmp_path / "broken-g++", 'case "$1" in --version) echo "broken 1.0"; exit 0;; esac\n'
                                          'echo "broken-g++: cannot build" >&2; exit 1\n')


@needs_gxx
def test_candidates_put_the_configured_compiler_first_and_list_each_file_once(tmp_path):
    wrapper = script(tmp_path / "g++", 'exec /usr/bin/g++ "$@"\n')  # a file of its own, like /opt/gcc/bin/g++
    alias = tmp_path / "alias-g++"
    alias.symlink_to(os.path.realpath(shutil.which("g++")))
    found = candidate_compilers(wrapper)
    assert found[0] == wrapper and shutil.which("g++") in found
    assert len({os.path.realpath(c) for c in found}) == len(found)
    assert str(alias) not in candidate_compilers(shutil.which("g++"))  # the same file as g++: not tried twice
    assert candidate_compilers(str(alias))[0] == str(alias)


def test_a_compiler_whose_package_does_not_load_is_passed_over_and_said_so(tmp_path, monkeypatch):
    """The order of tries and the message; a real build and load of the probe package: test_load_probe.py."""
    built, logged = [], []

    def lower(cxx, device, out):
        built.append(cxx)
        return out.with_name(f"{cxx}.pt2")

    def probe(package, device):
        if package.name == "g++.pt2":  # like the H100's CXX wrapper: its packages crashed the loader (SIGSEGV)
            raise YggcError("loading compiled bucket g++.pt2 on cuda killed a test process (SIGSEGV)")

    monkeypatch.setattr(toolchain, "lower_probe", lower)
    monkeypatch.setattr(toolchain, "probe_load", probe)
    assert loadable_compiler("cuda", ["g++", "clang++", "c++"], log=logged.append) == "clang++"
    assert built == ["g++", "clang++"]
    assert logged == ["yggc compile: packages built by g++ do not load here; building with clang++"]


def test_no_loadable_compiler_is_one_line_naming_each_and_what_to_do(tmp_path):
    broken = broken_compiler(tmp_path)
    with pytest.raises(YggcError, match=r"^no C\+\+ compiler here builds packages torch \S+ can load on cpu "
                                        rf"\({re.escape(broken)}: .+\); set CXX to the system's own "
                                        r"C\+\+ compiler \(e\.g\. /usr/bin/g\+\+\), or compile for the CPU$"):
        loadable_compiler("cpu", [broken], log=pytest.fail)
