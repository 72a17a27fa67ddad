"""Compiled artifacts as callables, below the runtime: AOTInductor packages (aoti_package, with their constants
files and page hints), fixed-shape buckets over them (buckets, cache_inputs, cuda_graphs, tensorrt_buckets), the
C++ ops they call (kernel_ops, kernels/), the KV cache layout they are compiled for, devices, wall-clock
timing and what other programs take of the CPU meanwhile (cpu_use). The runtime and the compile passes import these
modules; they import nothing of either."""
