"""yggc's CPU kernel library (kernels/*.cpp) and the torch ops it registers:

- `yggc::attend_rows_v3`: batch-invariant masked GQA attention (kernels/attend_rows.cpp, with
  kernels/pair_scores.cpp's scores and bf16 weighted values in slot pairs on AVX512-BF16); the library also
  registers `attend_rows_v2` and `attend_rows_v1`, which packages compiled before v3 and v2 call;
- `yggc::tied_head_v2`: a tied LM head read from the blocked bf16 table the embedding is gathered from too
  (kernels/tied_head.cpp; passes/tied_head.py lays the table out, in blocks of 16 or 64 columns). The library
  also registers `tied_head_v1` (blocks of 16 only), which packages compiled before v2 call;
- `yggc::quant_linear_v1`: a linear layer over ggml's Q8_0/Q4_0/Q4_1 blocks, activations quantized per row
  (kernels/quant_linear.cpp; passes/quant_linear.py lays the blocks out in groups of 16 columns);
- `yggc::verify_tree_inputs_v1` and `yggc::verify_tree_accept_v1`: the greedy verify phase's tree work before and
  after the verifier's call (kernels/verify_tree.cpp; runtime/verify_phase.py calls them where the process has
  them, else tree/verify_host.py's Python, which gives the same results);
- `torch.classes.yggc.PackageRunnerV2`: torch's own package loader bound as a TorchScript class
  (kernels/package_runner.cpp), whose calls let go of the GIL while the model runs (aoti_package.py); its
  `verify_tree` runs the two tree ops and the verifier's package between them in one call. The library also
  registers V1 (without it), which yggc versions before V2 ask for.

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

NAMESPACE, ATTEND_OP, HEAD_OP = "yggc", "attend_rows_v3", "tied_head_v2"
TREE_INPUTS_OP, TREE_ACCEPT_OP = "verify_tree_inputs_v1", "verify_tree_accept_v1"
QUANT_OP = "quant_linear_v1"
# every op some library version registers
KNOWN_OPS = ("attend_rows_v1", "attend_rows_v2", ATTEND_OP, "tied_head_v1", HEAD_OP)
REGISTER = "yggc_register_ops"  # the library's entry point
RUNNER_CLASSES = ("PackageRunnerV2", "PackageRunnerV1")  # torch's package loader, called without the GIL
# (kernels/package_runner.cpp), newest first: V2 also runs the greedy verify phase in one call (verify_tree)
LIBRARY = "yggc_kernels.so"
SOURCES = tuple(Path(__file__).with_name("kernels") / name
                for name in ("attend_rows.cpp", "pair_scores.cpp", "tied_head.cpp", "quant_linear.cpp", "verify_tree.cpp",
                             "package_runner.cpp", "register_ops.cpp"))


def has_op(name: str) -> bool:
    return hasattr(getattr(torch.ops, NAMESPACE), name)


def registered() -> bool:
    return has_op(ATTEND_OP) and has_op(HEAD_OP) and has_op(QUANT_OP)


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
    """The newest package runner class a library this process loaded registers (torch.classes.yggc.PackageRunnerV2,
    else V1), or None (libraries built before it)."""
    for name in RUNNER_CLASSES:
        try:
            return getattr(getattr(torch.classes, NAMESPACE), name)
        except RuntimeError:  # torch.classes raises RuntimeError for a class nobody registered
            continue
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


def quant_linear(x: torch.Tensor, packed: torch.Tensor, fmt: int, n: int) -> torch.Tensor:
    """x [W, K] bf16 or float32; packed [ceil(n / 16), K / 32, group bytes] uint8 (graphs/block_quant.pack_blocks),
    fmt its FORMAT_CODES code -> [W, n] float32 (load() first)."""
    return getattr(getattr(torch.ops, NAMESPACE), QUANT_OP)(x, packed, fmt, n)


def has_tree_ops() -> bool:
    """Whether this process has the verify phase's tree ops (a library built before them has not)."""
    return has_op(TREE_ACCEPT_OP)


def verify_tree_inputs(tokens: torch.Tensor, parents: torch.Tensor, depth: torch.Tensor, cum_logp: torch.Tensor,
                       anc: torch.Tensor, n: int, view: int, verify: int) -> list[torch.Tensor]:
    """A tree ([N] each, anc [N, N]) pruned to its root and V best nodes -> sub_tokens, positions, slots [V+1],
    mask [V+1, view], rows [3, V+1] (kept ids, parent rows, depths), sub_anc [V+1, V+1] (the op; load() first)."""
    return getattr(getattr(torch.ops, NAMESPACE), TREE_INPUTS_OP)(tokens, parents, depth, cum_logp, anc, n, view,
                                                                   verify)


def verify_tree_accept(logits: torch.Tensor, sub_tokens: torch.Tensor, rows: torch.Tensor, sub_anc: torch.Tensor,
                       n: int, depth: int, kv_pool: torch.Tensor | None, per_row: tuple[torch.Tensor, ...] = ()
                       ) -> list[torch.Tensor]:
    """Greedy acceptance of verify_tree_inputs' rows scored `logits` [V+1, vocab] -> emitted tokens, info [3], the
    deepest accepted row's logits, the drafter's K/V moves [2, L-1], path rows [L], the verifier's K/V moves [2, L-1]
    (made in kv_pool where one is given), then each per_row tensor's path rows (the op; load() first)."""
    return getattr(getattr(torch.ops, NAMESPACE), TREE_ACCEPT_OP)(logits, sub_tokens, rows, sub_anc, n, depth, kv_pool,
                                                                   list(per_row))
