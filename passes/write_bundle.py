"""Write a graph bundle atomically: fill a hidden temporary directory next to the output, hash every
file, write manifest.json, fsync, rename into place. Any exception (KeyboardInterrupt included)
deletes the temporary directory, a stop request (SIGTERM) deletes it at once, and `clean_stale_partials`
removes what a SIGKILLed compile left.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from yggc.bundle import (
    MANIFEST,
    MODELS,
    Manifest,
    environment,
    file_sha256,
    model_hashes,
    read_manifest_json,
    safe_relpath,
)
from yggc.errors import YggcError

MODEL_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
WEIGHT_FILES = ("*.safetensors", "*.index.json")
OWNED = ("format_version", "yggc_version", "torch_version", "isa", "passes_hash", "files")  # the writer computes


def _temp_name(out: Path, kind: str) -> Path:
    return out.parent / f".{out.name}.{kind}-{os.getpid()}-{secrets.token_hex(4)}"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    return True


def clean_stale_partials(out_path: str | Path) -> list[Path]:
    """Remove `.{name}.partial-PID-*` dirs of dead compiles; an `.old-PID-*` left mid-swap goes back or away."""
    out = Path(out_path).absolute()
    if not out.parent.is_dir():
        return []
    pattern = re.compile(rf"\.{re.escape(out.name)}\.(partial|old)-(\d+)-[0-9a-f]+")
    removed = []
    for p in sorted(out.parent.iterdir()):
        match = pattern.fullmatch(p.name)
        if not match or pid_alive(int(match[2])):
            continue
        if match[1] == "old" and not out.exists():
            os.rename(p, out)  # killed between the two renames of an overwrite: put the old bundle back
            continue
        shutil.rmtree(p, ignore_errors=True)
        removed.append(p)
    return removed


def _check_target(out: Path, overwrite: bool) -> None:
    if not out.exists():
        return
    if not overwrite:
        raise YggcError(f"{out} already exists; choose another output path or allow overwriting it")
    if out.is_dir() and not any(out.iterdir()):
        return
    try:
        read_manifest_json(out)
    except YggcError:
        raise YggcError(f"{out} exists and is not a yggc bundle; refusing to overwrite it, "
                        "choose another output path") from None


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _file_mode() -> int:
    """The mode a file created now gets (0o666 less the umask)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _hash_tree(root: Path) -> dict[str, str]:
    """{relative path: sha256} of every file but the manifest, each fsynced and given the mode any new file gets
    (safetensors' save_file writes 0600 files, which a bundle shared with other users could not read);
    symlinks are refused."""
    files, mode = {}, _file_mode()
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_symlink():
            raise YggcError(f"bundle file {rel} is a symlink; copy the file into the bundle instead")
        if p.is_file() and rel != MANIFEST:
            p.chmod(mode)
            files[rel] = file_sha256(p)
        _fsync(p)
    return files


def _assemble(fields: Manifest | dict[str, Any], files: dict[str, str], models: dict[str, dict[str, str]]
              ) -> Manifest:
    """Caller's fields + what the writer computes (`models`: the hashes of the checkpoints copied in) -> a
    schema-checked Manifest."""
    given = fields.to_dict() if isinstance(fields, Manifest) else dict(fields)
    given = {k: v for k, v in given.items() if v is not None and not (isinstance(v, (str, dict, list)) and not v)}
    if "device" not in given or "dtype" not in given:
        raise ValueError("finish() needs at least device and dtype")
    computed = {**environment(given["device"], given["dtype"]), "files": files}
    for k in OWNED:
        if k in given and given[k] != computed[k]:
            raise ValueError(f"finish() got {k}={given[k]!r} but the writer computes {computed[k]!r}; leave it out")
    if set(models) != set(MODELS):
        raise ValueError(f"copy_model_dir() the {' and '.join(MODELS)} before leaving the with block")
    if given.get("models", models) != models:
        raise ValueError("finish() got models hashes that do not match the checkpoints copied into the bundle")
    merged = {**Manifest().to_dict(), **given, **computed, "models": models}
    merged["created"] = merged["created"] or datetime.now(timezone.utc).isoformat(timespec="seconds")
    return Manifest.from_dict(merged)


_stop_requested = False
_open_roots: set[Path] = set()  # the partial directories of the writers now open in this process


def request_stop() -> None:
    """A termination signal arrived: from now on no bundle is committed, and every open writer's partial directory
    goes now. The writer does not rely on the KeyboardInterrupt the handler raises: it is printed and dropped when
    it lands inside a weakref or GC callback, and a process that dies while it unwinds never reaches the cleanup
    (a compile SIGTERMed under load has left its partial directory behind by a path that did not reproduce)."""
    global _stop_requested
    _stop_requested = True
    for root in list(_open_roots):
        shutil.rmtree(root, ignore_errors=True)


def stop_requested() -> bool:
    return _stop_requested


class BundleWriter:
    """`with BundleWriter(out) as w:` fill w.root, call w.finish(fields); the bundle appears at out on exit."""

    def __init__(self, out_path: str | Path, overwrite: bool = False):
        self.out = Path(out_path).absolute()
        self.overwrite = overwrite
        self.root: Path | None = None
        self.manifest: Manifest | None = None  # set once the bundle is in place
        self._fields: Manifest | dict[str, Any] | None = None
        self.models: dict[str, dict[str, str]] = {}  # name -> hashes of the checkpoint copy_model_dir copied

    def __enter__(self) -> BundleWriter:
        clean_stale_partials(self.out)
        _check_target(self.out, self.overwrite)  # fail before a long compile, not after
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.root = _temp_name(self.out, "partial")
        self.root.mkdir()
        _open_roots.add(self.root)
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            if _stop_requested and (exc_type is None or not issubclass(exc_type, KeyboardInterrupt)):
                # terminated: nothing is committed, and an error after the request (a file written into the
                # directory the request removed) is its consequence: an interrupt, not a traceback
                raise KeyboardInterrupt from exc
            if exc_type is None:
                self._commit()
        finally:
            _open_roots.discard(self.root)
            if self.root is not None and self.root.exists():
                shutil.rmtree(self.root, ignore_errors=True)
        return False

    def path(self, rel: str) -> Path:
        """Absolute path for bundle file `rel` (parents created)."""
        if self.root is None:
            raise RuntimeError("BundleWriter.path() outside its with block")
        if not safe_relpath(rel):
            raise ValueError(f"{rel!r} is not a relative path inside the bundle (or is the manifest)")
        p = self.root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def write_json(self, rel: str, obj: Any) -> Path:
        p = self.path(rel)
        p.write_text(json.dumps(obj, indent=2) + "\n", encoding="utf-8")
        return p

    def copy_model_dir(self, src: str | Path, name: str, weights: bool = True) -> Path:
        """Copy config.json, tokenizer files and (weights=True) *.safetensors and *.index.json of checkpoint
        `src` to name/. weights=False: compiled packages carry the weights; the manifest still records
        the checkpoint's hashes."""
        src = Path(src)
        if not (src / "config.json").is_file() or not any(src.glob("*.safetensors")):
            raise YggcError(f"model directory {src} needs config.json and *.safetensors; pass a Hugging Face "
                            "checkpoint folder")
        dest = self.path(f"{name}/config.json").parent
        for pattern in MODEL_FILES + (WEIGHT_FILES if weights else ()):
            for f in sorted(src.glob(pattern)):
                if f.is_file():
                    shutil.copyfile(f, dest / f.name)
        self.models[name] = model_hashes(src)
        return dest

    def finish(self, manifest_fields: Manifest | dict[str, Any]) -> None:
        """Fields for manifest.json (device, dtype, max_seq, buckets, extra...); written on exit."""
        self._fields = manifest_fields

    def _commit(self) -> None:
        if self._fields is None:
            raise ValueError("BundleWriter: call finish(manifest_fields) before leaving the with block")
        manifest = _assemble(self._fields, _hash_tree(self.root), self.models)
        with open(self.root / MANIFEST, "w", encoding="utf-8") as f:
            f.write(json.dumps(manifest.to_dict(), indent=2) + "\n")
            f.flush()
            os.fsync(f.fileno())
        _fsync(self.root)
        self._swap_in()
        _fsync(self.out.parent)
        self.manifest = manifest

    def _swap_in(self) -> None:
        """Rename root to out; an existing bundle is renamed aside first and deleted after."""
        _check_target(self.out, self.overwrite)  # again: something may have appeared during the compile
        if not self.out.exists():
            os.rename(self.root, self.out)
            return
        old = _temp_name(self.out, "old")
        os.rename(self.out, old)
        try:
            os.rename(self.root, self.out)
        except BaseException:
            os.rename(old, self.out)
            raise
        shutil.rmtree(old, ignore_errors=True)
