"""The compiled buckets a job needs: which widths each model is called at, and lowering them (O2: one package
per model; O1: one per width, plus the fused draft and verify phases), and the decoder built from them."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..artifacts.buckets import CompiledModel, bucket_name, load_bucket
from ..bundle.manifest import BucketSpec
from ..plan.shape import HEAD_WIDTH, TreeShape
from ..runtime.autoregressive import PREFILL_CHUNK
from ..runtime.drafters import frozen_draft_runner, kind_of, speculative_decoder
from ..runtime.speculative import SpeculativeDecoder
from ..runtime.tp_processes import rank_world
from .compile_state import MODEL_NAMES, CompiledPair, LoadedPair, Widths
from .drafter_lowering import lowering_of
from .job import CompileJob
from .lower import (
    lower_bucket,
    lower_draft_phase,
    lower_frozen_draft_phase,
    lower_verify_phase,
)
from .lower_tensorrt import lower_bucket_tensorrt
from .tensor_parallel_bundle import barrier, split_file
from .write_bundle import BundleWriter

# extra widths lowered and profiled before calibration, so the cost curves have points between 2 and 32
PROBE_WIDTHS = {"verifier": (8, 16), "drafter": (4, 8)}
MODEL_PACKAGE_WIDTH = 64  # O2: widths 1..64 (or the widest bucket the job can ask for) share one package


def bucket_widths(shape: TreeShape | None, probe: bool = False, head: bool = False,
                  opt: str = "O1") -> Widths:
    """Widths each model is called at: prefill chunks, decode/draft steps, the head step, verify
    (and, before calibration, the probe widths that shape the cost curves). With an EAGLE-3 head only the
    verifier's 1-token step is a bucket: at O1 the head runs inside the compiled draft phase (eagerly around
    sampled drafting); at O2 its one package takes every width (a bucket at W = 1 records it); prefill and
    sampled verification run the verifier eagerly for its features."""
    if head:
        return Widths([1, *(PROBE_WIDTHS["verifier"] if probe else ())], [1] if opt == "O2" else [])
    widths = {"verifier": {1, PREFILL_CHUNK}, "drafter": {1, HEAD_WIDTH, PREFILL_CHUNK}}
    if shape is not None:
        widths["verifier"].add(shape.verify + 1)
        widths["drafter"].add(shape.width)
    if probe:
        for name, extra in PROBE_WIDTHS.items():
            widths[name].update(extra)
    return Widths(sorted(widths["verifier"]), sorted(widths["drafter"]))


def lowered_widths(buckets: list[BucketSpec]) -> Widths:
    return Widths(*(sorted(b.width for b in buckets if b.model == name and b.kind == "forward")
                    for name in MODEL_NAMES))


def forward_spec(name: str, width: int, file: str | None = None) -> BucketSpec:
    """Model `name`'s forward at `width`, in its own package (O1) or in `file`, the model's one package (O2)."""
    return BucketSpec(bucket_name(name, width), name, "forward", width,
                      file or f"artifacts/{bucket_name(name, width)}.pt2")


def draft_phase_spec(shape: TreeShape) -> BucketSpec:
    name = f"draft_d{shape.depth}_w{shape.width}"
    return BucketSpec(name, "drafter", "draft_phase", shape.width, f"artifacts/{name}.pt2", depth=shape.depth)


def verify_phase_spec(shape: TreeShape) -> BucketSpec:
    name = f"verify_d{shape.depth}_w{shape.width}_v{shape.verify}"
    return BucketSpec(name, "verifier", "verify_phase", shape.width, f"artifacts/{name}.pt2", depth=shape.depth,
                      verify=shape.verify)


def package_width(job: CompileJob) -> int:
    """O2: the widest input a model package takes - every bucket the job can lower, calibration's trees too."""
    widest = max(MODEL_PACKAGE_WIDTH, PREFILL_CHUNK, *PROBE_WIDTHS["verifier"])
    if job.shape is not None:
        widest = max(widest, job.shape.verify + 1)
    if job.calib is not None:
        widest = max(widest, 1 + job.calib.max_depth * max(job.calib.widths))
    return widest


def lower_model_packages(w: BundleWriter, loaded: LoadedPair, widths: Widths, job: CompileJob,
                         log) -> list[BucketSpec]:
    """O2: one package per model (lowered the first time the model is asked for) behind all its buckets."""
    buckets, drafter = [], loaded.drafter.graph
    lowering = lowering_of(drafter)
    for name, model in loaded.items():
        rel = f"artifacts/{name}.pt2"
        if widths[name] and not w.path(rel).exists():
            lowering.lower_package(name, model.graph, drafter, package_width(job), w.path(rel), job)
            log(f"lowered {name} at every width 1..{package_width(job)}")
        buckets += [forward_spec(name, width, rel) for width in widths[name]]
    return buckets


def lower_forward_buckets(w: BundleWriter, loaded: LoadedPair, widths: Widths, job: CompileJob,
                          log) -> list[BucketSpec]:
    if job.opt == "O2":
        return lower_model_packages(w, loaded, widths, job, log)
    buckets, rank = [], rank_world()[0]
    for name, model in loaded.items():
        split = job.tp > 1 and name == "verifier"  # each rank lowers its slice; rank 0 the replicated drafter
        for width in widths[name]:
            record = forward_spec(name, width)
            if split:
                record = replace(record, rank=rank, file=split_file(record.file, rank))
            if job.backend == "tensorrt":
                lower_bucket_tensorrt(model.graph, width, job.max_seq, w.path(record.file))
            elif split or rank == 0:
                lower_bucket(model.graph, width, job.max_seq, w.path(record.file), job.device, job.opt)
            buckets.append(record)
            log(f"lowered {name} W={width}")
    barrier()  # every rank's packages are written before any rank loads one
    return buckets


def lower_phases(w: BundleWriter, loaded: LoadedPair, shape: TreeShape, job: CompileJob, log) -> list[BucketSpec]:
    """The fused draft phase and greedy verify phase for the tree shape."""
    rank, v, d = rank_world()[0], loaded.verifier.graph, loaded.drafter.graph
    kind, draft, verify = kind_of(d), draft_phase_spec(shape), verify_phase_spec(shape)
    if rank == 0:  # the drafter is replicated: one package for every rank
        module = kind.draft_phase(d, shape, v.cfg.vocab_size, d.n_slots - 1)
        lower_draft_phase(module, job.max_seq, w.path(draft.file), job.device, job.opt)
    log(f"lowered the draft phase D={shape.depth} W={shape.width}")
    if job.tp > 1:  # the verifier's slice, collectives inside: one package per rank
        verify = replace(verify, rank=rank, file=split_file(verify.file, rank))
    lower_verify_phase(kind.verify_phase(v, shape), shape.n_nodes, job.max_seq, w.path(verify.file), job.device,
                       job.opt)
    log(f"lowered the verify phase V={shape.verify}")
    barrier()
    return [draft, verify]


def lower_frozen_draft_phases(root: Path, loaded: LoadedPair, shapes: list[TreeShape], job: CompileJob,
                              log) -> list[BucketSpec]:
    """O2: the draft phase at each (D, W) of `shapes` as one package under `root` (the bundle's, or calibration's
    scratch folder) with the drafter's weights frozen in, where the drafter's kind compiles one (an EAGLE-3 head);
    else nothing (the phase runs eagerly around the drafter's package)."""
    drafter, records = loaded.drafter.graph, []
    kind, vocab = kind_of(drafter), loaded.verifier.graph.cfg.vocab_size
    for depth, width in dict.fromkeys((s.depth, s.width) for s in shapes):
        shape = TreeShape(depth, width, 1)  # drafting reads D and W only
        phase = kind.frozen_draft_phase(drafter, shape, vocab, drafter.n_slots - 1)
        if phase is None:  # the kind compiles none, at any shape
            log(f"the draft phase runs eagerly around {kind.description}'s package")
            return []
        records.append(draft_phase_spec(shape))
        path = root / records[-1].file
        path.parent.mkdir(parents=True, exist_ok=True)
        lower_frozen_draft_phase(phase, job.max_seq, path, job.device, job.opt)
        log(f"lowered the draft phase D={depth} W={width} with the drafter's weights frozen in")
    return records


def forward_packages(root: Path, buckets: list[BucketSpec], model: str) -> dict[int, Path]:
    return {b.width: root / b.file for b in buckets if b.model == model and b.kind == "forward"}


def compiled_decoder(root: Path, loaded: LoadedPair, compiled: CompiledPair, buckets: list[BucketSpec],
                     shape: TreeShape, job: CompileJob) -> SpeculativeDecoder:
    """The decoder the runtime will build from these buckets (for profiling)."""
    if job.opt == "O2":  # the draft phase's package where the drafter's kind has one, else eager phases
        v, d = loaded.verifier.graph, loaded.drafter.graph
        drafts = {(b.depth, b.width): b for b in buckets if b.kind == "draft_phase"}
        draft = drafts.get((shape.depth, shape.width))
        runner = draft and frozen_draft_runner(root / draft.file, d, shape, v.cfg.vocab_size)
        return speculative_decoder(compiled.verifier, compiled.drafter, loaded.verifier.layout, shape,
                                   draft_phase=runner)
    draft, verify = (next(b for b in buckets if b.kind == kind) for kind in ("draft_phase", "verify_phase"))
    v, d = loaded.verifier.graph, loaded.drafter.graph
    draft_runner = load_bucket(root / draft.file, kind_of(d).draft_phase(d, shape, v.cfg.vocab_size, job.max_seq))
    verify_runner = load_bucket(root / verify.file, kind_of(d).verify_phase(v, shape))
    return speculative_decoder(compiled.verifier, compiled.drafter, loaded.verifier.layout, shape,
                               draft_phase=draft_runner, verify_phase=verify_runner)
