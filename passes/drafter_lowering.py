"""The compile half of a drafter kind: what only the compile asks of a kind of drafter model, one object per kind in
LOWERINGS, keyed by the kind's name (yggc/runtime/drafters' KINDS, whose `name` a manifest records).

The runtime half (yggc/runtime/drafters: DrafterKind) keeps what loading and decoding need, and what the compile
shares with the load: the pair check, loading, the phase modules a package is bound to, whether a package returns
features, what it takes after its caches and how it is bound, the feature fusion set on the verifier, and the
manifest record checked at load. What is here the runtime never calls: which targets can compile the kind, whether
a tensor-parallel compile can pair it, how its O2 model package is lowered, what the bundle keeps beside the packages
and what the profile times its steps with. A new kind of drafter adds its runtime kind to KINDS and its lowering here.
"""
from __future__ import annotations

from pathlib import Path
from typing import Protocol

from torch import nn

from ..errors import YggcError
from ..runtime.drafters import kind_of, kind_of_folder
from .compile_state import LoadedPair
from .job import CompileJob
from .kept_weights import keep_head_embedding, keep_head_fusion
from .lower import lower_head_model, lower_model
from .profile import HeadSteps
from .write_bundle import BundleWriter


class DrafterLowering(Protocol):
    """What the compile asks of one kind of drafter beyond its runtime kind."""

    name: str  # the runtime kind's name
    tensor_parallel: bool  # a tensor-parallel compile can pair it with the verifier's slices
    probe_widths: tuple[int, ...]  # the widths calibration times its steps at (): its forward buckets' widths

    def check_target(self, drafter_dir: str | Path, device: str, backend: str) -> None:
        """Raises YggcError where a bundle with this drafter cannot be compiled for (device, backend)."""

    def lower_package(self, name: str, graph: nn.Module, drafter: nn.Module, width: int, path: Path,
                      job: CompileJob) -> None:
        """Model `name`'s O2 package at every width 1..`width`, in a pairing with `drafter`."""

    def keep_beside_packages(self, w: BundleWriter, loaded: LoadedPair, kept: dict[str, bool],
                             job: CompileJob) -> None:
        """What the bundle keeps of a model whose O2 package carries its weights (kept[name] False)."""

    def profiled_drafter(self, drafter) -> object:
        """The forward the profile times the drafter's steps with."""


def lower_paired_model(name: str, graph: nn.Module, drafter: nn.Module, width: int, path: Path,
                       job: CompileJob) -> None:
    """A whole model's forward as one O2 package: features and trailing inputs as the drafter's kind pairs it."""
    kind = kind_of(drafter)
    lower_model(graph, width, job.max_seq, path, job.device, job.opt, kind.features_package(name, job.opt),
                shared_table=kind.package_inputs(name, drafter))


class StandaloneLowering:
    """A standalone LM drafter: any target, tensor-parallel pairs, every model package a whole forward."""

    name = "llama"
    tensor_parallel = True
    probe_widths = ()

    def check_target(self, drafter_dir: str | Path, device: str, backend: str) -> None:
        """Every device and backend builds a standalone drafter."""

    def lower_package(self, name: str, graph: nn.Module, drafter: nn.Module, width: int, path: Path,
                      job: CompileJob) -> None:
        lower_paired_model(name, graph, drafter, width, path, job)

    def keep_beside_packages(self, w: BundleWriter, loaded: LoadedPair, kept: dict[str, bool],
                             job: CompileJob) -> None:
        """Nothing: each model runs from its package alone."""

    def profiled_drafter(self, drafter) -> object:
        return drafter


class Eagle3Lowering:
    """An EAGLE-3 head: CPU and Inductor only, no tensor parallelism; its O2 package is lowered from
    forward_embedded, the bundle keeps its feature fusion and the verifier's embedding beside the packages, and the
    profile times its steps fed zero features (HeadSteps) at its probe widths."""

    name = "eagle3"
    tensor_parallel = False
    probe_widths = (1, 4, 8)

    def check_target(self, drafter_dir: str | Path, device: str, backend: str) -> None:
        """Bundles with heads compile with the Inductor backend on a CPU."""
        if device != "cpu" or backend != "inductor":
            raise YggcError(f"{drafter_dir} is an EAGLE-3 head: bundles with heads are CPU-only for now; "
                            "compile with --device cpu (the inductor backend)")

    def lower_package(self, name: str, graph: nn.Module, drafter: nn.Module, width: int, path: Path,
                      job: CompileJob) -> None:
        if name == "drafter":  # the rows the runtime gathers from the verifier's embedding, not token ids
            lower_head_model(graph, width, job.max_seq, path, job.device, job.opt)
        else:
            lower_paired_model(name, graph, drafter, width, path, job)

    def keep_beside_packages(self, w: BundleWriter, loaded: LoadedPair, kept: dict[str, bool],
                             job: CompileJob) -> None:
        """The head's feature fusion where its package holds the rest, the verifier's token embedding where the
        verifier's package holds it (passes/kept_weights.py)."""
        if not kept["drafter"]:
            keep_head_fusion(w, loaded)
        if not kept["verifier"]:
            keep_head_embedding(w, loaded, job.dtype, job.device, job.opt)

    def profiled_drafter(self, drafter) -> object:
        return HeadSteps(drafter)


# one lowering per runtime kind (yggc/runtime/drafters.KINDS), by the kind's name
LOWERINGS: dict[str, DrafterLowering] = {lowering.name: lowering for lowering in (Eagle3Lowering(),
                                                                                   StandaloneLowering())}


def lowering_of(drafter) -> DrafterLowering:
    """The lowering of a drafter's kind (its graph, or a LoadedModel / CompiledModel around it)."""
    return LOWERINGS[kind_of(drafter).name]


def lowering_of_folder(drafter_dir: str | Path) -> DrafterLowering:
    """The lowering of the kind of drafter a checkpoint folder holds."""
    return LOWERINGS[kind_of_folder(drafter_dir).name]
