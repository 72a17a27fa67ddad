"""Facts of this machine and of files that a bundle's manifest records: hashes, device, dtype, CPU ISA.

Only files are hashed and /proc/cpuinfo read here; nothing is imported from a bundle or unpickled.
"""
from __future__ import annotations

import hashlib
import importlib.util
import platform
from functools import lru_cache
from pathlib import Path

import torch

from ..errors import YggcError

DEVICES = ("cpu", "cuda")
DTYPE_NAMES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
               torch.float32: "float32", torch.bfloat16: "bfloat16"}
# CPU flags that change what inductor generates (vector width, bf16/fp16 and AMX kernels); x86 then ARM
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "asimd", "sve", "sve2", "bf16")
CHUNK = 1 << 20


def file_sha256(path: str | Path) -> str:
    """sha256 hex digest of a file, read in 1 MiB chunks (weights can be many GB)."""
    h, buf = hashlib.sha256(), bytearray(CHUNK)
    view = memoryview(buf)
    with open(path, "rb") as f:
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()


def dtype_name(dtype: str | torch.dtype) -> str:
    try:
        return DTYPE_NAMES[dtype]
    except KeyError:
        raise YggcError(f"unknown dtype {dtype!r}; use float32 or bfloat16") from None


def device_kind(device: str) -> str:
    """'cpu' | 'cuda' for 'cpu', 'cuda', 'cuda:1'."""
    kind = str(device).split(":")[0]
    if kind not in DEVICES:
        raise YggcError(f"unknown device {device!r}; use cpu or cuda")
    return kind


def require_device(device: str) -> None:
    if device_kind(device) == "cuda" and not torch.cuda.is_available():
        raise YggcError(f"device {device} was asked for but this machine has no CUDA device "
                        "(torch.cuda.is_available() is False); use a GPU machine or compile for cpu")


@lru_cache(maxsize=1)
def _cpu_flags() -> frozenset[str] | None:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None  # not Linux: fall back to torch's own capability probe
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return None


def isa_fingerprint(device: str) -> str:
    """What compiled code depends on: 'sm_90' on CUDA, e.g. 'x86_64:avx2+avx512f' on CPU."""
    if device_kind(device) == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return f"sm_{major}{minor}"
    flags = _cpu_flags()
    if flags is None:
        return f"{platform.machine()}:{torch.backends.cpu.get_cpu_capability().lower()}"
    return f"{platform.machine()}:" + ("+".join(f for f in CPU_FLAGS if f in flags) or "baseline")


def passes_dirs() -> list[Path]:
    """Where yggc.passes and yggc.graphs (what the passes compile) are installed, found without importing them."""
    dirs = []
    for package in ("yggc.passes", "yggc.graphs"):
        spec = importlib.util.find_spec(package)
        dirs += [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    return dirs


def passes_hash() -> str:
    """sha256 over the compile passes' and graphs' sources (names and contents, sorted); '' if not installed."""
    dirs = passes_dirs()
    h = hashlib.sha256()
    for d in dirs:
        for f in sorted(d.rglob("*.py")):
            if "__pycache__" not in f.parts:
                h.update(f"{d.name}/{f.relative_to(d).as_posix()}\0{file_sha256(f)}\n".encode())
    return h.hexdigest() if dirs else ""


def weights_sha256(hashes: dict[str, str]) -> str:
    """One hash for a model's weights: the file's own sha256, or a digest over the shards' hashes."""
    if len(hashes) == 1:
        return next(iter(hashes.values()))
    return hashlib.sha256("".join(f"{n} {h}\n" for n, h in sorted(hashes.items())).encode()).hexdigest()


def model_hashes(model_dir: str | Path) -> dict[str, str]:
    """{"sha256": weights, "config": config.json} of a checkpoint directory, as a manifest records them."""
    path = Path(model_dir)
    weights = {p.name: file_sha256(p) for p in sorted(path.glob("*.safetensors"))}
    return {"sha256": weights_sha256(weights), "config": file_sha256(path / "config.json")}
