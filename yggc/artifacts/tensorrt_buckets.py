"""torch-tensorrt forward buckets (the `--backend tensorrt` option; CUDA only, optional extra).

A TensorRT engine holds its weights but cannot share a mutable buffer with other engines, so the
bucket takes every layer's K/V cache as explicit inputs (`LlamaGraph.forward(..., *caches)`) and
writes them in place: all buckets of a model, and the Inductor draft/verify phases, still read and
write the one cache the runtime owns. Packages are saved in
torch-tensorrt's AOTInductor format, so they load through the package loader (aoti_package.py) like Inductor
buckets once `torch_tensorrt` is imported (it registers the engine-execution op).
Unverified here: written to the documented torch-tensorrt API, tested only where CUDA exists.
"""
from __future__ import annotations

from pathlib import Path

from torch import nn

from ..errors import YggcError
from .aoti_package import load_package
from .cache_inputs import CacheInputBucket


def require_tensorrt():
    try:
        import torch_tensorrt
    except Exception as e:  # ImportError, or a CUDA library missing from a CPU build of torch
        raise YggcError(f"--backend tensorrt needs torch-tensorrt with a CUDA build of torch ({e}); "
                        "`pip install 'yggc[tensorrt]'` on a GPU machine, or use --backend inductor") from None
    return torch_tensorrt


def load_tensorrt_bucket(path: Path, graph: nn.Module) -> CacheInputBucket:
    require_tensorrt()  # registers the engine op the package calls
    return CacheInputBucket(load_package(path, cuda=True), graph)  # CUDA-graph capturable
