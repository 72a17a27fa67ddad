"""CUDA graph capture of a compiled bucket: one graph per input-shape signature, replayed after.

Only used when the bundle's device is cuda (torch.cuda.is_available(); on CPU torch.cuda.CUDAGraph
exists but cannot be instantiated). Graphs are captured at load time on dummy inputs, before any
token is in the cache: warm-up runs repeat the bucket's cache writes, which is only harmless then.
A call whose shapes were not captured runs the bucket directly. Inputs are copied into static
buffers before each replay and outputs cloned so a later replay cannot overwrite them.
Unverified here: written to the documented torch.cuda.graph API, tested only where CUDA exists.
"""
from __future__ import annotations

from collections.abc import Callable

import torch


class CudaGraphRunner:
    def __init__(self, fn: Callable, warmup: int = 2):
        self.fn, self.warmup = fn, warmup
        self.graphs: dict[tuple, tuple[torch.cuda.CUDAGraph, tuple, object]] = {}

    def _capture(self, args: tuple) -> tuple:
        static_in = tuple(a.clone() for a in args)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(self.warmup):  # kernels' lazy initialisation must happen outside the capture
                self.fn(*static_in)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = self.fn(*static_in)
        return graph, static_in, static_out

    @staticmethod
    def key(args: tuple) -> tuple:
        return tuple((tuple(a.shape), a.dtype) for a in args)

    def capture(self, args: tuple) -> None:
        self.graphs[self.key(args)] = self._capture(args)

    def __call__(self, *args):
        entry = self.graphs.get(self.key(args))
        if entry is None:
            return self.fn(*args)
        graph, static_in, static_out = entry
        for dst, src in zip(static_in, args):
            dst.copy_(src, non_blocking=True)
        graph.replay()
        if isinstance(static_out, torch.Tensor):
            return static_out.clone()
        return tuple(o.clone() for o in static_out)
