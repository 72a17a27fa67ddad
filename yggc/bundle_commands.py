"""`yggc compile` and `yggc inspect`: the CLI's bundle commands (argument handling only)."""
from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

from . import models
from .bundle import load_manifest
from .device import resolve_device
from .errors import YggcError
from .run_command import tree_shape


def _interrupt(signum, frame):
    raise KeyboardInterrupt  # so the bundle writer deletes its partial directory on `kill` too


def compile_command(args: argparse.Namespace) -> int:
    from .passes.pipeline import CompileJob, compile_bundle  # the runtime itself never imports passes

    signal.signal(signal.SIGTERM, _interrupt)
    resolve_device(args.device)  # before anything slow
    verifier_dir, drafter_dir = args.model, args.model_draft
    if verifier_dir is None and drafter_dir is None:
        verifier_dir, drafter_dir = models.demo_pair_dirs()
    if verifier_dir is None or drafter_dir is None:
        raise YggcError("compile needs both -m VERIFIER_DIR and -md DRAFTER_DIR (or neither, for the demo pair)")
    job = CompileJob(Path(verifier_dir), Path(drafter_dir), Path(args.output), tree_shape(args),
                     models.parse_dtype(args.dtype), models.context_length(verifier_dir, args.max_seq),
                     args.device, args.overwrite, opt=args.opt)
    compile_bundle(job, log=lambda msg: print(msg, file=sys.stderr))
    return 0


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
    print(f"  plan: depth {plan.get('depth')}, width {plan.get('width')}, verify {plan.get('verify')}")
    print("  buckets:")
    for b in m.buckets:
        ms = profile.get("models", {}).get(b["model"], {}).get("bucket_ms", {}).get(str(b["width"]))
        print(f"    {b['name']:<16} width {b['width']:>4}  {ms:.3f} ms" if ms is not None else f"    {b['name']}")
    print_profile(profile)
    return 0
