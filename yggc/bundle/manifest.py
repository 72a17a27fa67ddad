"""Graph bundles on disk: manifest.json, its strict schema, and reading it.

A bundle is a directory: manifest.json (first field format_version), verifier/ and drafter/
(config.json, tokenizer.json and *.safetensors, the weights, unless the model's O2 package carries
them), artifacts/*.pt2 (an O2 CPU package's constants beside it: artifacts/*.constants.safetensors),
profile.json and plan.json.
Only JSON is read here and nothing is unpickled. Every check fails with a YggcError of one line that
names the field, the bundle's value and the fix.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path, PurePosixPath
from typing import Any

import torch

from .. import __version__
from ..compat import StrEnum
from ..errors import YggcError
from .machine import DEVICES, device_kind, dtype_name, isa_fingerprint, passes_hash, require_device, weights_sha256

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
ARTIFACTS = "artifacts"
MODELS = ("verifier", "drafter")
RECOMPILE = "re-run `yggc compile` on this machine"
DAMAGED = "the manifest was edited or damaged; re-run `yggc compile`"


class OptLevel(StrEnum):
    """`yggc compile --opt`, recorded as manifest.json's extra.opt (passes/lower.py's INDUCTOR_CONFIGS).
    A StrEnum: equal to its plain string and written to JSON as it."""
    O1 = "O1"  # a weightless package per width plus fused draft/verify phase packages
    O2 = "O2"  # one package per model for every width, weights frozen in; eager phases around it (an EAGLE-3
    # head's draft phase: one package)


@dataclass(frozen=True)
class BucketSpec:
    """One compiled program the manifest lists (passes/lower_buckets.py writes them; the runtime loads them)."""
    name: str   # e.g. "verifier_w9", "draft_d3_w2", "verify_d3_w2_v5"
    model: str  # "verifier" | "drafter"
    kind: str   # "forward" (a model forward at one width) | "draft_phase" | "verify_phase" (O1's fused phases)
    width: int  # W: rows per call (forward), or the tree's draft width (phases)
    file: str | None = None  # its package, relative to the bundle
    depth: int | None = None  # D of a phase
    verify: int | None = None  # V of a verify phase
    rank: int | None = None  # the tensor-parallel rank whose slice it is; None: shared by every rank

    def to_json(self) -> dict[str, Any]:
        """The manifest's object for it: the fields that are set, in field order."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> BucketSpec:
        """A schema-checked bucket object (_is_bucket) -> the spec."""
        return cls(**raw)


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
    buckets: list[BucketSpec] = field(default_factory=list)
    passes_hash: str = ""
    files: dict[str, str] = field(default_factory=dict)  # relative path -> sha256, all but manifest.json
    created: str = ""  # ISO 8601, UTC
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "buckets": [b.to_json() for b in self.buckets]}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Manifest:
        """Strict: every field present with the right type, and the fields agree with each other."""
        _check_schema(raw)
        manifest = cls(**{**raw, "buckets": [BucketSpec.from_json(b) for b in raw["buckets"]]})
        _check_consistency(manifest)
        return manifest

    @property
    def weights(self) -> str:
        """What the verifier's linear layers stream (extra.weights: "q4_1", "q8_0 + bfloat16 (1 layer)"; the dtype
        where a bundle does not record it)."""
        return self.extra.get("weights", self.dtype)

    @property
    def block_formats(self) -> dict[str, str]:
        """{verifier linear layer: block format} of the layers that stream blocks (extra.block_formats; empty where the
        verifier's weights are all float)."""
        return dict(self.extra.get("block_formats", {}))

    @property
    def opt(self) -> OptLevel:
        """The optimisation level the bundle was compiled at (extra.opt; O1 where a bundle does not record one)."""
        return OptLevel(self.extra.get("opt", OptLevel.O1))


def environment(device: str, dtype: str | torch.dtype) -> dict[str, Any]:
    """This machine's values of the manifest fields that must match it."""
    require_device(device)
    return {"format_version": FORMAT_VERSION, "yggc_version": __version__, "torch_version": torch.__version__,
            "device": device_kind(device), "dtype": dtype_name(dtype), "isa": isa_fingerprint(device),
            "passes_hash": passes_hash()}


def _is_str(v: Any) -> bool:
    return isinstance(v, str) and v != ""


def _is_hex(v: Any) -> bool:
    return isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v) is not None


def _is_models(v: Any) -> bool:
    return isinstance(v, dict) and set(v) == set(MODELS) and all(
        isinstance(e, dict) and set(e) == {"sha256", "config"} and all(map(_is_hex, e.values())) for e in v.values())


BUCKET_FIELDS = {f.name: f.default for f in fields(BucketSpec)}  # name -> its default (MISSING: required)


def _is_int(v: Any) -> bool:
    return type(v) is int and v >= 0


def _is_bucket(b: Any) -> bool:
    required = {k for k, d in BUCKET_FIELDS.items() if d is not None}
    return (isinstance(b, dict) and required <= set(b) <= set(BUCKET_FIELDS)
            and all(map(_is_str, (b["name"], b["model"], b["kind"], b.get("file", "-")))) and _is_int(b["width"])
            and all(_is_int(b[k]) for k in ("depth", "verify", "rank") if k in b))


def _is_buckets(v: Any) -> bool:
    return isinstance(v, list) and all(map(_is_bucket, v))


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
    "buckets": (_is_buckets, 'a list of objects {"name", "model", "kind", "width", optional "file", "depth", '
                             '"verify", "rank"}'),
    "passes_hash": (_is_hex, "a sha256 hex digest"),
    "files": (_is_files, "an object {relative path: sha256 hex digest}"),
    "created": (_is_str, "an ISO time string"),
    "extra": (lambda v: isinstance(v, dict) and v.get("opt", OptLevel.O1) in tuple(OptLevel),
              'an object (its "opt", where given, "O1" or "O2")'),
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


def _weight_files(m: Manifest, name: str) -> dict[str, str]:
    """{file name: sha256} of the safetensors the manifest lists directly under name/."""
    return {rel[len(name) + 1:]: h for rel, h in m.files.items()
            if rel.startswith(name + "/") and rel.endswith(".safetensors") and rel.count("/") == 1}


def weights_in_bundle(m: Manifest, name: str) -> bool:
    """Whether name/ holds the model's weights; an O2 bundle may carry them in the model's package only."""
    return bool(_weight_files(m, name))


def frozen_into_package(m: Manifest, name: str) -> bool:
    return m.opt == OptLevel.O2 and any(b.model == name and b.kind == "forward" for b in m.buckets)


def _check_model_files(m: Manifest, name: str) -> None:
    """models[name] names the checkpoint name/ was copied from: its config and, if copied, its weights."""
    weights = _weight_files(m, name)
    config = m.files.get(f"{name}/config.json")
    if config is None or (not weights and not frozen_into_package(m, name)):
        raise YggcError(f"bundle manifest.json lists no {name}/config.json or no {name}/*.safetensors; {DAMAGED}")
    if m.models[name]["config"] != config or (weights and m.models[name]["sha256"] != weights_sha256(weights)):
        raise YggcError(f"bundle manifest.json models.{name} does not match the {name}/ files it lists; {DAMAGED}")


def _check_consistency(m: Manifest) -> None:
    for rel in m.files:
        if not safe_relpath(rel):
            raise YggcError(f"bundle manifest.json lists file {rel!r}, which is not a path inside the bundle; {DAMAGED}")
    for b in m.buckets:
        if b.file is not None and b.file not in m.files:
            raise YggcError(f"bundle bucket {b.name!r} names file {b.file}, which manifest.json does not list; "
                            f"{DAMAGED}")
    for name in MODELS:
        _check_model_files(m, name)


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
