"""Lowered packages kept by what they were compiled from, so compiling the same program again copies it.

A compile that exports the same program (graph, shapes, and the weights where the package holds them) under
the same Inductor settings, torch, yggc passes, C++ compiler and CPU as an earlier one takes that package (and
the constants file beside it) from the cache instead of compiling it. Compiling a model again - to re-plan on
a quiet machine after a busy one, with other calibration text, or with --temp - then skips the lowering,
about half of a SmolLM2 compile on 2 cores. O1 packages hold no weights, so models of one architecture share
them (a pair of one shape lowers each width once).

The cache is ~/.cache/yggc/packages, or $YGGC_PACKAGE_CACHE ("off": none). An entry is a folder named by the
key holding the files and entry.json with their sha256, written aside and renamed into place; a fetch checks
the hashes and drops an entry that fails them. The least recently used entries go beyond MAX_BYTES.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from torch._inductor.utils import parallel_num_threads
from torch.export import ExportedProgram

from ..artifacts.constants_map import constants_path
from ..bundle import file_sha256, passes_hash
from ..bundle.machine import device_kind
from .write_bundle import pid_alive

ENV = "YGGC_PACKAGE_CACHE"
DEFAULT_DIR = Path("~/.cache/yggc/packages")
MAX_BYTES = 8 << 30  # a SmolLM2 bf16 compile stores ~0.6 GB of packages
ENTRY = "entry.json"
KEY_VERSION = "1"
WRITTEN_BY_INDUCTOR = ("aot_inductor.metadata",)  # filled in by the first AOT compile of a process


@dataclass
class PackageCache:
    root: Path
    hits: int = 0
    misses: int = 0

    def fetch(self, key: str, out_path: Path) -> bool:
        """Copy the entry's files to out_path (and beside it) -> True; False when there is none or it fails its
        hashes (then it is removed)."""
        found = self._copy_out(key, out_path)
        self.hits += found
        self.misses += not found
        return found

    def _copy_out(self, key: str, out_path: Path) -> bool:
        """fetch, uncounted."""
        entry = self.root / key
        try:
            files = json.loads((entry / ENTRY).read_text())["files"]
            if any(file_sha256(entry / name) != digest for name, digest in files.items()):
                raise ValueError("a file differs from its hash")
        except (OSError, ValueError, KeyError):
            shutil.rmtree(entry, ignore_errors=True)
            return False
        for name in files:
            shutil.copyfile(entry / name, out_path.with_name(name.replace("package", out_path.stem, 1)))
        os.utime(entry)  # recently used
        return True

    def store(self, key: str, out_path: Path) -> None:
        """Keep out_path and the constants file beside it (if any) under `key`. Where another compile stored the key
        first, out_path takes its package instead: a program lowered twice differs in bytes (its serialization id,
        O2's autotuned choices), and one key then gives one package to every bundle. A cache that cannot take them
        (a full disk) leaves the compile as it is."""
        produced = [p for p in (out_path, constants_path(out_path)) if p.is_file()]
        tmp = self.root / f".{key}.{os.getpid()}"
        try:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            files = {}
            for p in produced:
                name = p.name.replace(out_path.stem, "package", 1)
                shutil.copyfile(p, tmp / name)
                files[name] = file_sha256(tmp / name)
            (tmp / ENTRY).write_text(json.dumps({"files": files}))
            os.rename(tmp, self.root / key)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            if (self.root / key).is_dir():
                self._copy_out(key, out_path)
            return
        self.prune()

    def prune(self) -> None:
        """Remove what a killed compile left half-stored, and the least recently used entries while the cache
        holds more than MAX_BYTES."""
        for tmp in self.root.glob(".*.*"):
            if tmp.is_dir() and tmp.suffix[1:].isdigit() and not pid_alive(int(tmp.suffix[1:])):
                shutil.rmtree(tmp, ignore_errors=True)
        entries = sorted((p for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")),
                         key=lambda p: p.stat().st_mtime, reverse=True)
        total = 0
        for entry in entries:
            total += sum(f.stat().st_size for f in entry.iterdir())
            if total > MAX_BYTES:
                shutil.rmtree(entry, ignore_errors=True)


_active: list[PackageCache] = []


def cache_root() -> Path | None:
    """$YGGC_PACKAGE_CACHE, or the default folder; None when it is "off"."""
    value = os.environ.get(ENV, "")
    if value.lower() == "off":
        return None
    return Path(value or DEFAULT_DIR).expanduser()


@contextmanager
def using(root: Path | None) -> Iterator[PackageCache | None]:
    """compile_program consults the cache at `root` inside the block (none when root is None or cannot be made)."""
    try:
        if root is not None:
            root.mkdir(parents=True, exist_ok=True)
    except OSError:  # a folder this user cannot write: compile without a cache
        root = None
    if root is None:
        yield None
        return
    _active.append(PackageCache(root))
    try:
        yield _active[-1]
    finally:
        _active.pop()


def active() -> PackageCache | None:
    return _active[-1] if _active else None


@functools.cache
def build_identity(device: str, cxx: str) -> str:
    """What every package of a process is built with (worked out once): the key's version, torch, the passes' and
    graphs' sources, the machine, and the C++ compiler's --version."""
    try:
        version = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        version = ""
    return "\0".join((KEY_VERSION, torch.__version__, passes_hash(), machine_identity(device), version))


def machine_identity(device: str) -> str:
    """What the generated code was compiled for: the CPU's model, every flag (-march=native) and its caches'
    sizes (Inductor's GEMM blocking and the kernels' prefetch level follow them), or the GPU."""
    if device_kind(device) == "cuda":
        return f"{torch.cuda.get_device_name(device)} {torch.cuda.get_device_capability(device)} {torch.version.cuda}"
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    wanted = [line for line in lines if line.startswith(("model name", "flags"))][:2]
    caches = {k: v for k, v in torch.cpu.get_capabilities().items() if k.endswith("cache_size")}
    return f"{platform.machine()} {torch.backends.cpu.get_cpu_capability()} {caches} " + " ".join(wanted)


def tensor_digest(h, name: str, t: torch.Tensor, values: bool) -> None:
    """Feed `h` a tensor's name, dtype and shape, and its bytes when `values` (a meta tensor has none)."""
    h.update(f"{name} {t.dtype} {tuple(t.shape)}\0".encode())
    if values and not t.is_meta and t.numel():
        h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())  # its buffer, not a copy


def inductor_settings() -> dict:
    """Inductor's global settings, less those its compiles write into (the same before and after one)."""
    return {k: v for k, v in torch._inductor.config.save_config_portable().items() if k not in WRITTEN_BY_INDUCTOR}


def program_key(program: ExportedProgram, config: dict, device: str, weights_inside: bool) -> str:
    """sha256 over everything the package's bytes depend on: the exported graph (shapes, strides, devices, its
    signature and dynamic ranges), the Inductor settings (passed and global, the C++ compiler among them) and
    that compiler's version, torch, the yggc passes' sources, the machine and (CPU) the threads, the lifted
    constants' values and - where the package or the file beside it holds them (weights_inside) - the weights'
    values; their names, dtypes and shapes always."""
    h = hashlib.sha256()
    cxx = torch._inductor.config.cpp.cxx
    # a CPU package's kernels are split for the threads it is compiled on (Inductor's parallel_num_threads)
    threads = parallel_num_threads() if device_kind(device) == "cpu" else 0
    parts = (build_identity(device, cxx[-1] if isinstance(cxx, tuple) else str(cxx)), f"threads {threads}",
             json.dumps(config, sort_keys=True, default=str),
             json.dumps(inductor_settings(), sort_keys=True, default=str),
             program.graph_module.print_readable(print_output=False, include_stride=True, include_device=True),
             str(program.graph_signature), str(program.range_constraints))
    for part in parts:
        h.update(part.encode() + b"\0")
    for name, t in sorted(program.state_dict.items()):
        tensor_digest(h, name, t, weights_inside)
    for name, t in sorted(program.constants.items()):
        if isinstance(t, torch.Tensor):
            tensor_digest(h, name, t, True)
    return h.hexdigest()
