"""Graph bundles on disk: the manifest, and the checks `Runtime.load` runs before anything heavy.

A bundle is a directory: manifest.json (first field format_version), verifier/ and drafter/
(config.json, *.safetensors, tokenizer.json), artifacts/*.pt2, profile.json and plan.json.
Only JSON is read here and nothing is unpickled. Every check fails with a YggcError of one line that
names the field, the bundle's value, this machine's value and the fix.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import platform
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path, PurePosixPath
from typing import Any

import torch

from . import __version__
from .errors import YggcError

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
ARTIFACTS = "artifacts"
MODELS = ("verifier", "drafter")
DEVICES = ("cpu", "cuda")
DTYPE_NAMES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
               torch.float32: "float32", torch.bfloat16: "bfloat16"}
# CPU flags that change what inductor generates (vector width, bf16/fp16 and AMX kernels); x86 then ARM
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "asimd", "sve", "sve2", "bf16")
RECOMPILE = "re-run `yggc compile` on this machine"
DAMAGED = "the manifest was edited or damaged; re-run `yggc compile`"
CHUNK = 1 << 20


@dataclass
class Manifest:
    """manifest.json; field order is file order (format_version first). Defaults allow a partial one."""

    format_version: int = FORMAT_VERSION
    yggc_version: str = ""
    torch_version: str = ""
    device: str = ""  # "cpu" | "cuda"
    dtype: str = ""  # "float32" | "bfloat16"
    isa: str = ""  # isa_fingerprint() of the machine the artifacts were compiled on
    models: dict[str, dict[str, str]] = field(default_factory=dict)  # name -> {"sha256": weights, "config": ...}
    max_seq: int = 0
    buckets: list[dict[str, Any]] = field(default_factory=list)  # each {"name", ..., optional "file"}
    passes_hash: str = ""
    files: dict[str, str] = field(default_factory=dict)  # relative path -> sha256, all but manifest.json
    created: str = ""  # ISO 8601, UTC
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Manifest:
        """Strict: every field present with the right type, and the fields agree with each other."""
        _check_schema(raw)
        manifest = cls(**raw)
        _check_consistency(manifest)
        return manifest


# ---- this machine ---------------------------------------------------------------------------------

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
    """Where yggc.passes is installed, found without importing (executing) it."""
    spec = importlib.util.find_spec("yggc.passes")
    return [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []


def passes_hash() -> str:
    """sha256 over the compile passes' sources (names and contents, sorted); '' if not installed."""
    dirs = passes_dirs()
    h = hashlib.sha256()
    for d in dirs:
        for f in sorted(d.rglob("*.py")):
            if "__pycache__" not in f.parts:
                h.update(f"{f.relative_to(d).as_posix()}\0{file_sha256(f)}\n".encode())
    return h.hexdigest() if dirs else ""


def environment(device: str, dtype: str | torch.dtype) -> dict[str, Any]:
    """This machine's values of the manifest fields that must match it."""
    require_device(device)
    return {"format_version": FORMAT_VERSION, "yggc_version": __version__, "torch_version": torch.__version__,
            "device": device_kind(device), "dtype": dtype_name(dtype), "isa": isa_fingerprint(device),
            "passes_hash": passes_hash()}


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


# ---- manifest schema ------------------------------------------------------------------------------

def _is_str(v: Any) -> bool:
    return isinstance(v, str) and v != ""


def _is_hex(v: Any) -> bool:
    return isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v) is not None


def _is_models(v: Any) -> bool:
    return isinstance(v, dict) and set(v) == set(MODELS) and all(
        isinstance(e, dict) and set(e) == {"sha256", "config"} and all(map(_is_hex, e.values())) for e in v.values())


def _is_buckets(v: Any) -> bool:
    return isinstance(v, list) and all(
        isinstance(b, dict) and _is_str(b.get("name")) and ("file" not in b or _is_str(b["file"])) for b in v)


def _is_files(v: Any) -> bool:
    return isinstance(v, dict) and all(isinstance(k, str) and _is_hex(h) for k, h in v.items())


SCHEMA: dict[str, tuple[Callable[[Any], bool], str]] = {
    "format_version": (lambda v: type(v) is int, "an integer"),
    "yggc_version": (_is_str, "a version string"),
    "torch_version": (_is_str, "a version string"),
    "device": (lambda v: v in DEVICES, "'cpu' or 'cuda'"),
    "dtype": (lambda v: v in ("float32", "bfloat16"), "'float32' or 'bfloat16'"),
    "isa": (_is_str, "an ISA fingerprint string"),
    "models": (_is_models, 'an object {"verifier"|"drafter": {"sha256": hex, "config": hex}}'),
    "max_seq": (lambda v: type(v) is int and v > 1, "an integer > 1"),
    "buckets": (_is_buckets, 'a list of objects with a "name"'),
    "passes_hash": (_is_hex, "a sha256 hex digest"),
    "files": (_is_files, "an object {relative path: sha256 hex digest}"),
    "created": (_is_str, "an ISO time string"),
    "extra": (lambda v: isinstance(v, dict), "an object"),
}
assert list(SCHEMA) == list(Manifest.__dataclass_fields__), "SCHEMA must list Manifest's fields in order"


def _short(v: Any) -> str:
    text = json.dumps(v) if not isinstance(v, str) else repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_schema(raw: dict[str, Any]) -> None:
    for name in raw:
        if name not in SCHEMA:
            raise YggcError(f"bundle manifest.json has unknown field {name!r}; {DAMAGED}")
    for name, (ok, what) in SCHEMA.items():
        if name not in raw:
            raise YggcError(f"bundle manifest.json is missing field {name!r}; {DAMAGED}")
        if not ok(raw[name]):
            raise YggcError(f"bundle manifest.json field {name!r} is {_short(raw[name])}, not {what}; {DAMAGED}")


def safe_relpath(rel: str) -> bool:
    """A normalised relative POSIX path that stays inside the bundle and is not the manifest."""
    p = PurePosixPath(rel)
    return (rel != "" and rel != MANIFEST and "\\" not in rel and not p.is_absolute()
            and ".." not in p.parts and p.as_posix() == rel)


def models_from_files(files: dict[str, str], name: str) -> dict[str, str]:
    """The models[name] entry implied by the files a manifest lists under name/."""
    weights = {rel[len(name) + 1:]: h for rel, h in files.items()
               if rel.startswith(name + "/") and rel.endswith(".safetensors") and rel.count("/") == 1}
    config = files.get(f"{name}/config.json")
    if config is None or not weights:
        raise YggcError(f"bundle manifest.json lists no {name}/config.json or no {name}/*.safetensors; {DAMAGED}")
    return {"sha256": weights_sha256(weights), "config": config}


def _check_consistency(m: Manifest) -> None:
    for rel in m.files:
        if not safe_relpath(rel):
            raise YggcError(f"bundle manifest.json lists file {rel!r}, which is not a path inside the bundle; {DAMAGED}")
    for b in m.buckets:
        if "file" in b and b["file"] not in m.files:
            raise YggcError(f"bundle bucket {b['name']!r} names file {b['file']}, which manifest.json does not list; "
                            f"{DAMAGED}")
    for name in MODELS:
        if m.models[name] != models_from_files(m.files, name):
            raise YggcError(f"bundle manifest.json models.{name} does not match the {name}/ files it lists; {DAMAGED}")


# ---- reading and validating -----------------------------------------------------------------------

def _bundle_dir(path: str | Path) -> Path:
    root = Path(path)
    if not root.exists():
        raise YggcError(f"{path} is not a yggc bundle: no such directory")
    if not root.is_dir():
        raise YggcError(f"{path} is not a yggc bundle: it is a file, not a directory")
    return root


def read_manifest_json(path: str | Path) -> dict[str, Any]:
    """manifest.json of directory `path` as JSON whose first field is format_version; nothing else checked."""
    f = _bundle_dir(path) / MANIFEST
    if not f.is_file():
        raise YggcError(f"{path} is not a yggc bundle: it has no manifest.json (pass a directory written by "
                        "`yggc compile`)")
    try:
        raw = json.loads(f.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, OSError) as e:
        raise YggcError(f"{f} is not readable JSON ({e}); the bundle is damaged, re-run `yggc compile`") from None
    if not isinstance(raw, dict) or next(iter(raw), None) != "format_version":
        raise YggcError(f"{f} is not a yggc manifest (its first field is not format_version; another program "
                        "wrote it); pass a directory written by `yggc compile`")
    return raw


def load_manifest(path: str | Path) -> Manifest:
    """The bundle's manifest, schema-checked, without comparing it to this machine (for `yggc inspect`)."""
    raw = read_manifest_json(path)
    version = raw["format_version"]
    if type(version) is not int or version != FORMAT_VERSION:
        raise YggcError(f"bundle has format_version {_short(version)} but yggc {__version__} reads format_version "
                        f"{FORMAT_VERSION}; {RECOMPILE}")
    return Manifest.from_dict(raw)


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
