"""An O2 CPU package's constants, kept beside it in safetensors and bound from a memory map without a copy.

A package whose constants sit inside its shared library copies them into a heap blob when it loads, while the
library's pages it read are still resident: twice the weights at the peak, and the whole library written out of
the .pt2 archive first. So O2 CPU packages are compiled with no constants inside (passes/lower.py), and the bundle
keeps them in `<package>.constants.safetensors` (passes/external_constants.py writes it). Each constant is stored
as the raw bytes of its storage (uint8, padded to ALIGN bytes) with its dtype, shape, stride and offset in the
file's metadata, so the tensor the package gets back is laid out exactly as the one Inductor compiled against,
and every constant starts ALIGN-aligned in the file. Constants whose storages hold the same bytes (a weight packed
once per GEMM that reads it) are stored once and bound to views of the same pages ("storage" names the copy). The
package is bound to views of the mapped file by Inductor's internal constant names: their original names collide
once freezing has packed the weights (every packed GEMM weight reports the same one), so `load_constants` by name
cannot bind them.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from ..errors import YggcError

SUFFIX = ".constants.safetensors"
LAYOUT_KEY = "yggc_layout"  # metadata: {name: {"dtype", "shape", "stride", "offset", "nbytes", "storage"}}
ALIGN = 64  # bytes: a cache line, what torch's CPU allocator gives a heap copy


def constants_path(package: Path) -> Path:
    return package.with_name(package.name.removesuffix(".pt2") + SUFFIX)


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return dtype


def read_constants(path: Path) -> dict[str, torch.Tensor]:
    """{internal constant name: a view of the mapped file} (read-only use: the map is private)."""
    try:
        with safe_open(str(path), framework="pt") as f:
            layout = json.loads((f.metadata() or {})[LAYOUT_KEY])
            out, storages = {}, {}
            for name, spec in layout.items():
                stored = spec.get("storage", name)  # constants with equal bytes share one stored copy
                if stored not in storages:
                    storages[stored] = f.get_tensor(stored)  # [bytes] uint8 over the file's pages
                flat = storages[stored][:spec["nbytes"]].view(_dtype(spec["dtype"]))
                out[name] = flat.as_strided(spec["shape"], spec["stride"], spec["offset"])
            return out
    except (OSError, KeyError, TypeError, ValueError, RuntimeError, SafetensorError) as e:
        raise YggcError(f"compiled constants {path.name} cannot be read ({e}); re-run `yggc compile`") from None
