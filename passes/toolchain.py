"""The toolchain, chosen in pipeline.py's copy pass: the C++ compiler Inductor builds packages with is the first
one whose packages load here.

On an H100 image (torch 2.11.0+cu130) the environment set CXX=/opt/gcc/bin/g++, a wrapper around
GCC 13.3. Every package it linked, even a lone Linear, died with SIGSEGV at address 0 in the loader's
constructor, inside the model's std::regex (the device-string parser). The same package built with
/usr/bin/g++ loaded and ran. (What the wrapper does differently was not examined; on a CPU, a wrapper that
adds -static-libstdc++ builds packages whose load fails in the same constructor, with an exception.) So
before lowering CUDA buckets, the compile builds one tiny package per candidate compiler and test-loads it in a
child process (load_probe.py); the first that loads builds the bundle.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from ..errors import YggcError
from .load_probe import probe_load

# where a distribution's own compiler lives, in case PATH or CXX put a wrapper first
SYSTEM_COMPILERS = ("/usr/bin/g++", "/usr/bin/c++", "/usr/bin/clang++")


def configured_compiler() -> str:
    """The compiler Inductor uses now: config.cpp.cxx (CXX, else g++)."""
    cxx = torch._inductor.config.cpp.cxx
    return cxx[-1] if isinstance(cxx, (list, tuple)) else cxx


def candidate_compilers(configured: str | None = None) -> list[str]:
    """The configured compiler first, then g++ / c++ / clang++ on PATH and the system's; one per file."""
    found, seen = [], set()
    for name in (configured or configured_compiler(), "g++", "c++", *SYSTEM_COMPILERS, "clang++"):
        path = shutil.which(name)
        if path and (real := os.path.realpath(path)) not in seen:
            seen.add(real)
            found.append(path)
    return found


@contextlib.contextmanager
def building_with(cxx: str) -> Iterator[None]:
    """Inductor builds with `cxx` inside the block."""
    with torch._inductor.config.patch({"cpp.cxx": (None, cxx)}):
        yield


class _Probe(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [2, 8]
        return self.proj(x).relu()


def lower_probe(cxx: str, device: str, out_path: Path) -> Path:
    """A one-Linear package built by `cxx` for `device`."""
    module = _Probe().to(device)
    program = torch.export.export(module, (torch.zeros(2, 8, device=device),))
    with building_with(cxx):
        torch._inductor.aoti_compile_and_package(program, package_path=str(out_path))
    return out_path


def loadable_compiler(device: str, candidates: list[str] | None = None, log: Callable[[str], None] = print) -> str:
    """The first candidate compiler whose package loads on `device` in a child process; one clear error if none."""
    candidates = candidates or candidate_compilers()
    failures = []
    with tempfile.TemporaryDirectory(prefix="yggc-toolchain-") as tmp:
        for i, cxx in enumerate(candidates):
            try:
                probe_load(lower_probe(cxx, device, Path(tmp) / f"probe{i}.pt2"), device)
            except Exception as e:  # a build error or a package that does not load: try the next compiler
                reason = str(e).splitlines()[0] if str(e) else type(e).__name__
                failures.append(f"{cxx}: {reason[:200]}")
                continue
            if failures:
                log(f"yggc compile: packages built by {candidates[0]} do not load here; building with {cxx}")
            return cxx
    raise YggcError(f"no C++ compiler here builds packages torch {torch.__version__} can load on {device} "
                    f"({'; '.join(failures)}); set CXX to the system's own C++ compiler (e.g. /usr/bin/g++), "
                    "or compile for the CPU")
