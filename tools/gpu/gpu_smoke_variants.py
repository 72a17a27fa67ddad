"""The aoti-variants section of tools/gpu/gpu_smoke.py: which AOTInductor packages load on this device.

On an H100 (torch 2.11.0+cu130) the crash is not yggc's loader: torch's own `aoti_load_package` dies of
SIGSEGV in a fresh process on yggc's O1 CUDA package of a tiny Llama, and the page-out is not the cause
(aoti-load and aoti-load-pageout both die at the first load; the cause is the compiler that built the
packages, passes/toolchain.py). This section lowers a few packages that differ in one thing each, then loads
and calls every one in its own process with tools/gpu/segv_backtrace.c preloaded, so a crash is one FAIL row
carrying the native frames:

  linear-in-so    a Linear and a mutated buffer, Inductor's default configs (weights in the library)
  linear-no-so    the same, aot_inductor.package_constants_in_so=False, constants bound after loading
  llama-o1        yggc's O1 bucket of the tiny Llama (no weights in the library, bound after loading)
  llama-o1-in-so  the same bucket with its weights in the library
  llama-o2        yggc's O2 package of the tiny Llama (weights frozen in, caches as inputs, W = 1..2)
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gpu_smoke_load import MAX_SEQ, TINY_LLAMA, inputs
from gpu_smoke_measure import Context, write_random_llama
from gpu_smoke_report import Row, pass_fail

SECTION = "aoti-variants"
BACKTRACE_SOURCE = Path(__file__).with_name("segv_backtrace.c")
NATIVE_FRAMES_SHOWN = 8
LOAD_TIMEOUT_S = 180


def backtrace_library(work: Path) -> Path | None:
    """tools/gpu/segv_backtrace.c built into `work` with the system C compiler (None: no compiler)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    out = work / "segv_backtrace.so"
    if cc and not out.exists():
        subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(out), str(BACKTRACE_SOURCE)], check=False)
    return out if out.exists() else None


@contextmanager
def o1_configs_with(overrides: dict) -> Iterator[None]:
    """yggc's O1 configs with `overrides` applied while lowering (a diagnostic, not a compile option)."""
    from yggc.passes import lower

    saved = dict(lower.INDUCTOR_CONFIGS["O1"])
    lower.INDUCTOR_CONFIGS["O1"].update(overrides)
    try:
        yield
    finally:
        lower.INDUCTOR_CONFIGS["O1"].clear()
        lower.INDUCTOR_CONFIGS["O1"].update(saved)


def save_case(folder: Path, consts: dict, args: tuple, expected) -> None:
    """What a loading process needs: the constants to bind, the call's inputs, the eager output."""
    from safetensors.torch import save_file

    save_file({n: t.detach().contiguous().cpu() for n, t in consts.items()}, folder / "consts.safetensors")
    save_file({f"arg{i}": a.contiguous().cpu() for i, a in enumerate(args)}, folder / "args.safetensors")
    save_file({"out": expected.detach().contiguous().cpu()}, folder / "expected.safetensors")


def linear_case(folder: Path, device: str, configs: dict) -> None:
    import torch

    class LinearAndBuffer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(64, 64)
            self.register_buffer("cache", torch.zeros(8, 64))

        def forward(self, x, slots):  # x [W, 64], slots [W]
            self.cache.index_copy_(0, slots, x)
            return self.lin(x) + self.cache.sum(0)

    torch.manual_seed(0)
    module = LinearAndBuffer().to(device)
    args = (torch.randn(2, 64, device=device), torch.tensor([0, 1], device=device))
    consts = {n: t.clone() for n, t in module.state_dict().items()}
    program = torch.export.export(module, args)
    torch._inductor.aoti_compile_and_package(program, package_path=str(folder / "package.pt2"),
                                             inductor_configs=configs)
    save_case(folder, consts, args, module(*args))


def llama_case(folder: Path, device: str, opt: str, overrides: dict) -> None:
    import torch
    from yggc.passes.lower import lower_bucket, lower_model

    from yggc.artifacts.buckets import graph_constants
    from yggc.runtime.loading import load

    graph = load(write_random_llama(TINY_LLAMA, folder / "ckpt", device), torch.float32, MAX_SEQ, device).graph
    args = inputs(1, device)
    if opt == "O2":
        lower_model(graph, 2, MAX_SEQ, folder / "package.pt2", device, "O2")
        consts, args = {}, (*args, *(t.clone() for t in graph.cache_tensors()))
    else:
        with o1_configs_with(overrides):
            lower_bucket(graph, 1, MAX_SEQ, folder / "package.pt2", device)
        consts = {n: t.clone() for n, t in graph_constants(graph).items()}
    save_case(folder, consts, args, graph(*inputs(1, device)))


VARIANTS = {
    "linear-in-so": lambda f, d: linear_case(f, d, {}),
    "linear-no-so": lambda f, d: linear_case(f, d, {"aot_inductor.package_constants_in_so": False}),
    "llama-o1": lambda f, d: llama_case(f, d, "O1", {}),
    "llama-o1-in-so": lambda f, d: llama_case(f, d, "O1", {"aot_inductor.package_constants_in_so": True}),
    "llama-o2": lambda f, d: llama_case(f, d, "O2", {}),
}


def load_and_call(folder: Path, device: str) -> dict:
    """In this (fresh) process: torch's aoti_load_package, bind the constants it lacks, call, compare."""
    import torch
    from safetensors.torch import load_file

    from yggc.artifacts import kernel_ops

    kernel_ops.load_beside(folder / "package.pt2")  # CPU packages call yggc's attention op
    runner = torch._inductor.aoti_load_package(str(folder / "package.pt2"))
    print(f"{SECTION}: constructed", file=sys.stderr, flush=True)
    consts = load_file(folder / "consts.safetensors", device=device)
    if consts:
        runner.load_constants({n: consts[n] for n in runner.get_constant_fqns()}, check_full_update=True,
                              user_managed=True)
    args = load_file(folder / "args.safetensors", device=device)
    out = runner(*(args[f"arg{i}"] for i in range(len(args))))
    out = out[0] if isinstance(out, (list, tuple)) else out
    expected = load_file(folder / "expected.safetensors", device=device)["out"]
    return {"close": bool(torch.allclose(out, expected, atol=1e-4, rtol=1e-4))}


def native_frames(stderr: str) -> str:
    """The first frames of segv_backtrace's report past its own handler and libc's signal frames."""
    lines = stderr.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("native backtrace: signal")), None)
    if start is None:
        return ""
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("native backtrace: end")), len(lines))
    frames = [ln for ln in lines[start + 1:end] if "segv_backtrace" not in ln and "libc.so" not in ln]
    return lines[start].removeprefix("native backtrace: ") + " | " + " < ".join(frames[:NATIVE_FRAMES_SHOWN])


def run_loader(folder: Path, device: str, preload: Path | None) -> Row:
    """One variant loaded and called in a child process; a crash is a FAIL row with its native frames."""
    env = dict(os.environ, PYTHONFAULTHANDLER="")
    if preload:
        env["LD_PRELOAD"] = str(preload)
    cmd = [sys.executable, __file__, "--load", str(folder), "--device", device]
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=LOAD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return Row(SECTION, f"{folder.name}: load + call", f"no answer in {LOAD_TIMEOUT_S} s", "FAIL")
    sys.stderr.write(done.stderr[-4000:])
    if done.returncode == 0:
        close = json.loads(done.stdout.strip().splitlines()[-1])["close"]
        return Row(SECTION, f"{folder.name}: load + call == eager", "close" if close else "differs",
                   pass_fail(close))
    constructed = f"{SECTION}: constructed" in done.stderr
    where = "after the loader was constructed" if constructed else "in the loader's constructor"
    frames = native_frames(done.stderr) or "no native frames (no C compiler for the backtrace helper?)"
    return Row(SECTION, f"{folder.name}: load + call", f"exit {done.returncode} {where}; {frames}", "FAIL")


def sec_aoti_variants(ctx: Context, device: str = "cuda", names: tuple[str, ...] = tuple(VARIANTS)) -> Iterator[Row]:
    """Lower each variant (once per work folder), then load and call it in a process of its own."""
    preload = backtrace_library(ctx.work)
    for name in names:
        folder = ctx.work / f"{SECTION}-{device}" / name
        t0 = time.time()
        if not (folder / "expected.safetensors").exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            VARIANTS[name](folder, device)
        yield Row(SECTION, f"{name}: lowered", f"{time.time() - t0:.1f} s")
        yield run_loader(folder, device, preload)


if __name__ == "__main__":  # the loading child: --load FOLDER --device DEVICE
    import argparse

    from gpu_smoke import use_source_tree

    ap = argparse.ArgumentParser()
    ap.add_argument("--load", type=Path, required=True)
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    use_source_tree()
    print(json.dumps(load_and_call(a.load, a.device)))
