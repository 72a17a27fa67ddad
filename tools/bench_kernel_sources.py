#!/usr/bin/env python3
"""T(W) of one verifier package with yggc's CPU ops built from two source folders, switched call by call in one process.

A change to the kernels in yggc/artifacts/kernels moves a verify call by tenths of a ms, while a shared VM's speed
drifts by more than that between processes. So both builds go into one library: OLD's sources compiled with their
namespace renamed (-Dyggc=yggc_old; only OLD_UNITS, the files the switched ops need), NEW's as they are, and the ops
that dominate a verify call (SWITCHED) registered as switches between the two. The package is lowered once (its graph
does not depend on these sources), its logits must be equal under both builds (a kernel may change speed, never
bits), then the builds and widths take turns call by call. Printed: ms per call (the best of 3 round medians, as
bench_verify_packages.py) and the median of NEW - OLD over adjacent call pairs.

    git worktree add /tmp/old OLD_COMMIT
    python tools/bench_kernel_sources.py -m $(yggc pull smollm2) /tmp/old/yggc/artifacts/kernels \\
        yggc/artifacts/kernels --widths 1,8,16
"""
from __future__ import annotations

import argparse
import ctypes
import statistics
import tempfile
import time
from pathlib import Path

import bench_verify_packages
import torch
from yggc.passes.kernels import kernel_library
from yggc.passes.lower import lower_model
from yggc.passes.profile import bucket_call

from yggc.artifacts import kernel_ops
from yggc.artifacts.timing import best_round_median
from yggc.errors import YggcError

REGISTER = "register_ops.cpp"
# op -> (its registration in register_ops.cpp, the switch that replaces it there)
SWITCHED = {
    "attend_rows_v3": ("&yggc::attend_rows);", "&switch_attend_rows);"),
    "tied_head_v2": ('"tied_head_v2(Tensor x, Tensor packed, int vocab) -> Tensor", &yggc::tied_head);',
                     '"tied_head_v2(Tensor x, Tensor packed, int vocab) -> Tensor", &switch_tied_head);'),
}
# OLD's sources that define the SWITCHED ops and what they call (attend_rows.cpp calls pair_scores.cpp's kernels):
# the other kernels run NEW's build either way, so OLD's copies of them are not compiled
OLD_UNITS = ("attend_rows.cpp", "pair_scores.cpp", "tied_head.cpp")
SWITCHES = """
namespace yggc_old {
at::Tensor attend_rows(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values, const at::Tensor& mask);
at::Tensor tied_head(const at::Tensor& x, const at::Tensor& packed, int64_t vocab);
}  // namespace yggc_old

static int use_old = 0;
extern "C" __attribute__((visibility("default"))) void yggc_use_old(int on) { use_old = on; }

static at::Tensor switch_attend_rows(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const at::Tensor& mask) {
  return use_old ? yggc_old::attend_rows(q, k, v, mask) : yggc::attend_rows(q, k, v, mask);
}

static at::Tensor switch_tied_head(const at::Tensor& x, const at::Tensor& packed, int64_t vocab) {
  return use_old ? yggc_old::tied_head(x, packed, vocab) : yggc::tied_head(x, packed, vocab);
}
"""


def switched_register_ops(source: str) -> str:
    """register_ops.cpp with the SWITCHED ops registered as switches between the two builds."""
    end = "}  // namespace yggc\n"
    if end not in source:
        raise SystemExit(f"bench_kernel_sources: {REGISTER} has no '{end.strip()}' to put the switches after")
    source = source.replace(end, end + SWITCHES, 1)
    for op, (registration, switch) in SWITCHED.items():
        if registration not in source:
            raise SystemExit(f"bench_kernel_sources: {REGISTER} no longer registers {op} as '{registration}'")
        source = source.replace(registration, switch, 1)
    return source


def build(old: Path, new: Path, out: Path, work: Path) -> None:
    """One library: OLD's kernels in namespace yggc_old, NEW's in yggc, NEW's registration with the switches."""
    (work / REGISTER).write_text(switched_register_ops((new / REGISTER).read_text()))
    units = [(old / name, work / f"old_{Path(name).stem}.o", ["-Dyggc=yggc_old"]) for name in OLD_UNITS
             if (old / name).is_file()]  # an older tree may predate one
    units += [(src, work / f"new_{src.stem}.o", []) for src in sorted(new.glob("*.cpp")) if src.name != REGISTER]
    units.append((work / REGISTER, work / "register.o", []))
    try:
        kernel_library.compile_and_link(units, out)
    except YggcError as e:  # OLD's switched ops may call a function of a file not in OLD_UNITS
        raise SystemExit(f"bench_kernel_sources: {e}" + ("; add the file that defines it to OLD_UNITS"
                                                          if "yggc_old::" in str(e) else ""))


def time_builds(args, package: Path, library: Path) -> None:
    model, loaded = bench_verify_packages.prefilled(args, package)
    switch = ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL).yggc_use_old  # the handle kernel_ops.load opened
    logits = {}
    for on in (1, 0):
        switch(on)
        logits[on] = [bench_verify_packages.logits(model, loaded, w, args.context) for w in args.widths]
    for w, a, b in zip(args.widths, logits[1], logits[0]):
        if not torch.equal(a, b):
            raise SystemExit(f"bench_kernel_sources: the builds' logits differ at {w} rows")
    calls = {w: bucket_call(model, w, loaded.layout, args.context) for w in args.widths}
    ms = {(on, w): [] for on in (1, 0) for w in args.widths}
    for _ in range(3):  # warm-up
        for w, call in calls.items():
            call()
    for i in range(args.repeats):
        for w, call in calls.items():
            for on in ((1, 0), (0, 1))[i % 2]:  # which build goes first alternates: a call warms the next one's caches
                switch(on)
                start = time.perf_counter()
                call()
                ms[(on, w)].append(1000 * (time.perf_counter() - start))
    best = {key: best_round_median(s) for key, s in ms.items()}
    print(f"{args.dtype}, {torch.get_num_threads()} threads, {args.context} cached tokens; logits equal at every "
          f"width; ms per call, ops {', '.join(SWITCHED)} switched call by call")
    print("| build | " + " | ".join(f"W={w}" for w in args.widths) + " |")
    print("|---|" + "---|" * len(args.widths))
    for on, name in ((1, "OLD"), (0, "NEW")):
        print(f"| {name} | " + " | ".join(f"{best[(on, w)]:.2f}" for w in args.widths) + " |")
    deltas = [statistics.median(n - o for n, o in zip(ms[(0, w)], ms[(1, w)])) for w in args.widths]
    print("| NEW - OLD, median of pairs | " + " | ".join(f"{d:+.3f}" for d in deltas) + " |")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old", type=Path, help="OLD's kernel sources (a folder like yggc/artifacts/kernels)")
    ap.add_argument("new", type=Path, help="NEW's kernel sources")
    bench_verify_packages.add_call_args(ap, "1,8,16", "", "calls per build and width (at least 3)")
    args = ap.parse_args(argv)
    args.widths = [int(w) for w in args.widths.split(",")]
    for folder in (args.old, args.new):
        if not (folder / REGISTER).is_file():
            ap.error(f"{folder} holds no {REGISTER}: pass a folder of yggc's kernel sources")
    if args.repeats < 3:
        ap.error("--repeats must be at least 3")
    torch.set_num_threads(args.threads)
    with torch.inference_mode(), tempfile.TemporaryDirectory() as tmp:
        work, library = Path(tmp) / "build", Path(tmp) / "build" / kernel_ops.LIBRARY
        work.mkdir()
        build(args.old.resolve(), args.new.resolve(), library, work)
        kernel_ops.load(library)  # first: the ops this process runs, lowering and timing, are the switches
        package = Path(tmp) / "verifier.pt2"
        lower_model(bench_verify_packages.load(args).graph, bench_verify_packages.PACKAGE_WIDTH, args.max_seq, package)
        time_builds(args, package, library)


if __name__ == "__main__":
    main()
