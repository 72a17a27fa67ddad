"""The one training loop of the three jobs: resumable state (safetensors + JSON, no pickle), the learning
rate schedule, deterministic batches, optional distillation from a teacher, time budgets, progress bars.

train_model runs a pair model (``yggc train pair``); distill_steps the drafter and EAGLE-3 jobs, whose loss
a job-specific step function computes. Both resume exactly: the batch of a step is a pure function of the
seed and the step, and the state of a run is saved every --ckpt-every steps and when it stops.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..bundle import file_sha256
from ..errors import YggcError
from .batches import ROLES, sample_batch
from .corpus import eot_id, load_tokenizer
from .options import RunSettings
from .presets import ModelSize, PairPreset, TrainHParams, build_model, export_checkpoint, load_hf_model, n_params

if TYPE_CHECKING:
    import torch
    from tqdm import tqdm



def log(job: str, line: str) -> None:
    """One progress line of `yggc train JOB` on stderr."""
    print(f"yggc train {job}: {line}", file=sys.stderr)


def progress(desc: str, total: int | None = None, initial: int = 0, **kwargs: Any) -> tqdm:
    """A tqdm bar on stderr; redrawn at most every 30 s when stderr is not a terminal (short nohup logs)."""
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc=desc, dynamic_ncols=True,
                mininterval=1.0 if sys.stderr.isatty() else 30.0, **kwargs)


def save_state(state_dir: Path, model: torch.nn.Module, opt: torch.optim.Optimizer, meta: dict) -> None:
    """float32 weights + AdamW moments as safetensors, counters as JSON; JSON written last."""
    import torch
    from safetensors.torch import save_file, save_model

    state_dir.mkdir(parents=True, exist_ok=True)
    names = {id(p): n for n, p in model.named_parameters()}
    opt_tensors = {}
    for group in opt.param_groups:
        for p in group["params"]:
            for key, val in opt.state.get(p, {}).items():
                val = val if torch.is_tensor(val) else torch.tensor(val)
                opt_tensors[f"{names[id(p)]}::{key}"] = val.detach().contiguous()
    save_model(model, str(state_dir / "model.tmp.safetensors"))
    save_file(opt_tensors, str(state_dir / "optimizer.tmp.safetensors"))
    os.replace(state_dir / "model.tmp.safetensors", state_dir / "model.safetensors")
    os.replace(state_dir / "optimizer.tmp.safetensors", state_dir / "optimizer.safetensors")
    (state_dir / "state.tmp.json").write_text(json.dumps(meta, indent=1))
    os.replace(state_dir / "state.tmp.json", state_dir / "state.json")


def load_state(state_dir: Path, model: torch.nn.Module, opt: torch.optim.Optimizer) -> dict:
    """Restore what save_state wrote into `model` and `opt`; returns the counters."""
    from safetensors.torch import load_file, load_model

    load_model(model, str(state_dir / "model.safetensors"))
    params = dict(model.named_parameters())
    for key, val in load_file(str(state_dir / "optimizer.safetensors")).items():
        name, field = key.split("::")
        opt.state[params[name]][field] = val
    return json.loads((state_dir / "state.json").read_text())


def bf16_autocast_pays() -> bool:
    """Whether bfloat16 autocast speeds training on this CPU: one with AVX512-BF16 or AMX multiplies bfloat16
    natively; elsewhere (AVX2) every bfloat16 product is converted in software and runs many times slower than
    float32."""
    import torch

    return torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()


def make_optimizer(model: torch.nn.Module, hp: TrainHParams) -> torch.optim.AdamW:
    """AdamW with weight decay on the matrices only."""
    import torch

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": hp.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=hp.lr, betas=(0.9, 0.95), eps=1e-8)


def lr_at(step: int, total: int | None, hp: TrainHParams) -> float:
    """Linear warmup, then cosine decay to hp.min_lr_ratio of the peak at `total` (constant without one)."""
    if step < hp.warmup_steps:
        return hp.lr * (step + 1) / hp.warmup_steps
    if not total:
        return hp.lr
    frac = min(1.0, (step - hp.warmup_steps) / max(1, total - hp.warmup_steps))
    return hp.lr * (hp.min_lr_ratio + (1 - hp.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * frac)))


def wsd_lr_at(step: int, hp: TrainHParams, decay_from: int | None, decay_steps: int) -> float:
    """Warmup-stable-decay: linear warmup, the peak rate for as long as the run is extended, then (from step
    `decay_from`, None: not yet) a 1 - sqrt decay to hp.min_lr_ratio of the peak over `decay_steps` steps. The rate
    of a step does not depend on how long the stable phase will last, so a run can be trained longer at any time."""
    if step < hp.warmup_steps:
        return hp.lr * (step + 1) / hp.warmup_steps
    if decay_from is None or step < decay_from:
        return hp.lr
    frac = min(1.0, (step - decay_from) / max(1, decay_steps))
    return hp.lr * (hp.min_lr_ratio + (1 - hp.min_lr_ratio) * (1 - math.sqrt(frac)))


def set_lr(opt: torch.optim.Optimizer, lr: float) -> None:
    """The learning rate of every parameter group."""
    for group in opt.param_groups:
        group["lr"] = lr


def apply_gradients(model: torch.nn.Module, opt: torch.optim.Optimizer, loss: torch.Tensor, grad_clip: float) -> None:
    """Backward, clip the gradient norm (frozen weights have no gradient), one optimizer step."""
    import torch

    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    opt.step()
    opt.zero_grad(set_to_none=True)


@dataclass
class Job:
    """One model of the pair to train (or resume) and export to out_dir/<role>."""
    role: str
    preset: PairPreset
    size: ModelSize
    hp: TrainHParams
    tokens: np.ndarray
    tokenizer_path: Path
    out_dir: Path
    seed: int = 0
    steps: int | None = None
    resume: bool = True
    compile: bool = False
    autocast: bool = False
    teacher_dir: Path | None = None
    distill_alpha: float | None = None
    ckpt_every: int = 200
    stop_after: int | None = None
    calib_steps: int = 5

    @property
    def state_dir(self) -> Path:
        return self.out_dir / ".state" / self.role


def make_loss_fn(model: torch.nn.Module, teacher: torch.nn.Module | None, alpha: float | None,
                 autocast: bool) -> Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """``x -> (loss, ce)``; with a teacher: ``alpha * CE + (1 - alpha) * KL(teacher || model)``."""
    import torch
    import torch.nn.functional as F

    def loss_fn(x):
        inp, tgt = x[:, :-1], x[:, 1:].reshape(-1)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logits = model(input_ids=inp).logits
        logits = logits.float().flatten(0, 1)
        ce = F.cross_entropy(logits, tgt)
        if teacher is None:
            return ce, ce
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            t_logits = teacher(input_ids=inp).logits
        t_logp = F.log_softmax(t_logits.float().flatten(0, 1), dim=-1)
        kl = F.kl_div(F.log_softmax(logits, dim=-1), t_logp, log_target=True, reduction="batchmean")
        return alpha * ce + (1 - alpha) * kl, ce

    return loss_fn


def init_job(job: Job, eot: int) -> tuple[torch.nn.Module, torch.optim.Optimizer, dict, torch.nn.Module | None]:
    """Model, optimizer, metadata (resumed from ``job.state_dir`` when possible), teacher."""
    model = build_model(job.size, job.preset, eot, job.seed + ROLES.index(job.role))
    opt = make_optimizer(model, job.hp)
    meta = {
        "role": job.role,
        "preset": job.preset.name,
        "step": 0,
        "total_steps": job.steps,
        "tokens_seen": 0,
        "train_seconds": 0.0,
        "seed": job.seed,
        "size": asdict(job.size),
        "hparams": asdict(job.hp),
        "seq_len": job.preset.seq_len,
        "distill_alpha": job.distill_alpha,
        "tokenizer_sha256": file_sha256(job.tokenizer_path),
        "params": n_params(model),
        "loss_ema": None,
    }
    if job.resume and (job.state_dir / "state.json").exists():
        old = load_state(job.state_dir, model, opt)
        for key in ("size", "seq_len", "seed", "tokenizer_sha256"):
            if old[key] != meta[key]:
                raise YggcError(f"{job.state_dir}: saved {key} {old[key]!r} != {meta[key]!r}; use --no-resume")
        meta = old
        if job.steps is not None:
            meta["total_steps"] = job.steps
        log("pair", f"{job.role} resumed at step {meta['step']} from {job.state_dir}")
    teacher = None
    if job.teacher_dir is not None:
        teacher = load_hf_model(job.teacher_dir, "float32")
        for p in teacher.parameters():
            p.requires_grad_(False)
    return model, opt, meta, teacher


REFINE_AT = (0.1, 0.5)  # fractions of the budget at which total_steps is re-estimated
GRACE = 1.25  # hard stop at GRACE * budget when the estimate was too optimistic


def update_total(meta: dict, job: Job, t_run0: float, t_calib: float, calib_step: int) -> None:
    """Fit ``total_steps`` to the time budget from the speed measured since ``calib_step``.

    First estimated after ``calib_steps`` steps, refined at each fraction in REFINE_AT of the
    budget, then frozen (stored in the state: a resumed run keeps it).  No-op with ``--steps``.
    """
    done, elapsed, budget = meta["step"] - calib_step, time.time() - t_run0, job.hp.minutes * 60
    stage = meta.get("estimate_stage", 0)
    if job.steps is not None or stage > len(REFINE_AT) or done < job.calib_steps:
        return
    if stage > 0 and elapsed < REFINE_AT[stage - 1] * budget:
        return
    sec_per_step = (time.time() - t_calib) / done
    meta["total_steps"] = meta["step"] + max(1, int(0.98 * (budget - elapsed) / sec_per_step))
    meta["estimate_stage"] = stage + 1


def train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, loss_fn: Callable, x: torch.Tensor,
               grad_clip: float) -> float:
    """One optimizer step; returns the batch cross-entropy."""
    loss, ce = loss_fn(x)
    apply_gradients(model, opt, loss, grad_clip)
    return ce.detach().item()


def stop_reason(job: Job, meta: dict, start: int, elapsed: float) -> str | None:
    """Why the run stops before its last step (--stop-after, or GRACE x the time budget), or None."""
    if job.stop_after is not None and meta["step"] - start >= job.stop_after:
        return f"--stop-after {job.stop_after}"
    if elapsed > GRACE * job.hp.minutes * 60 and meta["step"] < (meta["total_steps"] or 0):
        return f"time budget ({GRACE} x {job.hp.minutes} min)"
    return None


def finish(job: Job, model: torch.nn.Module, opt: torch.optim.Optimizer, meta: dict, start: int,
           seconds: float) -> dict:
    """Final training state + exported checkpoint ``out_dir/<role>``."""
    meta.update(train_seconds=meta["train_seconds"] + seconds, start_step=start)
    meta["finished"] = meta["step"] >= (meta["total_steps"] or 0)
    save_state(job.state_dir, model, opt, meta)
    export_checkpoint(model, job.tokenizer_path, job.out_dir / job.role, job.preset.final_dtype)
    log("pair", f"{job.role} {meta['params'] / 1e6:.2f}M params, step {meta['step']}/{meta['total_steps']}, "
        f"{meta['tokens_seen'] / 1e6:.2f}M tokens, train CE {meta['loss_ema']:.3f}, "
        f"{meta['train_seconds'] / 60:.1f} min -> {job.out_dir / job.role}")
    return meta


def train_model(job: Job) -> dict:
    """Train (or resume) one model, checkpoint it, export ``out_dir/<role>``; returns the metadata."""
    import torch

    model, opt, meta, teacher = init_job(job, eot_id(load_tokenizer(job.tokenizer_path)))
    loss_fn = make_loss_fn(model, teacher, job.distill_alpha, job.autocast)
    loss_fn = torch.compile(loss_fn) if job.compile else loss_fn
    start, t0, t_calib, reason = meta["step"], time.time(), None, None
    bar = progress(job.role, meta["total_steps"], meta["step"])
    while meta["total_steps"] is None or meta["step"] < meta["total_steps"]:
        set_lr(opt, lr_at(meta["step"], meta["total_steps"], job.hp))
        x = sample_batch(job.tokens, job.seed, job.role, meta["step"], job.hp.batch_size, job.preset.seq_len)
        ce = train_step(model, opt, loss_fn, x, job.hp.grad_clip)
        meta["step"] += 1
        meta["tokens_seen"] += x[:, 1:].numel()
        meta["loss_ema"] = ce if meta["loss_ema"] is None else 0.95 * meta["loss_ema"] + 0.05 * ce
        t_calib = time.time() if meta["step"] == start + 1 else t_calib  # step 1 includes compilation
        update_total(meta, job, t0, t_calib, start + 1)
        elapsed, bar.total = time.time() - t0, meta["total_steps"]
        tok_s = (meta["step"] - start) * x[:, 1:].numel() / elapsed
        postfix = {"ce": f"{meta['loss_ema']:.3f}", "lr": f"{opt.param_groups[0]['lr']:.1e}", "tok_s": f"{tok_s:.0f}"}
        bar.set_postfix(postfix, refresh=False)
        bar.update(1)
        reason = stop_reason(job, meta, start, elapsed)
        if reason:
            break
        if meta["step"] % job.ckpt_every == 0:
            save_state(job.state_dir, model, opt, {**meta, "train_seconds": meta["train_seconds"] + elapsed})
    bar.close()
    if reason:
        log("pair", f"{job.role} stopped by {reason} at step {meta['step']}/{meta['total_steps']}; rerun to resume")
    return finish(job, model, opt, meta, start, time.time() - t0)


def check_recipe(job: str, state_dir: Path, recipe: dict | None) -> None:
    """YggcError (one line) when the run saved in state_dir was made from other data or settings than `recipe`
    (what a job's meta["recipe"] holds: data counts, sizes, seed); a state saved without one resumes as before."""
    saved = json.loads((state_dir / "state.json").read_text()).get("recipe")
    if recipe is None or saved is None:
        return
    changed = [f"{key} {saved.get(key)} -> {recipe.get(key)}" for key in {**saved, **recipe}  # a key either lacks too
               if saved.get(key) != recipe.get(key)]
    if changed:
        raise YggcError(f"{state_dir} holds a {job} run made from other data or settings ({', '.join(changed)}); "
                        "pass --no-resume to start it over, or --out for a separate folder")


PAUSE_FILE = Path(os.environ.get("YGGC_TRAIN_PAUSE", "~/.cache/yggc/train.pause")).expanduser()
SAVE_SECONDS = 300.0  # a running job also saves its state this often, whatever --ckpt-every says


def wait_while_paused(job: str, save: Callable[[], None]) -> None:
    """While PAUSE_FILE exists (`touch` it around timing benchmarks, remove it to go on): save the state once and
    sleep, so a paused job takes no CPU time."""
    if not PAUSE_FILE.exists():
        return
    save()
    log(job, f"paused by {PAUSE_FILE} (state saved); remove it to go on")
    while PAUSE_FILE.exists():
        time.sleep(2.0)
    log(job, "resumed")


def distill_steps(job: str, model: torch.nn.Module, opt: torch.optim.Optimizer, meta: dict, total: int,
                  hp: TrainHParams, state_dir: Path, settings: RunSettings,
                  step: Callable[[dict], tuple[torch.Tensor, str]],
                  lr: Callable[[int], float] | None = None) -> dict:
    """The resumable loop of the drafter and EAGLE-3 jobs, from meta["step"] (or the state saved in state_dir,
    made from the same meta["recipe"]) to `total`. step(meta) -> (loss, progress text) computes the loss of
    batch meta["step"] (and may keep running statistics in meta); lr(step) the learning rate (default: warmup and
    cosine to `total`). Saves every settings.ckpt_every steps, every SAVE_SECONDS, when paused (PAUSE_FILE) and when
    settings.max_minutes / settings.stop_after stop the run (rerun to resume); resumes only where settings.resume."""
    if (state_dir / "state.json").is_file() and settings.resume:
        check_recipe(job, state_dir, meta.get("recipe"))
        meta = {**load_state(state_dir, model, opt), "recipe": meta.get("recipe")}
        if meta["step"] > total:  # nothing would train, and the saved weights are not what `total` steps make
            raise YggcError(f"{state_dir} holds a {job} run at step {meta['step']}, past this run's {total} steps; "
                            "raise --steps (and --decay) to train on, or pass --no-resume to start over")
        log(job, f"resumed at step {meta['step']}")
    lr = lr or (lambda s: lr_at(s, total, hp))
    start, t0, stop, saved_at = meta["step"], time.time(), None, time.time()

    def save() -> None:
        nonlocal saved_at
        save_state(state_dir, model, opt, {**meta, "train_seconds": meta["train_seconds"] + time.time() - t0})
        saved_at = time.time()

    bar = progress(f"train {job}", total, start)
    while meta["step"] < total:
        paused = time.time()
        wait_while_paused(job, save)
        t0 += time.time() - paused  # paused minutes are not training time
        set_lr(opt, lr(meta["step"]))
        loss, text = step(meta)
        apply_gradients(model, opt, loss, hp.grad_clip)
        meta["step"] += 1
        bar.set_postfix_str(f"loss={loss.item():.3f}, {text}", refresh=False)
        bar.update(1)
        elapsed = time.time() - t0
        stop = ("--stop-after" if settings.stop_after is not None and meta["step"] - start >= settings.stop_after else
                "--max-minutes" if settings.max_minutes and elapsed > settings.max_minutes * 60 else None)
        if (meta["step"] % settings.ckpt_every == 0 or meta["step"] == total or stop
                or time.time() - saved_at > SAVE_SECONDS):
            save()
        if stop:
            break
    bar.close()
    if stop:
        log(job, f"{stop} reached at step {meta['step']}; rerun the same command to resume")
    meta["train_seconds"] += time.time() - t0
    return meta
