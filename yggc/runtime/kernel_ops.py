"""yggc's CPU kernel library (kernels/*.cpp) and the torch ops it registers:

- `yggc::attend_rows_v1`: batch-invariant masked GQA attention (kernels/attend_rows.cpp);
- `yggc::tied_head_v1`: a tied LM head read from the blocked bf16 table the embedding is gathered from too
  (kernels/tied_head.cpp; passes/tied_head.py lays the table out).

CPU packages call them from their compiled code (AOTInductor extern kernels), so a process must load the
library before it loads such a package. The compile writes the library beside the packages it lowers
(`LIBRARY` in the bundle's artifacts); `load_beside` loads it from there. The ops are registered once per
process: their names carry the kernels' versions, so two libraries of one version are the same kernels.
"""
from __future__ import annotations

from pathlib import Path

import torch

from ..errors import YggcError

NAMESPACE, ATTEND_OP, HEAD_OP = "yggc", "attend_rows_v1", "tied_head_v1"
LIBRARY = "yggc_kernels.so"
SOURCES = tuple(Path(__file__).with_name("kernels") / name for name in ("attend_rows.cpp", "tied_head.cpp"))


def registered() -> bool:
    return all(hasattr(getattr(torch.ops, NAMESPACE), op) for op in (ATTEND_OP, HEAD_OP))


def load(library: Path) -> None:
    """Register the ops from `library` unless this process has them already."""
    if registered():
        return
    try:
        torch.ops.load_library(str(library))
    except OSError as e:
        raise YggcError(f"kernel library {library.name} cannot be loaded ({e}); re-run `yggc compile`") from None


def load_beside(package: Path) -> None:
    """Load the kernel library next to `package` if there is one (packages compiled for the CPU)."""
    library = Path(package).with_name(LIBRARY)
    if library.is_file():
        load(library)


def attend_rows(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """q [H, W, hd]; keys, values [KV, S, hd]; mask [W, S] bool -> [H, W, hd] (the op; load() first)."""
    return getattr(getattr(torch.ops, NAMESPACE), ATTEND_OP)(q, keys, values, mask)


def tied_head(x: torch.Tensor, packed: torch.Tensor, vocab: int) -> torch.Tensor:
    """x [W, K] bf16; packed [ceil(vocab / 16), K / 2, 16, 2] bf16 -> logits [W, vocab] float32 (load() first)."""
    return getattr(getattr(torch.ops, NAMESPACE), HEAD_OP)(x, packed, vocab)
