"""The aoti-load sections of tools/gpu/gpu_smoke.py: loading several AOTInductor packages on CUDA, step by step.

On an H200 (torch 2.11.0+cu130) a process died of SIGSEGV inside AOTIModelPackageLoader's constructor
while CompiledModel loaded a bundle's buckets (load, bind, capture CUDA graphs, next package).
Each step below is one row, written as it happens, so a crash shows how far the sequence got:

  aoti-load          yggc's loader as it is (no page-out on CUDA)
  aoti-load-pageout  the same, paging out every file mapping each load adds (yggc pages out CPU packages only):
                     a crash here and none above names the page-out as the cause
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

from gpu_smoke_measure import Context, write_random_llama
from gpu_smoke_report import Row, pass_fail

TINY_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
              "vocab_size": 512, "rope_theta": 10000, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
              "max_position_embeddings": 512, "hidden_act": "silu", "torch_dtype": "bfloat16"}
LOAD_WIDTHS = (1, 2)
MAX_SEQ = 64


def tiny_packages(ctx: Context, device: str) -> tuple[object, dict[int, Path]]:
    """The tiny model on `device` and its W = 1, 2 buckets (lowered once per work folder)."""
    import torch
    from yggc.passes.lower import lower_bucket

    from yggc.runtime.loading import load

    folder = ctx.work / f"aoti-load-{device}"
    model = load(write_random_llama(TINY_LLAMA, folder / "ckpt", device), torch.float32, MAX_SEQ, device)
    packages = {w: folder / f"w{w}.pt2" for w in LOAD_WIDTHS}
    for w, path in packages.items():
        if not path.exists():
            partial = path.with_name(f"partial-{path.name}")  # a section killed mid-lowering leaves no w*.pt2
            lower_bucket(model.graph, w, MAX_SEQ, partial, device)
            partial.rename(path)
    return model, packages


def page_out_every_new_mapping() -> None:
    """Make yggc's loader page out every file mapping a load adds, device files and writable ones too."""
    from yggc.artifacts import file_pages

    def every_mapping() -> set[tuple[int, int, str]]:
        with open(file_pages.MAPS) as f:
            fields = [line.split(maxsplit=5) for line in f]
        return {(*(int(x, 16) for x in f[0].split("-")), f[5].rstrip("\n")) for f in fields
                if len(f) == 6 and f[5].startswith("/")}

    file_pages.file_mappings = every_mapping


def inputs(width: int, device: str):
    import torch

    g = torch.Generator().manual_seed(width)
    ids = torch.randint(0, TINY_LLAMA["vocab_size"], (width,), generator=g).to(device)
    pos = torch.arange(width, device=device)
    mask = torch.tril(torch.ones(width, MAX_SEQ, dtype=torch.bool, device=device), diagonal=0)
    return ids, pos, pos.clone(), mask


def sec_aoti_load(ctx: Context, pageout_all: bool, device: str = "cuda") -> Iterator[Row]:
    """Lower, then load and call the two packages the way a bundle load does, one row per step."""
    import torch

    from yggc.artifacts.aoti_package import load_package
    from yggc.artifacts.buckets import CompiledModel, capture_cuda_graphs, load_bucket

    s = "aoti-load-pageout" if pageout_all else "aoti-load"
    t0 = time.time()
    model, packages = tiny_packages(ctx, device)
    yield Row(s, f"lowered tiny Llama W={','.join(map(str, LOAD_WIDTHS))} ({device})", f"{time.time() - t0:.1f} s")
    if pageout_all:
        page_out_every_new_mapping()
    cuda = device == "cuda"
    first = load_bucket(packages[1], model.graph)
    yield Row(s, "load package W=1, bind the weights", "loaded")
    x = inputs(1, device)
    ok = torch.allclose(first(*x), model.graph(*x), atol=1e-4, rtol=1e-4)
    yield Row(s, "call W=1 == eager", "close" if ok else "differs", pass_fail(ok), check=not pageout_all)
    load_package(packages[2], cuda)
    yield Row(s, "load package W=2 (no capture in between)", "loaded")
    if cuda:
        capture_cuda_graphs(first, 1, MAX_SEQ - 1, MAX_SEQ - 1)
        yield Row(s, "capture CUDA graphs of W=1", "captured")
        load_package(packages[2], cuda)
        yield Row(s, "load package W=2 after a capture", "loaded")
    compiled = CompiledModel(model.graph, packages)
    ok = all(torch.allclose(compiled(*inputs(w, device)), model.graph(*inputs(w, device)), atol=1e-4, rtol=1e-4)
             for w in LOAD_WIDTHS)
    yield Row(s, "CompiledModel over both packages == eager", "close" if ok else "differs", pass_fail(ok),
              check=not pageout_all)
