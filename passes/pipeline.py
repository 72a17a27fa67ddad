"""`yggc compile`: the compile as a list of passes (PASSES), each saying what it reads and writes, run in order
over one CompileState; the progress bar counts passes, so its total is the length of the list a job runs.

load the pair -> copy the checkpoints -> lower forward buckets -> [with --calib: profile them, calibrate, choose the
tree shape by the objective -> train the depth predictor -> lower the plan's buckets] -> lower the draft/verify
phases (O1; at O2 the draft phase where the drafter's kind compiles one) -> profile -> [decode check] -> price the
stage plans (passes/plan.py) -> write the bundle (atomic). At O2 each model is lowered once, at every width
(passes/lower.py), and the other phases run eagerly.
"""
from __future__ import annotations

import tempfile
import time
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

from safetensors.torch import save_file
from tqdm import tqdm

from ..bundle.machine import device_kind
from ..bundle.manifest import OptLevel
from ..errors import YggcError
from ..plan.bundle_plan import AdaptivePlan, BundlePlan
from ..plan.bundle_profile import Profile, iteration_cost
from ..plan.objective import StageCosts
from ..plan.shape import TreeShape
from ..runtime import loading
from ..runtime.autoregressive import AutoregressiveDecoder
from ..runtime.drafters import (
    check_drafter,
    compiled_model,
    kind_of,
    kind_of_folder,
    load_drafter,
    speculative_decoder,
)
from ..runtime.drafters.suffix_branches import branches_by_default, with_suffix_branches
from ..runtime.speculative import SpeculativeDecoder
from ..runtime.tp_processes import verifier_loader
from . import package_cache, quant_linear
from .calibrate import calibrate
from .choose_shape import candidate_shapes, checked_plan, checked_sampling_plan, choose_shape, sampling_plan
from .compile_state import FIELD, Calibrated, CompilePass, CompiledPair, CompileState, LoadedPair, Log, Widths
from .contention import contention_line, measure_until_quiet
from .decode_check import check_prompts, decode_check
from .drafter_lowering import lowering_of, lowering_of_folder
from .job import CompileJob
from .kept_weights import stores_weights
from .load_probe import probe_load
from .lower_buckets import (
    bucket_widths,
    compiled_decoder,
    forward_packages,
    lower_forward_buckets,
    lower_frozen_draft_phases,
    lower_phases,
    lowered_widths,
    package_width,
)
from .plan import plan_record
from .profile import (
    drafter_steps,
    host_stage_ms,
    phase_profile,
    profile_context,
    profile_forward,
    profile_models,
)
from .tensor_parallel_bundle import bundle_writer, every_rank
from .toolchain import building_with, configured_compiler, loadable_compiler
from .train_predictor import train_policy
from .write_bundle import BundleWriter

__all__ = ["CompileJob", "compile_bundle", "PASSES"]


# The shape calibration times whole to price the host glue: small, so the verifier's fitted curve is close to its
# measured points there (at the widest candidate the curve's misfit would pass for glue), and two drafter calls.
GLUE_PROBE = TreeShape(2, 2, 3)


def calibrated_shape(loaded: LoadedPair, compiled: CompiledPair, job: CompileJob, log) -> Calibrated:
    """Profile the forward buckets, decode the calibration text, rank shapes."""
    spec, layout = job.calib, loaded.verifier.layout
    if loaded.verifier.tokenizer is None:
        raise YggcError(f"{job.verifier_dir} has no tokenizer.json, which --calib needs to read the text")
    lowering = lowering_of(compiled.drafter)  # an EAGLE-3 head's steps through its O2 package if it has one
    timed = replace(compiled, drafter=lowering.profiled_drafter(compiled.drafter))
    widths = Widths(sorted(compiled.verifier.runners),  # a drafter without forward buckets: its probe widths
                    list(lowering.probe_widths) or sorted(compiled.drafter.runners))
    forward = profile_forward(timed, widths, layout, job.profile_repeats)
    log("profiled the forward buckets")
    samples, record = calibrate(compiled.verifier, compiled.drafter, layout, loaded.verifier.tokenizer,
                                spec, log)
    candidates = candidate_shapes(samples, spec.max_depth, spec.pin_depth, spec.pin_verify)
    largest = max(candidates, key=lambda s: (s.n_nodes, s.verify))  # host stages priced at their dearest
    host = host_stage_ms(largest, loaded.verifier.graph.cfg.vocab_size, job.profile_repeats, compiled.verifier)
    phases = None
    if job.opt == OptLevel.O2:  # time a small shape's phases whole for the host glue, drafting as the runtime will
        probe = GLUE_PROBE if spec.max_depth >= GLUE_PROBE.depth else TreeShape(1, 2, 2)
        with tempfile.TemporaryDirectory(prefix="yggc-probe-") as scratch:  # the package cache keeps the phase
            packages = lower_frozen_draft_phases(Path(scratch), loaded, [probe], job, log)
            decoder = compiled_decoder(Path(scratch), loaded, compiled, packages, probe, job)
            phases = phase_profile(decoder, job.profile_repeats, drafter_steps(timed, widths))
        how = "through a draft phase package" if packages else "eagerly"
        log(f"timed the phases at {probe} for the host glue, drafting {how}")
    costs = StageCosts.from_profile(Profile.measured(profile_context(layout), forward, host, phases=phases))
    record["glue_ms"] = [round(ms, 4) for ms in costs.glue_ms]  # per drafter call, per verify phase
    shape, plan = choose_shape(candidates, costs)
    log(f"chose {shape} "
        f"(estimated {plan.objective.speedup:.2f}x)")
    if spec.temperature > 0:  # a second plan, for sampling at that temperature
        sampled, record["sampling"] = calibrate(compiled.verifier, compiled.drafter, layout,
                                                loaded.verifier.tokenizer, spec, log, sampled=True)
        plan = replace(plan, sampling=sampling_plan(sampled, record["sampling"], costs, spec))
        best = plan.sampling.shape
        log(f"chose {best} for T={spec.temperature:g} "
            f"(estimated {plan.sampling.objective.speedup:.2f}x)")
    return Calibrated(shape, plan, record, forward, candidates, samples, costs)


def depth_predictor(w: BundleWriter, cal: Calibrated, job: CompileJob, log) -> AdaptivePlan:
    """Train the draft-depth predictor where the runtime can switch shapes per iteration (eager phases
    around O2 packages) -> plan.json's "adaptive" record."""
    if job.opt != OptLevel.O2 or job.calib.pin_depth is not None:
        log("depth predictor: not trained (it needs --opt O2 and a free --depth)")
        return AdaptivePlan(False, "per-iteration shapes need --opt O2 and a free depth")
    policy, record = train_policy(cal.samples, cal.candidates, cal.shape.width, cal.costs.iteration_ms)
    if policy is not None:
        save_file(policy.predictor.state_dict(), w.path("predictor.safetensors"))
    held = record.held_out_tokens_per_ms
    log(f"depth predictor: {'used' if policy else 'not used'}"
        + (f" ({held.adaptive:.4f} vs {held.best_constant:.4f} tokens/ms held out, an oracle "
           f"{held.oracle:.4f})" if held else ""))
    return record


def load_checked_pair(job: CompileJob) -> LoadedPair:
    """The drafter kind's target check (an EAGLE-3 head compiles with the Inductor backend on a CPU), the pair
    check, then both models."""
    lowering_of_folder(job.drafter_dir).check_target(job.drafter_dir, job.device, job.backend)
    check_drafter(job.verifier_dir, job.drafter_dir)
    verifier = verifier_loader(job.tp)(job.verifier_dir, job.dtype, job.max_seq, job.device)  # a TP rank's slice
    if job.weights:  # a block format, or the checkpoint's own
        quant_linear.load_blocks(verifier.graph, job.verifier_dir, job.weights)
    drafter = load_drafter(job.drafter_dir, verifier, job.dtype, job.device)
    kind_of_folder(job.drafter_dir).fuse_in_verifier(verifier, drafter, job.opt)
    return LoadedPair(verifier, drafter)


def decode_checked(plan: BundlePlan, profile: Profile, decoder: SpeculativeDecoder, loaded: LoadedPair,
                   compiled: CompiledPair, job: CompileJob, log) -> BundlePlan:
    """The plan after the decode checks (passes/decode_check.py): the greedy tree's alone (what the estimate is
    checked against) and, on a CPU and one process, with the text's suffix branches (what greedy requests decode by
    default, so the greedy verdict follows it); then the sampling plan's at the calibrated temperature."""
    layout = loaded.verifier.layout
    ar, prompts = AutoregressiveDecoder(compiled.verifier, layout), check_prompts(loaded.verifier.tokenizer, job.calib)
    decoded = decode_check(decoder, ar, prompts)
    log(f"decoded calibration text: {plan.shape.depth}x{plan.shape.width}x{plan.shape.verify} at "
        f"{decoded.tree_tpot_ms:.3f} ms/token, the verifier alone at {decoded.ar_tpot_ms:.3f}")
    with_suffix = None
    if branches_by_default(device_kind(job.device), job.tp, sampling=False):  # what greedy requests decode
        with_suffix = decode_check(with_suffix_branches(decoder, iteration_ms=iteration_cost(profile)), ar, prompts)
        log(f"with suffix branches (greedy requests' default): {with_suffix.tree_tpot_ms:.3f} ms/token, the verifier "
            f"alone at {with_suffix.ar_tpot_ms:.3f}")
    plan = checked_plan(plan, profile, decoded, log, with_suffix)
    if plan.sampling is not None:
        shape = plan.sampling.shape
        sampled = speculative_decoder(compiled.verifier, compiled.drafter, layout, shape)
        decoded = decode_check(sampled, ar, prompts, temperature=job.calib.temperature)
        log(f"decoded calibration text at T={job.calib.temperature:g}: {shape.depth}x{shape.width}x{shape.verify} at "
            f"{decoded.tree_tpot_ms:.3f} ms/token, the verifier alone at {decoded.ar_tpot_ms:.3f}")
        plan = replace(plan, sampling=checked_sampling_plan(plan.sampling, decoded, log))
    return plan


def package_compiler(job: CompileJob, log) -> str:
    """The C++ compiler that builds the packages: on CUDA, the first whose packages load here (toolchain.py)."""
    if device_kind(job.device) == "cuda" and job.backend != "tensorrt":
        return loadable_compiler("cuda", log=log)
    return configured_compiler()




def load_pass(s: CompileState, log: Log) -> str:
    s.head = kind_of_folder(s.job.drafter_dir).head
    s.widths = bucket_widths(s.job.shape, probe=s.job.calib is not None and s.job.calib.probe, head=s.head,
                             opt=s.job.opt)
    s.loaded = load_checked_pair(s.job)
    return "loaded and checked the pair"


def copy_pass(s: CompileState, log: Log) -> str:
    """Open the bundle (written aside, renamed into place by the last pass) and copy what the runtime reads."""
    s.cxx = package_compiler(s.job, s.log)
    s.writer = s.stack.enter_context(bundle_writer(s.job.out, s.job.overwrite))
    s.stack.enter_context(building_with(s.cxx))
    s.packages = s.stack.enter_context(package_cache.using(package_cache.cache_root()))
    kept = {name: stores_weights(name, s.job.opt, s.widths) for name, _ in s.loaded.items()}
    for name, model in s.loaded.items():
        s.writer.copy_model_dir(model.path, name, weights=kept[name])
    lowering_of(s.loaded.drafter).keep_beside_packages(s.writer, s.loaded, kept, s.job)
    return "copied the checkpoints" + ("" if all(kept.values()) else " (weights only where no package carries them)")


def lower_pass(s: CompileState, log: Log) -> None:
    job = s.job
    s.buckets = lower_forward_buckets(s.writer, s.loaded, s.widths, job, log)
    if device_kind(job.device) == "cuda" and job.backend != "tensorrt" and s.buckets:
        probe_load(s.writer.root / s.buckets[0].file, "cuda")  # a loader crash is one line, not a dead compile
    width, drafter = package_width(job) if job.opt == OptLevel.O2 else 0, s.loaded.drafter.graph
    s.compiled = CompiledPair(*(compiled_model(name, m.graph, forward_packages(s.writer.root, s.buckets, name),
                                               drafter, job.opt, job.backend, width)
                                for name, m in s.loaded.items()))


def calibrate_pass(s: CompileState, log: Log) -> None:
    s.cal = calibrated_shape(s.loaded, s.compiled, s.job, log)
    s.shape, s.plan = s.cal.shape, s.cal.plan
    s.writer.write_json("calibration.json", s.cal.record)


def predictor_pass(s: CompileState, log: Log) -> None:
    s.adaptive = depth_predictor(s.writer, s.cal, s.job, log)


def plan_buckets_pass(s: CompileState, log: Log) -> str | None:
    """The forward buckets the chosen shapes call that are not lowered yet (O1; an O2 package serves every width)."""
    shapes = [s.shape]
    if s.plan.sampling is not None:  # the sampling plan's verify and draft widths too (O1: eager otherwise)
        shapes.append(s.plan.sampling.shape)
    wanted = [bucket_widths(shape, head=s.head, opt=s.job.opt) for shape in shapes]
    missing = Widths(*(sorted({w for ws in wanted for w in ws[name]} - set(model.runners))
                       for name, model in s.compiled.items()))
    lowered = []  # what lowering said: nothing when the packages serve every width already
    added = lower_forward_buckets(s.writer, s.loaded, missing, s.job, lambda msg: (lowered.append(msg), log(msg)))
    for name, model in s.compiled.items():
        model.add_buckets(forward_packages(s.writer.root, added, name))
    s.buckets += added
    return None if lowered else "every width the plan calls is compiled already"


def phases_pass(s: CompileState, log: Log) -> None:
    s.buckets += lower_phases(s.writer, s.loaded, s.shape, s.job, log)


def frozen_phase_pass(s: CompileState, log: Log) -> None:
    """The plan's draft phase, and the depth predictor's where it is used, as packages (O2)."""
    policy = list(s.adaptive.shapes) if s.adaptive and s.adaptive.used else []
    s.buckets += lower_frozen_draft_phases(s.writer.root, s.loaded, [s.shape, *policy], s.job, log)


def profile_pass(s: CompileState, log: Log) -> str:
    """Profile every stage, again while other programs take CPU time (passes/contention.py)."""
    s.decoder = compiled_decoder(s.writer.root, s.loaded, s.compiled, s.buckets, s.shape, s.job)
    timed = replace(s.compiled, drafter=lowering_of(s.compiled.drafter).profiled_drafter(s.compiled.drafter))

    widths = lowered_widths(s.buckets)

    def measure(first: bool) -> Profile:
        """The widths timed before calibration are reused on the first try; a retry times every bucket again and
        keeps only what it cannot time itself (an EAGLE-3 head's eager steps, which have no bucket)."""
        reuse = s.cal.forward if s.cal else None
        if reuse and not first:
            reuse = {name: entry for name, entry in reuse.items() if not widths[name]}
        return profile_models(timed, widths, s.loaded.verifier.layout, s.shape, s.job.profile_repeats, log,
                              s.decoder, reuse)

    s.profile = measure_until_quiet(measure, log)
    if s.profile.contention:
        s.log(f"yggc compile: warning: {contention_line(s.profile.contention)}")
    s.profile.save(s.writer)
    return f"profiled {s.shape}: stages and phases"


def decode_check_pass(s: CompileState, log: Log) -> None:
    s.plan = decode_checked(s.plan, s.profile, s.decoder, s.loaded, s.compiled, s.job, log)


def stage_plan_pass(s: CompileState, log: Log) -> str:
    schedule = plan_record(s.shape, s.profile, s.cal.candidates if s.cal else None)
    s.plan = replace(s.plan or BundlePlan(s.shape), schedule=schedule)
    return (f"priced the stage plans: {schedule.executed.variant} ({schedule.executed.iteration_ms:.2f} ms per "
            "iteration)")


def write_pass(s: CompileState, log: Log) -> str:
    job = s.job
    s.writer.write_json("plan.json", replace(s.plan, adaptive=s.adaptive).to_json())
    dtype = loading.dtype_label(job.dtype)
    s.writer.finish({"device": job.device, "dtype": dtype, "max_seq": job.max_seq,
                     "buckets": [b.to_json() for b in every_rank(s.buckets, job.tp)],
                     "extra": {"opt": job.opt, "backend": job.backend,
                               "weights": quant_linear.weights_label(s.loaded.verifier.graph, dtype),
                               "block_formats": quant_linear.block_formats(s.loaded.verifier.graph),
                               "package_width": package_width(job) if job.opt == OptLevel.O2 else 0, "tp": job.tp,
                               "drafter": kind_of(s.loaded.drafter).record(s.loaded.drafter.graph),
                               "cxx": s.cxx,
                               "compile_s": round(time.perf_counter() - s.started, 1)}})
    return "wrote the bundle"


def calibrated(job: CompileJob) -> bool:
    return job.calib is not None


F = FIELD
PASSES = (
    CompilePass(load_pass, (F.job,), (F.head, F.widths, F.loaded)),
    CompilePass(copy_pass, (F.loaded, F.widths), (F.writer, F.cxx, F.packages)),
    CompilePass(lower_pass, (F.loaded, F.widths, F.writer), (F.buckets, F.compiled)),
    CompilePass(calibrate_pass, (F.loaded, F.compiled), (F.cal, F.shape, F.plan), calibrated),
    CompilePass(predictor_pass, (F.cal,), (F.adaptive,), calibrated),
    CompilePass(plan_buckets_pass, (F.shape, F.plan, F.compiled), (F.buckets, F.compiled), calibrated),
    CompilePass(phases_pass, (F.loaded, F.shape), (F.buckets,), lambda job: job.opt == OptLevel.O1),
    CompilePass(frozen_phase_pass, (F.loaded, F.shape), (F.buckets,), lambda job: job.opt == OptLevel.O2),
    CompilePass(profile_pass, (F.compiled, F.buckets, F.shape), (F.decoder, F.profile)),
    CompilePass(decode_check_pass, (F.plan, F.profile, F.decoder), (F.plan,), calibrated),
    CompilePass(stage_plan_pass, (F.shape, F.profile), (F.plan,)),
    CompilePass(write_pass, (F.plan, F.buckets), ()),
)


def compile_bundle(job: CompileJob, log=print) -> Path:
    """Run the passes of PASSES that apply to `job` in order and return the bundle's path. On a terminal one
    progress bar counts the passes; elsewhere each pass's lines are logged as `yggc compile: [n/N] ...`. Nothing
    is left at job.out unless the last pass completes (the writer renames the finished bundle into place)."""
    passes = [p for p in PASSES if p.runs_for(job)]
    with ExitStack() as stack:
        state = CompileState(job, log, stack, shape=job.shape)
        bar = stack.enter_context(tqdm(total=len(passes), desc="yggc compile", unit="pass", disable=None))
        for n, compile_pass in enumerate(passes, 1):
            def pass_log(msg: str, n: int = n) -> None:
                bar.set_postfix_str(msg)
                if bar.disable:  # not a terminal (a log file, CI): one line per message instead of a bar
                    log(f"yggc compile: [{n}/{len(passes)}] {msg} ({time.perf_counter() - state.started:.0f} s)")

            closing = compile_pass.run(state, pass_log)
            if closing is not None:
                pass_log(closing)
            bar.update(1)
    cached = state.packages.hits if state.packages else 0
    log(f"yggc: wrote {job.out} in {time.perf_counter() - state.started:.1f} s"
        + (f" ({cached} package{'s' * (cached > 1)} from {state.packages.root})" if cached else ""))
    return job.out
