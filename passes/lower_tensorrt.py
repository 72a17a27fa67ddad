"""Lowering with the TensorRT backend: one torch-tensorrt engine package per (model, width) forward bucket.

The graph is exported with its KV caches as inputs (yggc/artifacts/tensorrt_buckets.py), compiled with
`torch_tensorrt.dynamo.compile` for the cache-view range [2, max_seq], and saved in the AOTInductor
format. CUDA only. The export step is checked on CPU by the tests; the TensorRT compile and save are
unverified here (no GPU) and follow the documented torch-tensorrt API.
"""
from __future__ import annotations

from pathlib import Path

import torch
from torch.export import Dim

from ..artifacts.tensorrt_buckets import require_tensorrt
from ..graphs import LlamaGraph
from .lower import example_inputs


def export_cache_as_inputs(graph: LlamaGraph, width: int, max_seq: int, device: str
                           ) -> tuple[torch.export.ExportedProgram, tuple]:
    """graph.forward at `width` with the caches as (mutated) inputs and the cache view S dynamic."""
    caches = tuple(c.clone() for c in graph.cache_tensors())  # not the buffers themselves: no aliasing
    inputs = (*example_inputs(width, max_seq, device), *caches)
    view = Dim("S", min=2, max=max_seq)
    program = torch.export.export(graph, inputs,
                                  dynamic_shapes=(None, None, None, {1: view}, tuple(None for _ in caches)))
    return program, inputs


def lower_bucket_tensorrt(graph: LlamaGraph, width: int, max_seq: int, out_path: Path) -> Path:
    trt = require_tensorrt()
    program, inputs = export_cache_as_inputs(graph, width, max_seq, "cuda")
    dtype = next(graph.parameters()).dtype
    engine = trt.dynamo.compile(program, arg_inputs=list(inputs), enabled_precisions={dtype}, min_block_size=1)
    trt.save(engine, str(out_path), output_format="aot_inductor", arg_inputs=list(inputs), retrace=True)
    return out_path
