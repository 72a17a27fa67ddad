"""The compiled buckets a job needs: which widths each model is called at, and lowering them (O2: one package
per model; O1: one per width, plus the fused draft and verify phases), and the decoder built from them."""
from __future__ import annotations

from pathlib import Path

from ..artifacts.buckets import CompiledModel, bucket_name, load_bucket
from ..plan.shape import HEAD_WIDTH, TreeShape
from ..runtime.autoregressive import PREFILL_CHUNK
from ..runtime.drafters import frozen_draft_runner, kind_of, speculative_decoder
from ..runtime.speculative import SpeculativeDecoder
from ..runtime.tp_processes import rank_world
from .job import CompileJob
from .lower import (
    lower_bucket,
    lower_draft_phase,
    lower_frozen_draft_phase,
    lower_head_model,
    lower_model,
    lower_verify_phase,
)
from .lower_tensorrt import lower_bucket_tensorrt
from .tensor_parallel_bundle import barrier, split_file
from .write_bundle import BundleWriter

# extra widths lowered and profiled before calibration, so the cost curves have points between 2 and 32
PROBE_WIDTHS = {"verifier": (8, 16), "drafter": (4, 8)}
HEAD_PROBE_WIDTHS = (1, 4, 8)  # an EAGLE-3 head's eager steps, timed for the objective
MODEL_PACKAGE_WIDTH = 64  # O2: widths 1..64 (or the widest bucket the job can ask for) share one package


def bucket_widths(shape: TreeShape | None, probe: bool = False, head: bool = False,
                  opt: str = "O1") -> dict[str, list[int]]:
    """Widths each model is called at: prefill chunks, decode/draft steps, the head step, verify
    (and, before calibration, the probe widths that shape the cost curves). With an EAGLE-3 head only the
    verifier's 1-token step is a bucket: at O1 the head runs inside the compiled draft phase (eagerly around
    sampled drafting); at O2 its one package takes every width (a bucket at W = 1 records it); prefill and
    sampled verification run the verifier eagerly for its features."""
    if head:
        return {"verifier": [1, *(PROBE_WIDTHS["verifier"] if probe else ())], "drafter": [1] if opt == "O2" else []}
    widths = {"verifier": {1, PREFILL_CHUNK}, "drafter": {1, HEAD_WIDTH, PREFILL_CHUNK}}
    if shape is not None:
        widths["verifier"].add(shape.verify + 1)
        widths["drafter"].add(shape.width)
    if probe:
        for name, extra in PROBE_WIDTHS.items():
            widths[name].update(extra)
    return {name: sorted(ws) for name, ws in widths.items()}


def lowered_widths(buckets: list[dict]) -> dict[str, list[int]]:
    return {name: sorted(b["width"] for b in buckets if b["model"] == name and b["kind"] == "forward")
            for name in ("verifier", "drafter")}


def draft_phase_record(shape: TreeShape) -> dict:
    name = f"draft_d{shape.depth}_w{shape.width}"
    return {"name": name, "model": "drafter", "kind": "draft_phase", "depth": shape.depth, "width": shape.width,
            "file": f"artifacts/{name}.pt2"}


def draft_phase_bucket(shape: TreeShape, drafter, vocab: int) -> dict:
    module = kind_of(drafter).draft_phase(drafter, shape, vocab, drafter.n_slots - 1)
    return {**draft_phase_record(shape), "module": module}


def verify_phase_bucket(shape: TreeShape, verifier, drafter) -> dict:
    name = f"verify_d{shape.depth}_w{shape.width}_v{shape.verify}"
    return {"name": name, "model": "verifier", "kind": "verify_phase", "depth": shape.depth, "width": shape.width,
            "verify": shape.verify, "file": f"artifacts/{name}.pt2",
            "module": kind_of(drafter).verify_phase(verifier, shape)}


def package_width(job: CompileJob) -> int:
    """O2: the widest input a model package takes - every bucket the job can lower, calibration's trees too."""
    widest = max(MODEL_PACKAGE_WIDTH, PREFILL_CHUNK, *PROBE_WIDTHS["verifier"])
    if job.shape is not None:
        widest = max(widest, job.shape.verify + 1)
    if job.calib is not None:
        widest = max(widest, 1 + job.calib.max_depth * max(job.calib.widths))
    return widest


def lower_model_packages(w: BundleWriter, loaded: dict, widths: dict[str, list[int]], job: CompileJob,
                         log) -> list[dict]:
    """O2: one package per model (lowered the first time the model is asked for) behind all its buckets."""
    buckets, drafter = [], loaded["drafter"].graph
    kind = kind_of(drafter)
    for name, model in loaded.items():
        rel = f"artifacts/{name}.pt2"
        if widths[name] and not w.path(rel).exists():
            if name == "drafter" and kind.head:  # lowered from forward_embedded
                lower_head_model(model.graph, package_width(job), job.max_seq, w.path(rel), job.device, job.opt)
            else:
                lower_model(model.graph, package_width(job), job.max_seq, w.path(rel), job.device, job.opt,
                            kind.features_package(name, job.opt), shared_table=kind.package_inputs(name, drafter))
            log(f"lowered {name} at every width 1..{package_width(job)}")
        buckets += [{"name": bucket_name(name, width), "model": name, "kind": "forward", "width": width, "file": rel}
                    for width in widths[name]]
    return buckets


def lower_forward_buckets(w: BundleWriter, loaded: dict, widths: dict[str, list[int]], job: CompileJob,
                          log) -> list[dict]:
    if job.opt == "O2":
        return lower_model_packages(w, loaded, widths, job, log)
    buckets, rank = [], rank_world()[0]
    for name, model in loaded.items():
        split = job.tp > 1 and name == "verifier"  # each rank lowers its slice; rank 0 the replicated drafter
        for width in widths[name]:
            record = {"name": bucket_name(name, width), "model": name, "kind": "forward", "width": width,
                      "file": f"artifacts/{bucket_name(name, width)}.pt2"}
            if split:
                record.update(rank=rank, file=split_file(record["file"], rank))
            if job.backend == "tensorrt":
                lower_bucket_tensorrt(model.graph, width, job.max_seq, w.path(record["file"]))
            elif split or rank == 0:
                lower_bucket(model.graph, width, job.max_seq, w.path(record["file"]), job.device, job.opt)
            buckets.append(record)
            log(f"lowered {name} W={width}")
    barrier()  # every rank's packages are written before any rank loads one
    return buckets


def lower_phases(w: BundleWriter, loaded: dict, shape: TreeShape, job: CompileJob, log) -> list[dict]:
    """The fused draft phase and greedy verify phase for the tree shape."""
    rank = rank_world()[0]
    draft = draft_phase_bucket(shape, loaded["drafter"].graph, loaded["verifier"].graph.cfg.vocab_size)
    module = draft.pop("module")
    if rank == 0:  # the drafter is replicated: one package for every rank
        lower_draft_phase(module, job.max_seq, w.path(draft["file"]), job.device, job.opt)
    log(f"lowered the draft phase D={shape.depth} W={shape.width}")
    verify = verify_phase_bucket(shape, loaded["verifier"].graph, loaded["drafter"].graph)
    if job.tp > 1:  # the verifier's slice, collectives inside: one package per rank
        verify.update(rank=rank, file=split_file(verify["file"], rank))
    lower_verify_phase(verify.pop("module"), shape.n_nodes, job.max_seq, w.path(verify["file"]), job.device,
                       job.opt)
    log(f"lowered the verify phase V={shape.verify}")
    barrier()
    return [draft, verify]


def lower_frozen_draft_phases(root: Path, loaded: dict, shapes: list[TreeShape], job: CompileJob,
                              log) -> list[dict]:
    """O2: the draft phase at each (D, W) of `shapes` as one package under `root` (the bundle's, or calibration's
    scratch folder) with the drafter's weights frozen in, where the drafter's kind compiles one (an EAGLE-3 head);
    else nothing (the phase runs eagerly around the drafter's package)."""
    drafter, records = loaded["drafter"].graph, []
    kind, vocab = kind_of(drafter), loaded["verifier"].graph.cfg.vocab_size
    for depth, width in dict.fromkeys((s.depth, s.width) for s in shapes):
        shape = TreeShape(depth, width, 1)  # drafting reads D and W only
        phase = kind.frozen_draft_phase(drafter, shape, vocab, drafter.n_slots - 1)
        if phase is None:  # the kind compiles none, at any shape
            log(f"the draft phase runs eagerly around {kind.description}'s package")
            return []
        records.append(draft_phase_record(shape))
        path = root / records[-1]["file"]
        path.parent.mkdir(parents=True, exist_ok=True)
        lower_frozen_draft_phase(phase, job.max_seq, path, job.device, job.opt)
        log(f"lowered the draft phase D={depth} W={width} with the drafter's weights frozen in")
    return records


def forward_packages(root: Path, buckets: list[dict], model: str) -> dict[int, Path]:
    return {b["width"]: root / b["file"] for b in buckets if b["model"] == model and b["kind"] == "forward"}


def compiled_decoder(root: Path, loaded: dict, compiled: dict[str, CompiledModel], buckets: list[dict],
                     shape: TreeShape, job: CompileJob) -> SpeculativeDecoder:
    """The decoder the runtime will build from these buckets (for profiling)."""
    if job.opt == "O2":  # the draft phase's package where the drafter's kind has one, else eager phases
        v, d = loaded["verifier"].graph, loaded["drafter"].graph
        drafts = {(b["depth"], b["width"]): b for b in buckets if b["kind"] == "draft_phase"}
        draft = drafts.get((shape.depth, shape.width))
        runner = draft and frozen_draft_runner(root / draft["file"], d, shape, v.cfg.vocab_size)
        return speculative_decoder(compiled["verifier"], compiled["drafter"], loaded["verifier"].layout, shape,
                                   draft_phase=runner)
    draft, verify = (next(b for b in buckets if b["kind"] == kind) for kind in ("draft_phase", "verify_phase"))
    v, d = loaded["verifier"].graph, loaded["drafter"].graph
    draft_runner = load_bucket(root / draft["file"], kind_of(d).draft_phase(d, shape, v.cfg.vocab_size, job.max_seq))
    verify_runner = load_bucket(root / verify["file"], kind_of(d).verify_phase(v, shape))
    return speculative_decoder(compiled["verifier"], compiled["drafter"], loaded["verifier"].layout, shape,
                               draft_phase=draft_runner, verify_phase=verify_runner)
