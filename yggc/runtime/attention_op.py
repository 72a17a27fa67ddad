"""The batch-invariant attention kernel (kernels/attend_rows.cpp) as the torch op `yggc::attend_rows_v1`.

CPU packages call it from their compiled code (an AOTInductor extern kernel), so a process must load the
library before it loads such a package. The compile writes the library beside the packages it lowers
(`LIBRARY` in the bundle's artifacts); `load_beside` loads it from there. The op is registered once per
process: its name carries the kernel's version, so two libraries of one version are one kernel.
"""
from __future__ import annotations

from pathlib import Path

import torch

from ..errors import YggcError

NAMESPACE, OP = "yggc", "attend_rows_v1"
LIBRARY = "attend_rows.so"
SOURCE = Path(__file__).with_name("kernels") / "attend_rows.cpp"


def registered() -> bool:
    return hasattr(getattr(torch.ops, NAMESPACE), OP)


def load(library: Path) -> None:
    """Register the op from `library` unless this process has it already."""
    if registered():
        return
    try:
        torch.ops.load_library(str(library))
    except OSError as e:
        raise YggcError(f"attention kernel {library.name} cannot be loaded ({e}); re-run `yggc compile`") from None


def load_beside(package: Path) -> None:
    """Load the kernel library next to `package` if there is one (packages compiled for the CPU)."""
    library = Path(package).with_name(LIBRARY)
    if library.is_file():
        load(library)


def attend_rows(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """q [H, W, hd]; keys, values [KV, S, hd]; mask [W, S] bool -> [H, W, hd] (the op; load() first)."""
    return getattr(getattr(torch.ops, NAMESPACE), OP)(q, keys, values, mask)
