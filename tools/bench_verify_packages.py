#!/usr/bin/env python3
"""T(W), the verifier's cost per call of W rows, of O2 packages lowered by different checkouts, side by side.

    python tools/bench_verify_packages.py lower -m $(yggc pull smollm2) -o NEW.pt2           # in each checkout
    python tools/bench_verify_packages.py time -m $(yggc pull smollm2) OLD.pt2 NEW.pt2 --widths 1,4,8,9,16

`lower` writes the package `yggc compile --opt O2` makes for the model (all widths 1..64 in one package). `time`
loads every package into one process, prefills `--context` tokens into each, checks that every package gives the
same logits at every width (a kernel may change speed, never bits; with `--other-ops`, where an op's version
changed, it reports the argmax agreement instead), then times bucket calls with the packages and widths taking turns
call by call (a shared VM's speed drifts within minutes): the best of 3 round medians. Each op runs the build of
the first package's library that has it, so an older package listed first keeps its own kernels. A package whose
constants file holds the same bytes as the first package's is bound to the first's file (a copy of the package
beside a link to it), so every package reads its weights from the same physical pages: on a VM two copies of the
same weights put one program measurably apart at every width (other physical pages).
"""
from __future__ import annotations

import argparse
import filecmp
import shutil
import tempfile
from pathlib import Path

import torch
from yggc.passes import quant_linear
from yggc.passes.lower import lower_model
from yggc.passes.profile import bucket_call

from yggc.artifacts import constants_map, kernel_ops
from yggc.artifacts.buckets import CompiledModel
from yggc.artifacts.cache_layout import causal_rows, prefill
from yggc.artifacts.timing import steady_ms_each
from yggc.runtime import loading

PACKAGE_WIDTH = 64  # the verifier package's widest call, as a compile lowers it


def load(args) -> loading.LoadedModel:
    """The verifier (-m: a folder or a .gguf), its linear layers streaming --weights' blocks where it names a format."""
    folder = loading.model_dir(args.model)
    loaded = loading.load(folder, loading.parse_dtype(args.dtype), args.max_seq)
    quant_linear.load_blocks(loaded.graph, folder, args.weights)
    return loaded


def prefilled(args, package: Path) -> tuple[CompiledModel, loading.LoadedModel]:
    loaded = load(args)
    model = CompiledModel(loaded.graph, {1: package}, "O2", package_width=PACKAGE_WIDTH)
    ids = torch.randint(0, loaded.graph.cfg.vocab_size, (args.context,), generator=torch.Generator().manual_seed(0))
    prefill(model, ids.tolist(), 0, loaded.layout, PACKAGE_WIDTH)
    return model, loaded


def logits(model: CompiledModel, loaded: loading.LoadedModel, width: int, context: int) -> torch.Tensor:
    ids = torch.randint(0, loaded.graph.cfg.vocab_size, (width,), generator=torch.Generator().manual_seed(width))
    slots = torch.arange(context, context + width)
    out = model(ids, slots, slots, causal_rows(slots, loaded.layout.view(context + width)))
    return out[0] if isinstance(out, tuple) else out  # [W, vocab]


def one_constants(packages: list[Path], into: Path) -> list[Path]:
    """The packages to load: each one whose constants hold the first's bytes as a copy in `into` beside links to
    the first's constants file and to its own kernel library; the others as they are."""
    first = constants_map.constants_path(packages[0])
    out = [packages[0]]
    for i, package in enumerate(packages[1:], 1):
        own = constants_map.constants_path(package)
        if not (first.exists() and own.exists() and filecmp.cmp(first, own, shallow=False)):
            out.append(package)
            continue
        (into / str(i)).mkdir()
        copy = Path(shutil.copy(package, into / str(i) / package.name))
        constants_map.constants_path(copy).symlink_to(first)
        if package.with_name(kernel_ops.LIBRARY).exists():
            copy.with_name(kernel_ops.LIBRARY).symlink_to(package.with_name(kernel_ops.LIBRARY))
        out.append(copy)
    return out


def time_packages(args) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        loaded = one_constants([Path(p).resolve() for p in args.packages], Path(tmp))
        models = {p: prefilled(args, path) for p, path in zip(args.packages, loaded)}  # ops: first library with them
        time_models(args, models)


def time_models(args, models: dict) -> None:
    agree = []
    for w in args.widths:
        first, *rest = (logits(m, loaded, w, args.context) for m, loaded in models.values())
        if not all(torch.equal(first, other) for other in rest):
            if not args.other_ops:
                raise SystemExit(f"the packages' logits differ at {w} rows (pass --other-ops where an op's version "
                                 "changed)")
            agree.append(min((other.argmax(-1) == first.argmax(-1)).float().mean().item() for other in rest))
    calls = {(p, w): bucket_call(m, w, loaded.layout, args.context) for p, (m, loaded) in models.items()
             for w in args.widths}
    ms = steady_ms_each(calls, args.repeats)
    same = "logits equal at every width" if not agree else f"argmax agreement with the first >= {min(agree):.3f}"
    print(f"{args.dtype}, {torch.get_num_threads()} threads, {args.context} cached tokens; {same}; ms per call")
    print("| package | " + " | ".join(f"W={w}" for w in args.widths) + " |")
    print("|---|" + "---|" * len(args.widths))
    for p in args.packages:
        print(f"| {p} | " + " | ".join(f"{ms[(p, w)]:.2f}" for w in args.widths) + " |")


def add_call_args(ap: argparse.ArgumentParser, widths: str, prefix: str, repeats: str) -> None:
    """The model and the calls to time: -m, --dtype, --widths, --context, --max-seq, --repeats, --threads."""
    ap.add_argument("-m", "--model", required=True, help="the verifier checkpoint folder")
    ap.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"])
    ap.add_argument("--widths", default=widths, help=f"{prefix}rows per call, comma-separated")
    ap.add_argument("--context", type=int, default=256, help=f"{prefix}cached tokens before the rows")
    ap.add_argument("--max-seq", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=60, help=prefix + repeats)
    ap.add_argument("--threads", type=int, default=2, help="torch threads")
    ap.add_argument("--weights", default="", choices=["", "q8_0", "q4_0", "q4_1", "file"],
                    help="the linear layers' block format (file: a .gguf's own); default: float, as --dtype")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("command", choices=["lower", "time"])
    ap.add_argument("packages", nargs="*", help="time: the packages to compare")
    ap.add_argument("-o", "--out", help="lower: the package to write")
    add_call_args(ap, "1,4,8,9,16", "time: ", "calls per package and width")
    ap.add_argument("--other-ops", action="store_true",
                    help="time: packages may call different op versions (different bits): report the argmax "
                         "agreement instead of requiring equal logits")
    args = ap.parse_intermixed_args(argv)
    args.widths = [int(w) for w in args.widths.split(",")]
    torch.set_num_threads(args.threads)
    with torch.inference_mode():
        if args.command == "lower":
            if not args.out:
                ap.error("lower needs -o/--out")
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            lower_model(load(args).graph, PACKAGE_WIDTH, args.max_seq, Path(args.out))
        elif len(args.packages) < 2:
            ap.error("time needs two or more packages")
        else:
            time_packages(args)


if __name__ == "__main__":
    main()
