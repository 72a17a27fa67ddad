"""yggc's CPU kernel library (kernels/*.cpp) and the torch ops it registers:

- `yggc::attend_rows_v2`: batch-invariant masked GQA attention (kernels/attend_rows.cpp, with
  kernels/pair_scores.cpp's scores on AVX512-BF16); the library also registers `attend_rows_v1`, which packages
  compiled before v2 call;
- `yggc::tied_head_v2`: a tied LM head read from the blocked bf16 table the embedding is gathered from too
  (kernels/tied_head.cpp; passes/tied_head.py lays the table out, in blocks of 16 or 64 columns). The library
  also registers `tied_head_v1` (blocks of 16 only), which packages compiled before v2 call;
- `torch.classes.yggc.PackageRunnerV1`: torch's own package loader bound as a TorchScript class
  (kernels/package_runner.cpp), whose calls let go of the GIL while the model runs (aoti_package.py).

CPU packages call them from their compiled code (AOTInductor extern kernels), so a process must load the
library before it loads such a package. The compile writes the library beside the packages it lowers
(`LIBRARY` in the bundle's artifacts); `load_beside` loads it from there. An op's name carries its version, so
two libraries' ops of one name compute the same function on the same layouts (built for different CPUs, their
sums may round differently; a process calls the one it registered first for every row, so rows stay
batch-invariant). The library registers its ops when asked (`REGISTER`, kernels/register_ops.cpp), each only if
the process has not got it, so bundles of different yggc versions share a process. Libraries older than that
registered every op as they loaded, which aborts a process holding any of them already: those load only into a
process without yggc ops.
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from ..errors import YggcError

NAMESPACE, ATTEND_OP, HEAD_OP = "yggc", "attend_rows_v2", "tied_head_v2"
KNOWN_OPS = ("attend_rows_v1", ATTEND_OP, "tied_head_v1", HEAD_OP)  # every op some library version registers
REGISTER = "yggc_register_ops"  # the library's entry point
RUNNER_CLASS = "PackageRunnerV1"  # torch's package loader, called without the GIL (kernels/package_runner.cpp)
LIBRARY = "yggc_kernels.so"
SOURCES = tuple(Path(__file__).with_name("kernels") / name
                for name in ("attend_rows.cpp", "pair_scores.cpp", "tied_head.cpp", "package_runner.cpp",
                             "register_ops.cpp"))


def has_op(name: str) -> bool:
    return hasattr(getattr(torch.ops, NAMESPACE), name)


def registered() -> bool:
    return has_op(ATTEND_OP) and has_op(HEAD_OP)


def load(library: Path) -> None:
    """Register the ops of `library` that this process has not got."""
    if registered():
        return
    data = _open(library, lambda path: Path(path).read_bytes())
    if REGISTER.encode() not in data:  # an older library: it registers its ops (named in it) as it loads
        present = [has_op(op) for op in KNOWN_OPS if f"{op}(".encode() in data]
        if present and all(present):  # the process has them already (this library, or a newer one)
            return
        if any(present):
            raise YggcError(f"kernel library {library} is an older build than the one this process loaded; load "
                            "bundles compiled by one yggc version per process, or re-run `yggc compile`")
        _open(library, torch.ops.load_library)
        return
    getattr(_open(library, lambda path: ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)), REGISTER)()  # ctypes never unloads it


def package_runner():
    """The library's package runner class (torch.classes.yggc.PackageRunnerV1), or None if no library this
    process loaded registers it (libraries built before it)."""
    try:
        return getattr(getattr(torch.classes, NAMESPACE), RUNNER_CLASS)
    except RuntimeError:  # torch.classes raises RuntimeError for a class nobody registered
        return None


def load_beside(package: Path) -> None:
    """Load the kernel library next to `package` if there is one (packages compiled for the CPU)."""
    library = Path(package).with_name(LIBRARY)
    if library.is_file():
        load(library)


def _open(library: Path, opener):
    try:
        return opener(str(library))
    except OSError as e:
        raise YggcError(f"kernel library {Path(library).name} cannot be loaded ({e}); re-run `yggc compile`") from None


def attend_rows(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """q [H, W, hd]; keys, values [KV, S, hd]; mask [W, S] bool -> [H, W, hd] (the op; load() first)."""
    return getattr(getattr(torch.ops, NAMESPACE), ATTEND_OP)(q, keys, values, mask)


def tied_head(x: torch.Tensor, packed: torch.Tensor, vocab: int) -> torch.Tensor:
    """x [W, K] bf16; packed [ceil(vocab / C), K / 2, C, 2] bf16, C = 16 or 64 -> logits [W, vocab] float32 (load()
    first)."""
    return getattr(getattr(torch.ops, NAMESPACE), HEAD_OP)(x, packed, vocab)
