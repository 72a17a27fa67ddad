"""`yggc compile`: the passes in order, each reported on one progress bar.

load -> check pair -> lower (one package per bucket) -> profile -> write bundle (atomic).
Later passes (calibrate, train predictor, choose buckets, plan) slot in between profile and write.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from .. import models
from ..autoregressive import PREFILL_CHUNK
from ..buckets import CompiledModel, bucket_name, load_bucket
from ..draft_phase import HEAD_WIDTH, DraftPhase
from ..graphs import check_pair
from ..speculative import SpeculativeDecoder, TreeShape
from ..verify_phase import GreedyVerifyPhase
from .lower import lower_bucket, lower_draft_phase, lower_verify_phase
from .profile import profile_models
from .write_bundle import BundleWriter


@dataclass(frozen=True)
class CompileJob:
    verifier_dir: Path
    drafter_dir: Path
    out: Path
    shape: TreeShape
    dtype: torch.dtype = torch.float32
    max_seq: int = 1024
    device: str = "cpu"
    overwrite: bool = False
    profile_repeats: int = 20
    opt: str = "O1"  # see lower.INDUCTOR_CONFIGS


def bucket_widths(shape: TreeShape) -> dict[str, list[int]]:
    """Widths each model is called at: prefill chunks, decode/draft steps, the head step, verify."""
    return {"verifier": sorted({1, PREFILL_CHUNK, shape.verify + 1}),
            "drafter": sorted({1, HEAD_WIDTH, shape.width, PREFILL_CHUNK})}


def draft_phase_bucket(shape: TreeShape, drafter, vocab: int) -> dict:
    name = f"draft_d{shape.depth}_w{shape.width}"
    return {"name": name, "model": "drafter", "kind": "draft_phase", "depth": shape.depth, "width": shape.width,
            "file": f"artifacts/{name}.pt2", "module": DraftPhase(drafter, shape.depth, shape.width, vocab, drafter.n_slots - 1)}


def verify_phase_bucket(shape: TreeShape, verifier) -> dict:
    name = f"verify_d{shape.depth}_w{shape.width}_v{shape.verify}"
    return {"name": name, "model": "verifier", "kind": "verify_phase", "depth": shape.depth, "width": shape.width,
            "verify": shape.verify, "file": f"artifacts/{name}.pt2",
            "module": GreedyVerifyPhase(verifier, shape.depth, shape.verify)}


def lower_forward_buckets(w: BundleWriter, loaded: dict, widths: dict[str, list[int]], job: CompileJob,
                          step) -> list[dict]:
    buckets = []
    for name, model in loaded.items():
        w.copy_model_dir(model.path, name)
        for width in widths[name]:
            rel = f"artifacts/{bucket_name(name, width)}.pt2"
            lower_bucket(model.graph, width, job.max_seq, w.path(rel), job.device, job.opt)
            buckets.append({"name": bucket_name(name, width), "model": name, "kind": "forward",
                            "width": width, "file": rel})
            step(f"lowered {name} W={width}")
    return buckets


def lower_phases(w: BundleWriter, loaded: dict, job: CompileJob, step) -> list[dict]:
    """The fused draft phase and greedy verify phase for the job's tree shape."""
    draft = draft_phase_bucket(job.shape, loaded["drafter"].graph, loaded["verifier"].graph.cfg.vocab_size)
    lower_draft_phase(draft.pop("module"), job.max_seq, w.path(draft["file"]), job.device, job.opt)
    step(f"lowered the draft phase D={job.shape.depth} W={job.shape.width}")
    verify = verify_phase_bucket(job.shape, loaded["verifier"].graph)
    lower_verify_phase(verify.pop("module"), job.shape.n_nodes, job.max_seq, w.path(verify["file"]), job.device,
                       job.opt)
    step(f"lowered the verify phase V={job.shape.verify}")
    return [draft, verify]


def compiled_decoder(root: Path, loaded: dict, buckets: list[dict], job: CompileJob) -> SpeculativeDecoder:
    """The decoder the runtime will build from these buckets (for profiling)."""
    compiled = {name: CompiledModel(m.graph, {b["width"]: root / b["file"] for b in buckets
                                              if b["model"] == name and b["kind"] == "forward"}, job.opt)
                for name, m in loaded.items()}
    draft, verify = (next(b for b in buckets if b["kind"] == kind) for kind in ("draft_phase", "verify_phase"))
    vocab = loaded["verifier"].graph.cfg.vocab_size
    draft_runner = load_bucket(root / draft["file"], DraftPhase(loaded["drafter"].graph, job.shape.depth,
                                                               job.shape.width, vocab, job.max_seq), job.opt)
    verify_runner = load_bucket(root / verify["file"], GreedyVerifyPhase(loaded["verifier"].graph, job.shape.depth,
                                                                        job.shape.verify), job.opt)
    return SpeculativeDecoder(compiled["verifier"], compiled["drafter"], loaded["verifier"].layout, job.shape,
                              draft_phase=draft_runner, verify_phase=verify_runner)


def compile_bundle(job: CompileJob, log=print) -> Path:
    t_start = time.perf_counter()
    widths = bucket_widths(job.shape)
    n_steps = 5 + 2 * sum(len(w) for w in widths.values())  # load, lower + profile per bucket, phases, write
    bar = tqdm(total=n_steps, desc="yggc compile", unit="pass", disable=None)

    def step(msg: str) -> None:
        bar.set_postfix_str(msg)
        bar.update(1)

    check_pair(job.verifier_dir, job.drafter_dir)
    loaded = {"verifier": models.load(job.verifier_dir, job.dtype, job.max_seq, job.device),
              "drafter": models.load(job.drafter_dir, job.dtype, job.max_seq, job.device)}
    step("loaded and checked the pair")
    with BundleWriter(job.out, overwrite=job.overwrite) as w:
        buckets = lower_forward_buckets(w, loaded, widths, job, step)
        buckets += lower_phases(w, loaded, job, step)
        decoder = compiled_decoder(w.root, loaded, buckets, job)
        models_compiled = {"verifier": decoder.verifier, "drafter": decoder.drafter}
        profile = profile_models(models_compiled, widths, loaded["verifier"].layout, job.shape,
                                 job.profile_repeats, step, decoder)
        w.write_json("profile.json", profile)
        w.write_json("plan.json", {"depth": job.shape.depth, "width": job.shape.width,
                                   "verify": job.shape.verify, "source": "compile flags"})
        w.finish({"device": job.device, "dtype": models.dtype_label(job.dtype), "max_seq": job.max_seq,
                  "buckets": buckets,
                  "extra": {"opt": job.opt, "compile_s": round(time.perf_counter() - t_start, 1)}})
        step("wrote the bundle")
    bar.close()
    log(f"yggc: wrote {job.out} in {time.perf_counter() - t_start:.1f} s")
    return job.out
