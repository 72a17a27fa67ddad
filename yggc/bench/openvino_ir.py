"""OpenVINO IR of a checkpoint for the openvino rows: exported by optimum-intel's `optimum-cli export openvino`
(a child process, possibly another virtualenv's) and cached per model and weight format.

The bench exports into BenchConfig.openvino_cache/<model key>-<weight format> once, through a `.part` folder so
that an interrupted export is never taken for a finished one. tools/export_openvino.py runs the same command.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from ..errors import YggcError
from .model_cache import model_key
from .suite import log

WEIGHT_FORMATS = ("fp16", "fp32")
INSTALL_EXPORTER = ("pip install 'optimum-intel[openvino]' (into a separate virtualenv if it would change this "
                    "one's transformers; then pass its optimum-cli with --optimum-cli or $YGGC_OPTIMUM_CLI)")


def weight_format(dtype: str) -> str:
    """The exported weights for a bench dtype: fp32 for float32 (lossless), fp16 for bfloat16 (optimum has no bf16)."""
    return "fp32" if dtype == "float32" else "fp16"


def find_optimum_cli(given: str | Path | None = None) -> str | None:
    """`given` or $YGGC_OPTIMUM_CLI when set (nothing else then), else optimum-cli on PATH or beside this Python."""
    named = given or os.environ.get("YGGC_OPTIMUM_CLI")
    if named:
        return shutil.which(str(named))
    return shutil.which("optimum-cli") or shutil.which(str(Path(sys.executable).parent / "optimum-cli"))


def export_command(model: Path, out: Path, fmt: str, optimum_cli: str = "optimum-cli") -> list[str]:
    if fmt not in WEIGHT_FORMATS:
        raise YggcError(f"--weight-format must be one of {', '.join(WEIGHT_FORMATS)}, got {fmt!r}")
    return [optimum_cli, "export", "openvino", "--model", str(model), "--task", "text-generation-with-past",
            "--weight-format", fmt, str(out)]


def export_ir(model: Path, out: Path, fmt: str, optimum_cli: str | Path | None = None, quiet: bool = False) -> Path:
    """Export `model` (a Hugging Face checkpoint folder) to an OpenVINO IR folder `out`. quiet: the exporter's
    output is shown only when it fails (the bench's stdout is its table)."""
    cli = find_optimum_cli(optimum_cli)
    if cli is None:
        named = optimum_cli or os.environ.get("YGGC_OPTIMUM_CLI")
        where = f"{named} is not an executable" if named else "optimum-cli is not installed"
        raise YggcError(f"{where}; install the OpenVINO exporter with {INSTALL_EXPORTER}")
    cmd = export_command(model, out, fmt, cli)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE if quiet else None, stderr=subprocess.STDOUT if quiet else None,
                          text=True)
    if proc.returncode != 0:
        if quiet:
            print("\n".join(proc.stdout.splitlines()[-20:]), file=sys.stderr)
        raise YggcError(f"exporting {model} to OpenVINO failed (command: {' '.join(cmd)})")
    if not is_ir(out):
        raise YggcError(f"{' '.join(cmd)} wrote no openvino_model.xml/.bin into {out}")
    return out


def is_ir(path: Path) -> bool:
    return (path / "openvino_model.xml").is_file() and (path / "openvino_model.bin").is_file()


def cached_ir(model: Path, cache: Path, fmt: str, optimum_cli: str | Path | None = None) -> Path:
    """The IR of `model` in `cache`, exported there first when absent."""
    out = cache / f"{model_key(model)}-{fmt}"
    if is_ir(out):
        return out
    part = out.with_name(out.name + ".part")
    shutil.rmtree(part, ignore_errors=True)
    log(f"exporting {model} to OpenVINO IR ({fmt} weights) into {out} (once per model and weight format)")
    export_ir(model, part, fmt, optimum_cli, quiet=True)
    shutil.rmtree(out, ignore_errors=True)
    part.rename(out)
    return out
