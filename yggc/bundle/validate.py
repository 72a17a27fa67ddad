"""The checks `Runtime.load` runs before anything heavy: this yggc, torch, device, ISA and passes, and
every file's sha256. Each mismatch is one line naming both values and the fix.
"""
from __future__ import annotations

from pathlib import Path

import torch

from .. import __version__
from ..errors import YggcError
from .machine import device_kind, file_sha256, isa_fingerprint, passes_hash
from .manifest import ARTIFACTS, RECOMPILE, Manifest, load_manifest

MISMATCH = {
    "yggc_version": "bundle was compiled with yggc {b} but this is yggc {h}",
    "torch_version": "bundle was compiled with torch {b} but this is torch {h}",
    "device": "bundle was compiled for device {b} but this run uses device {h}",
    "isa": "bundle was compiled for isa {b} but this machine has isa {h}",
    "passes_hash": "bundle was compiled by compile passes {b} but this yggc's passes hash to {h}",
}


def _same(name: str, bundle: str, here: str) -> None:
    if bundle != here:
        if name == "passes_hash":  # 64 hex digits are noise in a one-line message
            bundle, here = bundle[:12], here[:12] or "(yggc.passes is not installed)"
        raise YggcError(MISMATCH[name].format(b=bundle, h=here) + f"; {RECOMPILE}")


def check_environment(m: Manifest, device: str | None = None) -> None:
    """The bundle was compiled by this yggc, torch and passes for this device and ISA (in that order)."""
    _same("yggc_version", m.yggc_version, __version__)
    _same("torch_version", m.torch_version, torch.__version__)
    want = device or m.device
    _same("device", m.device, device_kind(want))
    if device_kind(want) == "cuda" and not torch.cuda.is_available():
        raise YggcError(f"bundle was compiled for device cuda but this machine has no CUDA device "
                        f"(torch.cuda.is_available() is False); run it on a GPU machine or {RECOMPILE}")
    _same("isa", m.isa, isa_fingerprint(want))
    _same("passes_hash", m.passes_hash, passes_hash())


def check_files(root: str | Path, m: Manifest) -> None:
    """Every listed file is there with its sha256, and artifacts/ holds nothing unlisted."""
    root = Path(root)
    missing = [rel for rel in m.files if not (root / rel).is_file()]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise YggcError(f"bundle file {missing[0]} is missing{more}; re-run `yggc compile`")
    for rel, want in m.files.items():
        if file_sha256(root / rel) != want:
            raise YggcError(f"bundle file {rel} is corrupted (sha256 mismatch); re-run `yggc compile`")
    stray = sorted(rel for p in (root / ARTIFACTS).rglob("*") if not p.is_dir()
                   and (rel := p.relative_to(root).as_posix()) not in m.files)
    if stray:
        raise YggcError(f"bundle file {stray[0]} is not listed in manifest.json (a stray file in artifacts/); "
                        "remove it or re-run `yggc compile`")


def validate_bundle(path: str | Path, device: str | None = None) -> Manifest:
    """All checks, cheapest first, before anything heavy is loaded; `device` defaults to the bundle's."""
    m = load_manifest(path)
    check_environment(m, device)
    check_files(path, m)
    return m
