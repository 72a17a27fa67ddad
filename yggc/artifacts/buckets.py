"""Compiled fixed-width buckets behind the graph's one forward signature.

A bucket is one model at one input width W, served by an AOTInductor package (.pt2) with the cache
view length S dynamic. O1 packages hold one width and no weights: every bucket of a model shares the
model's parameters, and the static KV cache is the model's own buffer (loaded as a user-managed
constant). An O2 package serves every width of its model with its weights frozen inside and takes the
KV caches as inputs (CacheInputBucket), as TensorRT buckets do. Either way every bucket reads and
writes the one cache the model owns.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from ..bundle import OptLevel
from ..errors import YggcError
from ..tree import host
from .aoti_package import load_package
from .cache_inputs import CacheInputBucket
from .cache_layout import VIEW_ALIGN
from .cuda_graphs import CudaGraphRunner
from .timing import NoTrace


def bucket_name(model: str, width: int) -> str:
    return f"{model}_w{width}"


def graph_constants(graph: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer by name, tied ones under each of their names."""
    consts = dict(graph.named_parameters(remove_duplicate=False))
    consts.update(graph.named_buffers(remove_duplicate=False))
    return consts


def load_bucket(path: Path, graph: torch.nn.Module):
    """Load a package that takes its weights and buffers from `graph` and bind them before it can ever be
    called (calling it unbound would crash the process)."""
    consts = graph_constants(graph)
    runner = load_package(path, any(t.is_cuda for t in consts.values()))
    missing = [n for n in runner.get_constant_fqns() if n not in consts]
    if missing:
        raise YggcError(f"compiled bucket {path.name} expects tensor {missing[0]!r} the model lacks; "
                        "re-run `yggc compile`")
    runner.load_constants({n: consts[n] for n in runner.get_constant_fqns()}, check_full_update=True,
                          user_managed=True)
    return runner


def view_lengths(max_seq: int, align: int = VIEW_ALIGN["cuda"]) -> list[int]:
    """Every cache view length CacheLayout.view can return."""
    return sorted({min(s, max_seq) for s in range(align, max_seq + align, align)})


def capture_cuda_graphs(runner, width: int, max_seq: int, trash: int) -> CudaGraphRunner:
    """One CUDA graph per view length; dummy inputs write only the trash slot, so capture is harmless."""
    graphed = CudaGraphRunner(runner)
    long = {"dtype": torch.long, "device": "cuda"}
    for view in view_lengths(max_seq):
        slots = torch.full((width,), trash, **long)
        graphed.capture((torch.zeros(width, **long), torch.zeros(width, **long), slots,
                         torch.ones(width, view, dtype=torch.bool, device="cuda")))
    return graphed


def load_forward_bucket(path: Path, graph: torch.nn.Module, opt: OptLevel = OptLevel.O1, backend: str = "inductor",
                        fed: tuple[torch.Tensor, ...] = (), bind: Callable[..., CacheInputBucket] = CacheInputBucket):
    """The package at `path` bound to `graph`'s weights or caches (O2: and to the `fed` tensors it takes last, by
    bind(runner, graph, fed): the drafter kind's package_bucket, e.g. an EAGLE-3 head's HeadBucket)."""
    if backend == "tensorrt":
        from .tensorrt_buckets import load_tensorrt_bucket  # imports torch_tensorrt: only when asked for

        return load_tensorrt_bucket(path, graph)
    if opt == OptLevel.O2:  # weights frozen in, caches as inputs: nothing to bind
        runner = load_package(path, next(graph.buffers()).is_cuda)
        return bind(runner, graph, fed)
    return load_bucket(path, graph)


class CompiledModel:
    """A LlamaGraph whose forward runs the compiled bucket of the input's width (eager otherwise).

    features=True: its packages were lowered from the graph's forward_features (an O2 verifier paired with
    an EAGLE-3 head) and return (logits, features); the forward keeps the logits, forward_features both.
    fed: tensors its O2 packages take after the caches; bind: how an O2 package is bound (load_forward_bucket).
    drafters.compiled_model sets features, fed and bind from the drafter's kind."""

    def __init__(self, graph: torch.nn.Module, packages: dict[int, Path], opt: OptLevel = OptLevel.O1,
                 backend: str = "inductor", package_width: int = 0, features: bool = False,
                 fed: tuple[torch.Tensor, ...] = (), bind: Callable[..., CacheInputBucket] = CacheInputBucket):
        self.graph, self.cfg, self.opt, self.backend, self.features = graph, graph.cfg, opt, backend, features
        self.fed, self.bind = fed, bind
        self.runners: dict[int, object] = {}  # the bundle's buckets: width -> runner
        self.packages: dict[Path, object] = {}  # loaded once, whatever number of widths they serve
        self.package_width = package_width  # O2: the one package also takes any other width up to this
        self.any_width = None  # O2: that package
        self.trace, self.trace_label = NoTrace(), "model"  # `yggc run --trace` times every call
        self.add_buckets(packages)

    def add_buckets(self, packages: dict[int, Path]) -> None:
        """Load (and on CUDA, graph-capture) more width -> package buckets; a package several widths share
        is loaded once."""
        for w, path in sorted(packages.items()):
            if path not in self.packages:
                self.packages[path] = load_forward_bucket(path, self.graph, self.opt, self.backend, self.fed,
                                                          self.bind)
            run = self.packages[path]
            if self.package_width:
                self.any_width = run
            if next(self.graph.buffers()).is_cuda:  # replay CUDA graphs instead of launching kernel by kernel
                max_seq = self.graph.n_slots - 1
                run = capture_cuda_graphs(run, w, max_seq, max_seq)
            self.runners[w] = run

    def runner(self, width: int):
        """The bucket of this width, else an O2 package that takes it, else None (eager)."""
        run = self.runners.get(width)
        return self.any_width if run is None and width <= self.package_width else run

    def checked_runner(self, width: int):
        run = self.runner(width)
        if run is None and not self.graph.has_weights:
            raise YggcError(f"width {width} is not compiled into this bundle (widths 1.."
                            f"{self.package_width}) and its weights are only in the packages; use a smaller tree")
        return run

    def __call__(self, input_ids, *args) -> torch.Tensor:
        """The graph's forward (input_ids [W] first) through the bucket of width W, else eagerly."""
        run = self.checked_runner(input_ids.shape[0])
        with self.trace.span(self.trace_label, "models", input_ids.shape[0]):
            if run is None:
                return self.graph(input_ids, *args)
            return run(input_ids, *args)[0] if self.features else run(input_ids, *args)

    def forward_features(self, input_ids, *args) -> tuple[torch.Tensor, torch.Tensor]:
        """The graph's forward_features: through a features package, else eagerly."""
        run = self.checked_runner(input_ids.shape[0]) if self.features else None
        with self.trace.span(self.trace_label, "models", input_ids.shape[0]):
            if run is None:
                return self.graph.forward_features(input_ids, *args)
            return tuple(run(input_ids, *args))

    def verify_tree(self, tree: tuple[torch.Tensor, ...], n: int, view: int, verify: int, depth: int,
                    per_row: bool) -> list[torch.Tensor] | None:
        """The greedy verify phase in one call through the package of width verify + 1 (tree: tokens, parents,
        depth, cum_logp [N], anc [N, N]; per_row: with the features, from a features package), the verifier's
        K/V moved -> kernel_ops.verify_tree_accept's outputs, else None (no such package, or a runner without
        the call)."""
        run = self.runner(verify + 1)
        if not getattr(run, "verifies_trees", False) or (per_row and not self.features):  # O1, CUDA graphs: no one call
            return None
        with self.trace.span("verify phase", "models", verify + 1):
            out = run.verify_tree(tree, n, view, verify, depth, per_row)
        if run.kv_pool is None:  # caches apart: the op left the moves to the graph
            self.move_kv(out[5][0], out[5][1])
        return out

    def move_kv(self, src_slots: torch.Tensor, dst_slots: torch.Tensor) -> None:
        """The graph's KV compaction, without the moves of a slot onto itself (on the CPU most iterations'
        accepted path already sits where compaction would put it, and a K/V gather for nothing is host time)."""
        if host.eager_cpu(src_slots):  # a check on an accelerator would synchronize
            keep = src_slots.numpy() != dst_slots.numpy()
            if not keep.any():
                return
            if not keep.all():
                src_slots, dst_slots = src_slots[torch.from_numpy(keep)], dst_slots[torch.from_numpy(keep)]
        self.graph.move_kv(src_slots, dst_slots)
