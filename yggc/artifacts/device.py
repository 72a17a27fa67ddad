"""Device facts the cost model needs, and the device a bundle runs on.

On CUDA, cuda-python (the `[cuda]` extra) reads the memory clock and bus width for the peak memory
bandwidth and the SM count; without it torch's device properties give what they can. These paths
follow the documented APIs and are unverified here (no GPU on the development machines).
"""
from __future__ import annotations

import torch

from ..errors import YggcError


def resolve_device(device: str) -> torch.device:
    if device == "cuda" and not torch.cuda.is_available():
        raise YggcError("device cuda needs a CUDA GPU, and torch.cuda.is_available() is False here; "
                        "use --device cpu or run on a GPU machine")
    return torch.device(device)


def cuda_properties(index: int = 0) -> dict:
    """SM count and peak memory bandwidth (GB/s) of CUDA device `index`."""
    props = torch.cuda.get_device_properties(index)
    out = {"name": props.name, "sm_count": props.multi_processor_count,
           "capability": f"sm_{props.major}{props.minor}", "memory_gb": props.total_memory / 2**30}
    try:
        from cuda.bindings import runtime as cudart
    except ImportError:
        return out
    err, clock_khz = cudart.cudaDeviceGetAttribute(cudart.cudaDeviceAttr.cudaDevAttrMemoryClockRate, index)
    err2, bus_bits = cudart.cudaDeviceGetAttribute(cudart.cudaDeviceAttr.cudaDevAttrGlobalMemoryBusWidth, index)
    if err == err2 == cudart.cudaError_t.cudaSuccess:
        out["peak_bandwidth_gbs"] = 2 * clock_khz * 1e3 * bus_bits / 8 / 1e9  # DDR: two transfers per clock
    return out
