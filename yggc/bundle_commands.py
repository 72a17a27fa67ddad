"""`yggc compile` and `yggc inspect`: the CLI's bundle commands (argument handling only)."""
from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from . import models
from .bundle import load_manifest
from .device import resolve_device
from .errors import YggcError
from .run_command import tree_shape

if TYPE_CHECKING:
    from .passes.calibrate import CalibrationSpec


def _interrupt(signum, frame):
    raise KeyboardInterrupt  # so the bundle writer deletes its partial directory on `kill` too


def compile_command(args: argparse.Namespace) -> int:
    from .passes.pipeline import CompileJob, compile_bundle  # the runtime itself never imports passes

    signal.signal(signal.SIGTERM, _interrupt)
    check_target(args)  # before anything slow
    verifier_dir, drafter_dir = compile_pair(args)
    calib = calibration_spec(args)
    job = CompileJob(Path(verifier_dir), Path(drafter_dir), Path(args.output),
                     None if calib else tree_shape(args), models.parse_dtype(args.dtype),
                     models.context_length(verifier_dir, args.max_seq), args.device, args.overwrite, opt=args.opt,
                     calib=calib, backend=args.backend)
    warn_if_busy()
    compile_bundle(job, log=lambda msg: print(msg, file=sys.stderr))
    return 0


def check_target(args: argparse.Namespace) -> None:
    """The device exists and the backend can build for it."""
    if args.backend == "tensorrt" and args.device != "cuda":
        raise YggcError("--backend tensorrt builds TensorRT engines for NVIDIA GPUs; add --device cuda "
                        "or use --backend inductor")
    resolve_device(args.device)
    if args.backend == "tensorrt":
        from .tensorrt_buckets import require_tensorrt

        require_tensorrt()


def compile_pair(args: argparse.Namespace) -> tuple[Path, Path]:
    """-m/-md, or the embedded demo pair (with its own calibration text unless a shape is given)."""
    if args.model is None and args.model_draft is None:
        if not args.calib and not (args.depth or args.width or args.verify):
            args.calib = [str(models.DEMO_CALIB)]
        return models.demo_pair_dirs()
    if args.model is None or args.model_draft is None:
        raise YggcError("compile needs both -m VERIFIER_DIR and -md DRAFTER_DIR (or neither, for the demo pair)")
    return Path(args.model), Path(args.model_draft)


def warn_if_busy() -> None:
    import torch

    from .timing import busy_warning

    warning = busy_warning(torch.get_num_threads())
    if warning:
        print(f"yggc compile: warning: {warning}; the profile, and the tree shape chosen from it, may be off",
              file=sys.stderr)


def calibration_spec(args: argparse.Namespace) -> CalibrationSpec | None:
    """--calib and the tree flags given with it -> the search the calibrate and choose-shape passes run."""
    from .passes.calibrate import CalibrationSpec, read_calibration_text

    if not args.calib:
        return None
    files = tuple(Path(f) for f in args.calib)
    read_calibration_text(files)  # a bad file fails here, before anything slow
    if args.depth == 0 or args.width == 0:
        raise YggcError("--depth and --width must be >= 1")
    default = CalibrationSpec(files)
    spec = CalibrationSpec(files, args.calib_prompts, default.prompt_tokens, args.calib_tokens,
                           max_depth=args.depth or default.max_depth,
                           widths=(args.width,) if args.width else default.widths,
                           pin_depth=args.depth, pin_verify=args.verify)
    if spec.new_tokens <= spec.max_depth:
        raise YggcError(f"--calib-tokens must exceed the deepest calibrated tree ({spec.max_depth}), got "
                        f"{spec.new_tokens}")
    if args.verify is not None and not 1 <= args.verify <= spec.max_depth * max(spec.widths):
        raise YggcError(f"--verify must be in 1..depth*width = {spec.max_depth * max(spec.widths)}, got {args.verify}")
    return spec


def read_bundle_json(root: Path, name: str) -> dict:
    path = root / name
    return json.loads(path.read_text()) if path.exists() else {}


def profile_command(args: argparse.Namespace) -> int:
    load_manifest(args.bundle)  # a bundle, not any folder with a profile.json
    profile = read_bundle_json(Path(args.bundle), "profile.json")
    if not profile:
        raise YggcError(f"{args.bundle} has no profile.json; re-run `yggc compile`")
    print_profile(profile)
    if args.plot:
        from .profile_plot import plot_profile

        print(f"wrote {plot_profile(profile, Path(args.plot))}", file=sys.stderr)
    return 0


def print_profile(profile: dict) -> None:
    for name, entry in profile.get("models", {}).items():
        widths = ", ".join(f"W={w}: {ms:.3f} ms" for w, ms in entry["bucket_ms"].items())
        print(f"  {name} buckets: {widths}")
        c = entry["cost_curve"]
        print(f"  {name} cost curve: T(W) = {c['t0_ms']:.3f} ms + {c['slope_ms']:.4f} ms x max(0, W - {c['knee']:g})")
    for phase, ms in profile.get("phase_ms", {}).items():
        print(f"  {phase} phase (one call): {ms:.3f} ms")
    for stage, ms in profile.get("host_ms", {}).items():
        print(f"  host {stage}: {ms:.4f} ms")


def print_plan(plan: dict) -> None:
    print(f"  plan: depth {plan.get('depth')}, width {plan.get('width')}, verify {plan.get('verify')} "
          f"({plan.get('source', 'unknown source')})")
    best = plan.get("objective")
    if best:
        print(f"  objective: {best['tokens_per_iter']:.2f} tokens/iteration, {best['iteration_ms']:.3f} ms/iteration, "
              f"estimated {best['speedup']:.2f}x over the verifier alone")
        for c in plan.get("candidates", [])[1:5]:
            print(f"    next: D={c['depth']} W={c['width']} V={c['verify']}: {c['tokens_per_iter']:.2f} tokens/iteration, "
                  f"estimated {c['speedup']:.2f}x")


def inspect_command(args: argparse.Namespace) -> int:
    manifest = load_manifest(args.bundle)
    root = Path(args.bundle)
    profile, plan = read_bundle_json(root, "profile.json"), read_bundle_json(root, "plan.json")
    if args.json:
        print(json.dumps({"manifest": manifest.to_dict(), "profile": profile, "plan": plan}, indent=2))
        return 0
    m = manifest
    print(f"bundle {root}: format {m.format_version}, yggc {m.yggc_version}, torch {m.torch_version}")
    print(f"  device {m.device} ({m.isa}), dtype {m.dtype}, opt {m.extra.get('opt', 'O1')}, max_seq {m.max_seq}, "
          f"created {m.created}")
    print_plan(plan)
    print("  buckets:")
    bucket_ms = {name: m.get("bucket_ms", {}) for name, m in profile.get("models", {}).items()}
    phase_ms = profile.get("phase_ms", {})
    for b in m.buckets:
        ms = (bucket_ms.get(b["model"], {}).get(str(b["width"])) if b["kind"] == "forward"
              else phase_ms.get(b["kind"].split("_")[0]))
        print(f"    {b['name']:<20} {b['kind']:<13} {ms:9.3f} ms" if ms is not None else f"    {b['name']}")
    print_profile(profile)
    return 0
