"""Build the batch-invariant attention kernel (yggc/runtime/kernels/attend_rows.cpp) for this CPU.

The library is compiled once per source, torch build and CPU capability with the C++ compiler Inductor
already needs, cached under ~/.cache/yggc/kernels, and copied beside every CPU package lowered with it
(runtime.attention_op.load_beside loads it from there). -march=native, as Inductor's own kernels: the
bundle's ISA fingerprint already ties it to CPUs like this one.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

import torch
from torch.utils import cpp_extension

from ..errors import YggcError
from ..runtime import attention_op

CACHE = Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")).expanduser() / "yggc" / "kernels"
CAPABILITY_MACROS = {"AVX512": "-DCPU_CAPABILITY_AVX512", "AVX2": "-DCPU_CAPABILITY_AVX2"}  # ATen's vec headers


def compile_command(source: Path, out: Path) -> list[str]:
    macro = CAPABILITY_MACROS.get(torch.backends.cpu.get_cpu_capability())
    includes = [f"-I{p}" for p in cpp_extension.include_paths()]
    libs = [f"-L{p}" for p in cpp_extension.library_paths()]
    # -ffp-contract=off: the compiler may not fuse a multiply and an add the source keeps apart
    return ["g++", "-O3", "-march=native", "-ffp-contract=off", "-fPIC", "-shared", "-std=c++20", "-fopenmp",
            f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}", *([macro] if macro else []),
            *includes, str(source), "-o", str(out), *libs, "-lc10", "-ltorch", "-ltorch_cpu"]


def _fake_attend_rows(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(q, memory_format=torch.contiguous_format)  # [H, W, hd]: what export traces


@cache
def build() -> Path:
    """The library for this machine, compiled on first use, loaded into this process and traceable by export."""
    source = attention_op.SOURCE
    key = hashlib.sha256(source.read_bytes() + " ".join(compile_command(Path("s"), Path("o"))).encode()
                         + torch.__version__.encode()).hexdigest()[:16]
    library = CACHE / key / attention_op.LIBRARY
    if not library.is_file():
        library.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=library.parent) as tmp:  # concurrent builds: the last rename wins
            partial = Path(tmp) / attention_op.LIBRARY
            done = subprocess.run(compile_command(source, partial), capture_output=True, text=True)
            if done.returncode != 0:
                last = (done.stderr.strip().splitlines() or ["no output"])[-1]
                raise YggcError(f"building the attention kernel with g++ failed ({last}); Inductor needs a "
                                "working g++ too: install it (e.g. apt install g++) and re-run")
            os.replace(partial, library)
    attention_op.load(library)
    torch.library.register_fake(f"{attention_op.NAMESPACE}::{attention_op.OP}")(_fake_attend_rows)
    return library


def install_beside(package: Path) -> None:
    """Copy the built library next to `package`, where the runtime looks for it."""
    shutil.copyfile(build(), Path(package).with_name(attention_op.LIBRARY))
