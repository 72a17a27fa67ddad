"""An AOTInductor package (.pt2) loaded through torch's C++ package loader directly.

`torch._inductor.aoti_load_package` does the same but imports Inductor and Dynamo first (most of a second before
the first token), probes the CPU's vector ISA by compiling test programs, and re-reads the call spec and flattens
the inputs with pytree on every call (a noticeable share of a small drafter's step).
validate_bundle has already matched the ISA the packages were compiled for against this machine's,
and every caller passes its tensors positionally, so none of that is needed here.

CPU packages run through the kernel library's runner class (kernel_ops.package_runner): the same C++ loader,
whose calls let go of the GIL while the model runs. torch's own binding holds the GIL for the whole call (10-40
ms of a SmolLM2 forward on 2 cores), in which no other thread of the process runs Python: `yggc serve`'s event
loop could then read a request or send a chunk only between model calls.
"""
from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

import torch
import torch.utils._pytree as pytree

from ..errors import YggcError
from . import kernel_ops
from .constants_map import constants_path, read_constants
from .file_pages import pages_out_after

MODEL_NAME = "model"  # the name aoti_compile_and_package gives the one model in a package


class BoundLoader:
    """torch's package loader through its own Python binding, which holds the GIL for the whole call: what CUDA
    packages use (run single-threaded, a CUDA graph capture allows no per-call event bookkeeping), and CPU
    packages whose kernel library predates `kernel_ops.RUNNER_CLASSES`. Same methods as those classes, less
    `verify_tree`."""

    def __init__(self, path: str, run_single_threaded: bool):
        self.loader = torch._C._aoti.AOTIModelPackageLoader(path, MODEL_NAME, run_single_threaded, 1, -1)

    def run(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        return self.loader.boxed_run(tensors)

    def call_spec(self) -> list[str]:
        return self.loader.get_call_spec()

    def constant_fqns(self) -> list[str]:
        return self.loader.get_constant_fqns()

    def load_constants(self, constants: dict[str, torch.Tensor], check_full_update: bool, user_managed: bool) -> None:
        self.loader.load_constants(constants, False, check_full_update, user_managed)

    def bind_constants(self, constants: dict[str, torch.Tensor]) -> None:
        self.loader.update_constant_buffer(constants, False, True, True)


class Package:
    def __init__(self, path: str | Path, run_single_threaded: bool = False):
        # Linux hands out AMX tile state only to a process that asks for it; Inductor's ISA probe asks as a
        # side effect, and a package with AMX kernels run without it dies of SIGILL. False without AMX.
        torch.cpu._init_amx()
        kernel_ops.load_beside(Path(path))  # CPU packages call the attention kernel op
        runner = None if run_single_threaded else kernel_ops.package_runner()
        # the kernel library's runner lets go of the GIL while the model runs, so other threads keep running
        self.loader = runner(str(path)) if runner is not None else BoundLoader(str(path), run_single_threaded)
        self.out_spec = pytree.treespec_loads(self.loader.call_spec()[1])
        self.one_output = self.out_spec.is_leaf()
        self.bound: dict[str, torch.Tensor] = {}  # constants the package reads in place (bind_constants)
        # the greedy verify phase around this package in one call (PackageRunnerV2), else None
        self.verify_tree = getattr(self.loader, "verify_tree", None)

    def __call__(self, *tensors: torch.Tensor):
        out = self.loader.run(list(tensors))
        return out[0] if self.one_output else pytree.tree_unflatten(out, self.out_spec)

    def get_constant_fqns(self) -> list[str]:
        return self.loader.constant_fqns()

    def load_constants(self, constants: dict[str, torch.Tensor], check_full_update: bool,
                       user_managed: bool = False) -> None:
        self.loader.load_constants(constants, check_full_update, user_managed)

    def bind_constants(self, constants: dict[str, torch.Tensor]) -> None:
        """Bind every constant by its internal name to `constants`, which the package then reads in place (they
        are kept alive here)."""
        self.loader.bind_constants(constants)
        self.bound = constants


def load_package(path: Path, cuda: bool = False) -> Package:
    """The package at `path`, bound to the constants kept beside it if there are (constants_map.py). CPU:
    its library's pages given back once it is loaded (a library that holds its constants has copied them out by
    then). CUDA: no event bookkeeping per call (run single-threaded), which a CUDA graph capture would not allow,
    and no page-out (the constants went to the device; the driver's and CUDA libraries' mappings stay
    untouched)."""
    beside = constants_path(path)
    constants = read_constants(beside) if beside.exists() else None
    try:
        with nullcontext() if cuda else pages_out_after():
            package = Package(path, run_single_threaded=cuda)
        if constants is not None:
            package.bind_constants(constants)
        return package
    except Exception as e:  # the loader raises RuntimeError subclasses with C++ messages
        raise YggcError(f"compiled bucket {path.name} cannot be loaded ({e}); re-run `yggc compile`") from None
