"""Load one lowered package in a child process before the compile loads its buckets in-process.

On an H200 and an H100 (torch 2.11.0+cu130), loading a CUDA package killed the process with SIGSEGV inside
torch's own AOTInductor loader: a compile died minutes into lowering, with no message and nothing but a
signal. The cause was the C++ compiler CXX named (toolchain.py picks one whose packages load); a crash in
the child still becomes one line here instead of a dead compile.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import torch

import yggc

from ..errors import YggcError

CHILD = ("import sys; from pathlib import Path; from yggc.artifacts.aoti_package import load_package; "
         "load_package(Path(sys.argv[1]), cuda=sys.argv[2] == 'cuda')")
TIMEOUT_S = 300


def child_env() -> dict[str, str]:
    """This environment, with the folder holding this process's yggc first on the child's import path."""
    root = str(Path(yggc.__file__).resolve().parents[1])
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))


def probe_load(package: Path, device: str, child: str = CHILD) -> None:
    """Raise one clear YggcError if loading `package` on `device` crashes or fails in a child process."""
    cmd = [sys.executable, "-c", child, str(package), device]
    try:
        done = subprocess.run(cmd, env=child_env(), capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise YggcError(f"loading compiled bucket {package.name} in a test process took over {TIMEOUT_S} s; "
                        "nothing was written") from None
    if done.returncode < 0:
        name = signal.Signals(-done.returncode).name
        raise YggcError(f"loading compiled bucket {package.name} on {device} killed a test process ({name}): "
                        f"torch {torch.__version__}'s AOTInductor loader cannot load the packages it compiled on "
                        "this machine; nothing was written (set CXX to another C++ compiler, compile for the CPU, "
                        "or try another torch)")
    if done.returncode:
        lines = done.stderr.strip().splitlines()
        raise YggcError(f"compiled bucket {package.name} cannot be loaded on {device} in a test process "
                        f"({lines[-1] if lines else f'exit code {done.returncode}'}); nothing was written")
