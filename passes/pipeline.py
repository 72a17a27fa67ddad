"""`yggc compile`: the passes in order, each reported on one progress bar.

load -> check pair -> lower forward buckets -> [with --calib: profile them -> calibrate -> choose the
tree shape by the objective -> train the depth predictor (O2) -> lower the shape's buckets] -> lower
the draft/verify phases (O1) -> profile -> price the stage plans (passes/plan.py) -> write bundle
(atomic).
At O2 each model is lowered once, at every width (passes/lower.py), and the phases run eagerly.
"""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file
from tqdm import tqdm

from ..bundle.machine import device_kind
from ..errors import YggcError
from ..plan.objective import StageCosts
from ..plan.shape import HEAD_WIDTH, TreeShape
from ..runtime import models
from ..runtime.autoregressive import PREFILL_CHUNK, AutoregressiveDecoder
from ..runtime.buckets import CompiledModel, bucket_name, load_bucket
from ..runtime.drafters import (
    check_drafter,
    draft_phase,
    drafter_kind,
    drafter_record,
    features_package,
    fuse_in_verifier,
    is_head,
    load_drafter,
    package_inputs,
    speculative_decoder,
    verify_phase,
)
from ..runtime.speculative import SpeculativeDecoder
from ..runtime.tensor_parallel import rank_world, verifier_loader
from .calibrate import CalibrationSpec, calibrate
from .choose_shape import candidate_shapes, checked_plan, checked_sampling_plan, choose_shape, sampling_plan
from .decode_check import check_prompts, decode_check
from .kept_weights import keep_head_embedding, keep_head_fusion, stores_weights
from .load_probe import probe_load
from .lower import lower_bucket, lower_draft_phase, lower_head_model, lower_model, lower_verify_phase
from .lower_tensorrt import lower_bucket_tensorrt
from .plan import plan_record
from .profile import HeadSteps, host_stage_ms, phase_profile, profile_forward, profile_models, profiled_widths
from .tensor_parallel_bundle import barrier, bundle_writer, every_rank, split_file
from .toolchain import building_with, configured_compiler, loadable_compiler
from .train_predictor import train_policy
from .write_bundle import BundleWriter

# extra widths lowered and profiled before calibration, so the cost curves have points between 2 and 32
PROBE_WIDTHS = {"verifier": (8, 16), "drafter": (4, 8)}
HEAD_PROBE_WIDTHS = (1, 4, 8)  # an EAGLE-3 head's eager steps, timed for the objective
MODEL_PACKAGE_WIDTH = 64  # O2: widths 1..64 (or the widest bucket the job can ask for) share one package


@dataclass(frozen=True)
class CompileJob:
    verifier_dir: Path
    drafter_dir: Path
    out: Path
    shape: TreeShape | None  # None: chosen by calibration
    dtype: torch.dtype = torch.float32
    max_seq: int = 1024
    device: str = "cpu"
    overwrite: bool = False
    profile_repeats: int = 20
    opt: str = "O1"  # see lower.INDUCTOR_CONFIGS
    calib: CalibrationSpec | None = None
    backend: str = "inductor"  # forward buckets: "inductor", or "tensorrt" (CUDA; phases stay Inductor)
    tp: int = 1  # tensor-parallel ranks of the verifier (this process is one of them; O1, a fixed shape)

    def __post_init__(self):
        if (self.shape is None) == (self.calib is None):
            raise ValueError("a compile job needs exactly one of a fixed tree shape and a calibration spec")


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


def draft_phase_bucket(shape: TreeShape, drafter, vocab: int) -> dict:
    name = f"draft_d{shape.depth}_w{shape.width}"
    return {"name": name, "model": "drafter", "kind": "draft_phase", "depth": shape.depth, "width": shape.width,
            "file": f"artifacts/{name}.pt2", "module": draft_phase(drafter, shape, vocab, drafter.n_slots - 1)}


def verify_phase_bucket(shape: TreeShape, verifier, drafter) -> dict:
    name = f"verify_d{shape.depth}_w{shape.width}_v{shape.verify}"
    return {"name": name, "model": "verifier", "kind": "verify_phase", "depth": shape.depth, "width": shape.width,
            "verify": shape.verify, "file": f"artifacts/{name}.pt2",
            "module": verify_phase(verifier, drafter, shape)}


def package_width(job: CompileJob) -> int:
    """O2: the widest input a model package takes - every bucket the job can lower, calibration's trees too."""
    widest = max(MODEL_PACKAGE_WIDTH, PREFILL_CHUNK, *PROBE_WIDTHS["verifier"])
    if job.shape is not None:
        widest = max(widest, job.shape.verify + 1)
    if job.calib is not None:
        widest = max(widest, 1 + job.calib.max_depth * max(job.calib.widths))
    return widest


def lower_model_packages(w: BundleWriter, loaded: dict, widths: dict[str, list[int]], job: CompileJob,
                         step) -> list[dict]:
    """O2: one package per model (lowered the first time the model is asked for) behind all its buckets."""
    buckets = []
    for name, model in loaded.items():
        rel = f"artifacts/{name}.pt2"
        if widths[name] and not w.path(rel).exists():
            if is_head(model.graph):
                lower_head_model(model.graph, package_width(job), job.max_seq, w.path(rel), job.device, job.opt)
            else:
                lower_model(model.graph, package_width(job), job.max_seq, w.path(rel), job.device, job.opt,
                            features_package(name, job.opt, loaded["drafter"].graph),
                            shared_table=package_inputs(name, loaded["drafter"].graph))
            step(f"lowered {name} at every width 1..{package_width(job)}")
        buckets += [{"name": bucket_name(name, width), "model": name, "kind": "forward", "width": width, "file": rel}
                    for width in widths[name]]
    return buckets


def lower_forward_buckets(w: BundleWriter, loaded: dict, widths: dict[str, list[int]], job: CompileJob,
                          step) -> list[dict]:
    if job.opt == "O2":
        return lower_model_packages(w, loaded, widths, job, step)
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
            step(f"lowered {name} W={width}")
    barrier()  # every rank's packages are written before any rank loads one
    return buckets


def lower_phases(w: BundleWriter, loaded: dict, shape: TreeShape, job: CompileJob, step) -> list[dict]:
    """The fused draft phase and greedy verify phase for the tree shape."""
    rank = rank_world()[0]
    draft = draft_phase_bucket(shape, loaded["drafter"].graph, loaded["verifier"].graph.cfg.vocab_size)
    module = draft.pop("module")
    if rank == 0:  # the drafter is replicated: one package for every rank
        lower_draft_phase(module, job.max_seq, w.path(draft["file"]), job.device, job.opt)
    step(f"lowered the draft phase D={shape.depth} W={shape.width}")
    verify = verify_phase_bucket(shape, loaded["verifier"].graph, loaded["drafter"].graph)
    if job.tp > 1:  # the verifier's slice, collectives inside: one package per rank
        verify.update(rank=rank, file=split_file(verify["file"], rank))
    lower_verify_phase(verify.pop("module"), shape.n_nodes, job.max_seq, w.path(verify["file"]), job.device,
                       job.opt)
    step(f"lowered the verify phase V={shape.verify}")
    barrier()
    return [draft, verify]


def forward_packages(root: Path, buckets: list[dict], model: str) -> dict[int, Path]:
    return {b["width"]: root / b["file"] for b in buckets if b["model"] == model and b["kind"] == "forward"}


def compiled_decoder(root: Path, loaded: dict, compiled: dict[str, CompiledModel], buckets: list[dict],
                     shape: TreeShape, job: CompileJob) -> SpeculativeDecoder:
    """The decoder the runtime will build from these buckets (for profiling)."""
    if job.opt == "O2":  # eager phases around the compiled models
        return speculative_decoder(compiled["verifier"], compiled["drafter"], loaded["verifier"].layout, shape)
    draft, verify = (next(b for b in buckets if b["kind"] == kind) for kind in ("draft_phase", "verify_phase"))
    v, d = loaded["verifier"].graph, loaded["drafter"].graph
    draft_runner = load_bucket(root / draft["file"], draft_phase(d, shape, v.cfg.vocab_size, job.max_seq))
    verify_runner = load_bucket(root / verify["file"], verify_phase(v, d, shape))
    return speculative_decoder(compiled["verifier"], compiled["drafter"], loaded["verifier"].layout, shape,
                               draft_phase=draft_runner, verify_phase=verify_runner)


# The shape calibration times whole to price the host glue: small, so the verifier's fitted curve is close to its
# measured points there (at the widest candidate the curve's misfit would pass for glue), and two drafter calls.
GLUE_PROBE = TreeShape(2, 2, 3)


@dataclass(frozen=True)
class Calibrated:
    shape: TreeShape
    plan: dict
    record: dict                          # calibration.json
    forward: dict                         # the forward profile, reused by the final profile
    candidates: dict[TreeShape, float]    # tokens per iteration of every priced shape
    samples: list                         # the calibration trees (TreeSample)
    costs: StageCosts                     # the cost curves the shapes were ranked with


def calibrated_shape(loaded: dict, compiled: dict[str, CompiledModel], job: CompileJob, step) -> Calibrated:
    """Profile the forward buckets, decode the calibration text, rank shapes."""
    spec, layout = job.calib, loaded["verifier"].layout
    if loaded["verifier"].tokenizer is None:
        raise YggcError(f"{job.verifier_dir} has no tokenizer.json, which --calib needs to read the text")
    widths = {name: sorted(m.runners) for name, m in compiled.items()}
    timed = dict(compiled)
    if is_head(compiled["drafter"]):  # its steps at each width, through its O2 package if it has one
        timed["drafter"], widths["drafter"] = HeadSteps(compiled["drafter"]), list(HEAD_PROBE_WIDTHS)
    forward = profile_forward(timed, widths, layout, job.profile_repeats)
    step("profiled the forward buckets")
    samples, record = calibrate(compiled["verifier"], compiled["drafter"], layout, loaded["verifier"].tokenizer,
                                spec, step)
    candidates = candidate_shapes(samples, spec.max_depth, spec.pin_depth, spec.pin_verify)
    largest = max(candidates, key=lambda s: (s.n_nodes, s.verify))  # host stages priced at their dearest
    host = host_stage_ms(largest, loaded["verifier"].graph.cfg.vocab_size, job.profile_repeats, compiled["verifier"])
    measured = {"models": forward, "host_ms": host}
    if job.opt == "O2":  # eager phases around the packages run any shape: time a small one whole for the host glue
        probe = GLUE_PROBE if spec.max_depth >= GLUE_PROBE.depth else TreeShape(1, 2, 2)
        decoder = speculative_decoder(compiled["verifier"], compiled["drafter"], layout, probe)
        measured.update(phase_profile(decoder, job.profile_repeats))
    costs = StageCosts.from_profile(measured)
    record["glue_ms"] = [round(ms, 4) for ms in costs.glue_ms]  # per drafter call, per verify phase
    shape, plan = choose_shape(candidates, costs)
    step(f"chose D={shape.depth} W={shape.width} V={shape.verify} "
         f"(estimated {plan['objective']['speedup']:.2f}x)")
    if spec.temperature > 0:  # a second plan, for sampling at that temperature
        sampled, record["sampling"] = calibrate(compiled["verifier"], compiled["drafter"], layout,
                                                loaded["verifier"].tokenizer, spec, step, sampled=True)
        plan["sampling"] = sampling_plan(sampled, record["sampling"], costs, spec)
        best = plan["sampling"]
        step(f"chose D={best['depth']} W={best['width']} V={best['verify']} for T={spec.temperature:g} "
             f"(estimated {best['objective']['speedup']:.2f}x)")
    return Calibrated(shape, plan, record, forward, candidates, samples, costs)


def depth_predictor(w: BundleWriter, cal: Calibrated, job: CompileJob, step) -> dict:
    """Train the draft-depth predictor where the runtime can switch shapes per iteration (eager phases
    around O2 packages) -> plan.json's "adaptive" record."""
    if job.opt != "O2" or job.calib.pin_depth is not None:
        step("depth predictor: not trained (it needs --opt O2 and a free --depth)")
        return {"used": False, "reason": "per-iteration shapes need --opt O2 and a free depth"}
    policy, record = train_policy(cal.samples, cal.candidates, cal.shape.width, cal.costs.iteration_ms)
    if policy is not None:
        save_file(policy.predictor.state_dict(), w.path("predictor.safetensors"))
        record.update(policy.to_record())
    held = record.get("held_out_tokens_per_ms", {})
    step(f"depth predictor: {'used' if policy else 'not used'}"
         + (f" ({held['adaptive']:.4f} vs {held['best_constant']:.4f} tokens/ms held out, an oracle "
            f"{held['oracle']:.4f})" if held else ""))
    return record


def load_checked_pair(job: CompileJob) -> dict[str, models.LoadedModel]:
    """The pair check, then both models; an EAGLE-3 head compiles with the Inductor backend on a CPU."""
    if drafter_kind(job.drafter_dir) == "eagle3" and (job.device != "cpu" or job.backend != "inductor"):
        raise YggcError(f"{job.drafter_dir} is an EAGLE-3 head: bundles with heads are CPU-only for now; "
                        "compile with --device cpu (the inductor backend)")
    check_drafter(job.verifier_dir, job.drafter_dir)
    verifier = verifier_loader(job.tp)(job.verifier_dir, job.dtype, job.max_seq, job.device)  # a TP rank's slice
    drafter = load_drafter(job.drafter_dir, verifier, job.dtype, job.device)
    fuse_in_verifier(verifier, drafter, job.opt)
    return {"verifier": verifier, "drafter": drafter}


def decode_checked(plan: dict, profile: dict, decoder: SpeculativeDecoder, loaded: dict,
                   compiled: dict[str, CompiledModel], job: CompileJob, step) -> dict:
    """The plan after the decode checks (passes/decode_check.py): the greedy tree's, then the sampling plan's at
    the calibrated temperature; each verdict follows its decode."""
    layout = loaded["verifier"].layout
    ar, prompts = AutoregressiveDecoder(compiled["verifier"], layout), check_prompts(loaded["verifier"].tokenizer, job.calib)
    decoded = decode_check(decoder, ar, prompts)
    step(f"decoded calibration text: {plan['depth']}x{plan['width']}x{plan['verify']} at "
         f"{decoded['tree_tpot_ms']:.3f} ms/token, the verifier alone at {decoded['ar_tpot_ms']:.3f}")
    plan = checked_plan(plan, profile, decoded, step)
    if "sampling" in plan:
        s = plan["sampling"]
        shape = TreeShape(s["depth"], s["width"], s["verify"])
        sampled = speculative_decoder(compiled["verifier"], compiled["drafter"], layout, shape)
        decoded = decode_check(sampled, ar, prompts, temperature=job.calib.temperature)
        step(f"decoded calibration text at T={job.calib.temperature:g}: {shape.depth}x{shape.width}x{shape.verify} at "
             f"{decoded['tree_tpot_ms']:.3f} ms/token, the verifier alone at {decoded['ar_tpot_ms']:.3f}")
        plan["sampling"] = checked_sampling_plan(s, decoded, step)
    return plan


def package_compiler(job: CompileJob, log) -> str:
    """The C++ compiler that builds the packages: on CUDA, the first whose packages load here (toolchain.py)."""
    if device_kind(job.device) == "cuda" and job.backend != "tensorrt":
        return loadable_compiler("cuda", log=log)
    return configured_compiler()


def compile_bundle(job: CompileJob, log=print) -> Path:
    t_start = time.perf_counter()
    head = drafter_kind(job.drafter_dir) == "eagle3"
    widths = bucket_widths(job.shape, probe=job.calib is not None and job.calib.probe, head=head, opt=job.opt)
    n_buckets, o1 = sum(len(w) for w in widths.values()), job.opt == "O1"
    n_steps = 2 + (n_buckets + 2 if o1 else len(widths))  # load, write; lower each bucket + two phases, or each model
    # profile each bucket; with calibration: profile once, calibrate per width, choose, predictor, the shape's new
    # verify bucket, the decode check
    profiled = sum(len(profiled_widths(w, 0 if o1 else package_width(job))) for w in widths.values())
    n_steps += 5 + len(job.calib.widths) + (o1 and not head) if job.calib else profiled
    if job.calib and job.calib.temperature > 0:  # the sampled calibration per width, its choice, its decode check
        n_steps += len(job.calib.widths) + 2
    bar = tqdm(total=n_steps, desc="yggc compile", unit="pass", disable=None)

    done = itertools.count(1)

    def step(msg: str) -> None:
        n = next(done)
        if n > bar.total:  # a pass that reports more than planned (a speculation verdict): grow the bar
            bar.total = n
        bar.set_postfix_str(msg)
        bar.update(1)
        if bar.disable:  # not a terminal (a log file, CI): one line per step instead of a bar
            log(f"yggc compile: [{n}/{bar.total}] {msg} ({time.perf_counter() - t_start:.0f} s)")

    loaded = load_checked_pair(job)
    step("loaded and checked the pair")
    cxx = package_compiler(job, log)
    with bundle_writer(job.out, job.overwrite) as w, building_with(cxx):
        for name, model in loaded.items():
            w.copy_model_dir(model.path, name, weights=stores_weights(name, job.opt, widths))
        if head and not stores_weights("drafter", job.opt, widths):
            keep_head_fusion(w, loaded)
        if head and not stores_weights("verifier", job.opt, widths):
            keep_head_embedding(w, loaded, job.dtype, job.device, job.opt)
        buckets = lower_forward_buckets(w, loaded, widths, job, step)
        if device_kind(job.device) == "cuda" and job.backend != "tensorrt" and buckets:
            probe_load(w.root / buckets[0]["file"], "cuda")  # a loader crash is one line, not a dead compile
        width = package_width(job) if job.opt == "O2" else 0
        drafter = loaded["drafter"].graph
        compiled = {name: CompiledModel(m.graph, forward_packages(w.root, buckets, name), job.opt, job.backend, width,
                                        features_package(name, job.opt, drafter), package_inputs(name, drafter))
                    for name, m in loaded.items()}
        shape, plan, measured, candidates, adaptive = job.shape, {"source": "compile flags"}, None, None, None
        if job.calib:
            cal = calibrated_shape(loaded, compiled, job, step)
            shape, plan, measured, candidates = cal.shape, cal.plan, cal.forward, cal.candidates
            w.write_json("calibration.json", cal.record)
            adaptive = depth_predictor(w, cal, job, step)
            wanted = bucket_widths(shape, head=head, opt=job.opt)
            if "sampling" in plan:  # the sampling plan's verify and draft widths too (O1: eager otherwise)
                sampled = TreeShape(plan["sampling"]["depth"], plan["sampling"]["width"], plan["sampling"]["verify"])
                wanted = {name: sorted({*ws, *bucket_widths(sampled, head=head, opt=job.opt)[name]})
                          for name, ws in wanted.items()}
            missing = {name: [x for x in ws if x not in compiled[name].runners] for name, ws in wanted.items()}
            added = lower_forward_buckets(w, loaded, missing, job, step)
            for name, model in compiled.items():
                model.add_buckets(forward_packages(w.root, added, name))
            buckets += added
        if job.opt == "O1":
            buckets += lower_phases(w, loaded, shape, job, step)
        decoder = compiled_decoder(w.root, loaded, compiled, buckets, shape, job)
        timed = {**compiled, "drafter": HeadSteps(compiled["drafter"])} if head else compiled
        profile = profile_models(timed, lowered_widths(buckets), loaded["verifier"].layout, shape,
                                 job.profile_repeats, step, decoder, measured)
        w.write_json("profile.json", profile)
        if job.calib:
            plan = decode_checked(plan, profile, decoder, loaded, compiled, job, step)
        plan["schedule"] = plan_record(shape, profile, candidates)
        if adaptive is not None:
            plan["adaptive"] = adaptive
        w.write_json("plan.json", {"depth": shape.depth, "width": shape.width, "verify": shape.verify, **plan})
        w.finish({"device": job.device, "dtype": models.dtype_label(job.dtype), "max_seq": job.max_seq,
                  "buckets": every_rank(buckets, job.tp),
                  "extra": {"opt": job.opt, "backend": job.backend, "package_width": width, "tp": job.tp,
                            "drafter": drafter_record(loaded["drafter"].graph), "cxx": cxx,
                            "compile_s": round(time.perf_counter() - t_start, 1)}})
        step("wrote the bundle")
    bar.close()
    log(f"yggc: wrote {job.out} in {time.perf_counter() - t_start:.1f} s")
    return job.out
