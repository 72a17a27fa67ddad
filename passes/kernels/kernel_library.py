"""Build yggc's CPU kernel library (yggc/artifacts/kernels/*.cpp: the attention, tied-head and quantized linear ops) for this CPU.

The library is compiled once per source, torch build and CPU capability with the C++ compiler Inductor
already needs (one g++ per source, side by side on the machine's cores, then linked), cached under
~/.cache/yggc/kernels, and copied beside every CPU package lowered with it
(artifacts.kernel_ops.load_beside loads it from there). -march=native, as Inductor's own kernels: the
bundle's ISA fingerprint already ties it to CPUs like this one. The build names the tied head's chunk (-DYGGC_HEAD_CHUNK_PAIRS) and
the level it prefetches the next chunk into (-DYGGC_PREFETCH_HINT, prefetch.hint for this CPU's L1 data cache).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

import torch
from torch.utils import cpp_extension

from ...artifacts import kernel_ops
from ...errors import YggcError
from . import prefetch

CACHE = Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")).expanduser() / "yggc" / "kernels"
CAPABILITY_MACROS = {"AVX512": "-DCPU_CAPABILITY_AVX512", "AVX2": "-DCPU_CAPABILITY_AVX2"}  # ATen's vec headers
# the tied head's chunk (tied_head.cpp block_rows, AVX512-BF16): pair rows of a 64-column block, 4 bytes a column
HEAD_CHUNK_PAIRS = 72
HEAD_CHUNK_BYTES = HEAD_CHUNK_PAIRS * 64 * 4


def compile_command(sources: tuple[Path, ...], out: Path) -> list[str]:
    macro = CAPABILITY_MACROS.get(torch.backends.cpu.get_cpu_capability())
    includes = [f"-I{p}" for p in cpp_extension.include_paths()]
    libs = [f"-L{p}" for p in cpp_extension.library_paths()]
    # -ffp-contract=off: the compiler may not fuse a multiply and an add the source keeps apart. -fvisibility=hidden:
    # the library exports its entry point only, so its kernels bind to its own functions, never to an older
    # library's of the same C++ name loaded into the process first (RTLD_GLOBAL)
    return ["g++", "-O3", "-march=native", "-ffp-contract=off", "-fvisibility=hidden", "-fPIC", "-shared",
            "-std=c++20", "-fopenmp",
            f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}", *([macro] if macro else []),
            f"-DYGGC_HEAD_CHUNK_PAIRS={HEAD_CHUNK_PAIRS}", f"-DYGGC_PREFETCH_HINT={prefetch.hint(HEAD_CHUNK_BYTES)}",
            *includes, *map(str, sources), "-o", str(out), *libs, "-lc10", "-ltorch", "-ltorch_cpu"]


def compile_and_link(units: list[tuple[Path, Path, list[str]]], out: Path) -> None:
    """Each (source, object, extra g++ flags) compiled with compile_command's flags, side by side on the machine's
    cores, and the objects linked into the library `out`. YggcError naming the first source g++ refuses and its
    first error, or the link's first undefined reference."""
    command = compile_command((), out)
    flags, libs = command[:command.index("-o")], command[command.index("-o") + 2:]

    def compile_one(unit: tuple[Path, Path, list[str]]) -> subprocess.CompletedProcess:
        src, obj, extra = unit
        return subprocess.run([*flags, *extra, "-c", str(src), "-o", str(obj)], capture_output=True, text=True)

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        for (src, _, _), done in zip(units, pool.map(compile_one, units)):
            if done.returncode != 0:
                raise YggcError(f"building yggc's CPU kernels: g++ failed on {src.name} "
                                f"({telling_line(done, 'error')}); Inductor needs a working g++ too: install it "
                                "(e.g. apt install g++) and re-run")
    linked = subprocess.run(["g++", "-shared", "-fopenmp", "-Wl,--no-undefined", *(str(obj) for _, obj, _ in units),
                             "-o", str(out), *libs], capture_output=True, text=True)
    if linked.returncode != 0:
        raise YggcError(f"building yggc's CPU kernels: linking failed ({telling_line(linked, 'undefined reference')})")


def compile_sources(sources: tuple[Path, ...], out: Path) -> None:
    """compile_and_link of `sources` as they are, their objects in a temporary folder beside `out`."""
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        compile_and_link([(src, Path(tmp) / f"{src.stem}.o", []) for src in sources], out)


def telling_line(done: subprocess.CompletedProcess, marker: str) -> str:
    """The first line of the tool's stderr that holds `marker`, else its last line."""
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()] or ["no output"]
    return next((line for line in lines if marker in line), lines[-1])


def _fake_attend_rows(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(q, memory_format=torch.contiguous_format)  # [H, W, hd]: what export traces


def _fake_tied_head(x: torch.Tensor, packed: torch.Tensor, vocab: int) -> torch.Tensor:
    return x.new_empty(x.shape[0], vocab, dtype=torch.float32)  # [W, vocab]


def _fake_quant_linear(x: torch.Tensor, packed: torch.Tensor, fmt: int, n: int) -> torch.Tensor:
    return x.new_empty(x.shape[0], n, dtype=torch.float32)  # [W, n]


@cache
def build() -> Path:
    """The library for this machine, compiled on first use, loaded into this process and traceable by export."""
    sources = kernel_ops.SOURCES
    key = hashlib.sha256(b"".join(s.read_bytes() for s in sources) + " ".join(compile_command((), Path("o"))).encode()
                         + torch.__version__.encode()).hexdigest()[:16]
    library = CACHE / key / kernel_ops.LIBRARY
    if not library.is_file():
        library.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=library.parent) as tmp:  # concurrent builds: the last rename wins
            partial = Path(tmp) / kernel_ops.LIBRARY
            compile_sources(sources, partial)
            os.replace(partial, library)
    kernel_ops.load(library)
    torch.library.register_fake(f"{kernel_ops.NAMESPACE}::{kernel_ops.ATTEND_OP}")(_fake_attend_rows)
    torch.library.register_fake(f"{kernel_ops.NAMESPACE}::{kernel_ops.HEAD_OP}")(_fake_tied_head)
    torch.library.register_fake(f"{kernel_ops.NAMESPACE}::{kernel_ops.QUANT_OP}")(_fake_quant_linear)
    return library


def install_beside(package: Path) -> None:
    """Copy the built library next to `package`, where the runtime looks for it."""
    shutil.copyfile(build(), Path(package).with_name(kernel_ops.LIBRARY))
