"""GPU readiness smoke (issue #21): one command that runs yggc's CUDA half and reports it in one table.

    PYTHONPATH=. python tools/gpu/gpu_smoke.py [--sections demo-bf16,smollm2] [--budget-s 500] [--json PATH]

Runs from a source checkout with the machine's own torch (>= 2.11) and no `pip install`: yggc,
yggc.graphs (./graphs) and yggc.passes (./passes) are made importable from the tree (an installed
yggc is used as it is). Each section runs in its own child process (--in-process: not), so a crash
or a poisoned CUDA context costs one section, not the run; a failing section is one FAIL row.
Before any section that lowers packages, a toolchain row names the C++ compiler whose packages load
(passes/toolchain.py); the sections build with it.

  device       GPU, torch/CUDA/triton; CudaGraphRunner replay == direct call                 (check)
  cuda-python  yggc.artifacts.device.cuda_properties() via cuda.bindings; peak vs measured bandwidth
  aoti-load    two packages of a tiny Llama loaded, called and graph-captured step by step, one row each
               (gpu_smoke_load.py; aoti-load-pageout, only when named: the same, paging out CUDA mappings too)
  aoti-variants  only when named: five packages that differ in one thing each (weights in or out of the
               library, O1 or O2), each loaded and called in its own process with a native backtrace on a
               crash (gpu_smoke_variants.py)
  tensorrt     torch-tensorrt verifier bucket W=1: AR tokens == eager AR       (check; SKIP if absent)
  demo-bf16    demo pair -> bundle on cuda (D4 W2 V8, Inductor buckets + CUDA graphs); greedy
               compiled AR and yggc-full tokens == eager AR (checks); TPOT, mean accepted length,
               host share of a yggc-full iteration
  demo-fp32    the same in float32
  demo-curve   demo verifier T(W) for --widths: eager / AOTInductor / AOTInductor + CUDA graphs
  smollm2      random SmolLM2-135M-shaped Llama (tools/gpu/smollm2_135m_config.json), bf16: T(W) and
               AR TPOT eager / compiled / compiled + graphs (tokens compared, not a check: random
               weights leave near-ties that kernel rounding may flip)

Sections that would start after --budget-s are SKIP rows: run them with --sections in a second
command. The table goes to stdout, progress and tracebacks to stderr; the results are also written
as JSON to --json PATH and to $OUT/gpu_smoke.json when the env var OUT is set.

Exit codes: 0 every equality check passed and no row is FAIL; 1 otherwise; 77 no CUDA device
(one line on stdout, nothing else is run or written).
"""
from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
ROOT = TOOLS.parent.parent  # tools/gpu/ -> the repository
if str(TOOLS) not in sys.path:
    sys.path.insert(0, str(TOOLS))

import gpu_smoke_report as report  # noqa: E402
from gpu_smoke_load import sec_aoti_load  # noqa: E402
from gpu_smoke_measure import (  # noqa: E402
    T0,
    WIDTHS,
    Context,
    ar_rows,
    copy_bandwidth_gbs,
    curve_rows,
    decode_all,
    host_share_row,
    log,
    lower_widths,
    variants,
    write_random_llama,
)
from gpu_smoke_report import Row, one_line, pass_fail, version_of  # noqa: E402
from gpu_smoke_variants import sec_aoti_variants  # noqa: E402

SMOLLM2_CONFIG = TOOLS / "smollm2_135m_config.json"
DEMO_SHAPE = (4, 2, 8)  # D, W, V: the README's demo bundle
GRACE_S = 30  # a child still running this long past the budget is killed


def use_source_tree(root: Path = ROOT) -> None:
    """Make yggc, yggc.graphs and yggc.passes importable without `pip install`. An installed yggc
    wins; else yggc comes from `root` and graphs/, passes/ are registered under its namespace (with
    a spec whose search location is the folder, so find_spec("yggc.passes") finds the sources)."""
    try:
        import yggc
    except ImportError:
        sys.path.insert(0, str(root))
        import yggc
    for sub in ("graphs", "passes"):
        name = f"yggc.{sub}"
        if name in sys.modules or importlib.util.find_spec(name) is not None:
            continue
        spec = importlib.util.spec_from_file_location(name, root / sub / "__init__.py",
                                                      submodule_search_locations=[str(root / sub)])
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        setattr(yggc, sub, module)
        spec.loader.exec_module(module)


def heldout_prompts(n: int) -> list[str]:
    from yggc.bench.prompt_sets import load_prompt_texts

    return load_prompt_texts(None)[0][:n]  # the demo pair's held-out prompts


def sec_curve(ctx: Context, which: str) -> Iterator[Row]:
    """T(W) of the demo verifier, or T(W) and AR TPOT of a random SmolLM2-135M-shaped model; bf16."""
    import torch

    from yggc.runtime.autoregressive import PREFILL_CHUNK
    from yggc.runtime.loading import demo_pair_dirs, load

    prompts = None
    if which == "smollm2":
        cfg = json.loads(SMOLLM2_CONFIG.read_text())
        model = load(write_random_llama(cfg, ctx.work / "smollm2-135m-random", "cuda"), torch.bfloat16, ctx.max_seq, "cuda")
        n = sum(p.numel() for p in model.graph.parameters())
        yield Row(which, "model", f"{n / 1e6:.1f}M parameters, bf16 ({2 * n / 2**20:.0f} MiB), random weights")
        g = torch.Generator().manual_seed(0)
        prompts = [torch.randint(1, cfg["vocab_size"], (40,), generator=g).tolist() for _ in range(ctx.prompts)]
    else:
        model = load(demo_pair_dirs()[0], torch.bfloat16, ctx.max_seq, "cuda")
    ar_widths = {1, PREFILL_CHUNK} if prompts else set()
    packages, missing = lower_widths(ctx, model.graph, sorted(set(ctx.widths) | ar_widths), which)
    yield from curve_rows(which, ctx, model, packages, missing)
    if prompts and ar_widths <= set(packages):
        makers = variants(model.graph, {w: packages[w] for w in ar_widths})
        yield from ar_rows(which, ctx, model, makers, prompts, check=False)  # random weights: near-ties may flip
    elif prompts:
        yield Row(which, "AR decoding", f"not run: no bucket for W=1 and W={PREFILL_CHUNK}", "SKIP")


# -- the other sections ----------------------------------------------------------------------------
def sec_device(ctx: Context) -> Iterator[Row]:
    import torch

    from yggc.artifacts.cuda_graphs import CudaGraphRunner

    p = torch.cuda.get_device_properties(0)
    yield Row("device", "gpu", f"{p.name}, {p.total_memory / 2**30:.1f} GiB, sm_{p.major}{p.minor}, "
              f"{p.multi_processor_count} SMs")
    yield Row("device", "torch / CUDA / triton", f"{torch.__version__} / {torch.version.cuda} / {version_of('triton')}")
    w = torch.randn(512, 512, device="cuda")

    def fn(x):
        return torch.relu(x @ w)

    runner = CudaGraphRunner(fn)
    runner.capture((torch.zeros(16, 512, device="cuda"),))
    ok = len(runner.graphs) == 1 and all(torch.equal(runner(x), fn(x)) for x in torch.randn(3, 16, 512, device="cuda"))
    yield Row("device", "CudaGraphRunner replay == direct call (matmul + relu, 3 inputs)",
              "equal" if ok else "differs", pass_fail(ok), check=True)


def sec_cuda_python(ctx: Context) -> Iterator[Row]:
    from yggc.artifacts.device import cuda_properties

    s = "cuda-python"
    yield Row(s, "packages", ", ".join(f"{d} {version_of(d)}" for d in ("cuda-python", "cuda-bindings", "cuda-core")))
    try:
        from cuda.bindings import runtime  # noqa: F401  (what yggc.artifacts.device imports)
        missing = ""
    except ImportError as e:
        missing = one_line(e)
    props = cuda_properties()
    yield Row(s, "cuda_properties()", json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in props.items()}))
    measured, peak = copy_bandwidth_gbs(), props.get("peak_bandwidth_gbs")
    yield Row(s, "measured copy bandwidth (read + write)", f"{measured:.0f} GB/s")
    if missing:
        yield Row(s, "peak bandwidth from cuda.bindings", f"cuda.bindings not importable ({missing})", "SKIP")
    else:  # a wrong clock/bus formula shows as a peak below what a plain copy reaches
        yield Row(s, "peak bandwidth from cuda.bindings (>= measured copy)",
                  f"{peak:.0f} GB/s, copy reaches {measured / peak:.0%}" if peak else "missing: the attribute query failed",
                  pass_fail(bool(peak) and measured <= 1.05 * peak))


def sec_tensorrt(ctx: Context) -> Iterator[Row]:
    try:
        import torch_tensorrt
    except Exception as e:  # ImportError, or a CUDA library it cannot find
        yield Row("tensorrt", "torch-tensorrt", f"not installed ({one_line(e)})", "SKIP")
        return
    import torch
    from yggc.passes.lower_tensorrt import lower_bucket_tensorrt

    from yggc.artifacts.buckets import CompiledModel
    from yggc.runtime.loading import demo_pair_dirs, load

    yield Row("tensorrt", "torch-tensorrt", torch_tensorrt.__version__)
    model, t0 = load(demo_pair_dirs()[0], torch.float32, ctx.max_seq, "cuda"), time.time()
    path = lower_bucket_tensorrt(model.graph, 1, ctx.max_seq, ctx.work / "trt_verifier_w1.pt2")
    yield Row("tensorrt", "lower demo verifier W=1, float32", f"{time.time() - t0:.1f} s")
    makers = {"eager": lambda: model.graph,
              "tensorrt+graphs": lambda: CompiledModel(model.graph, {1: path}, backend="tensorrt")}
    prompts = [model.tokenizer.encode(t).ids for t in heldout_prompts(ctx.prompts)]
    yield from ar_rows("tensorrt", ctx, model, makers, prompts, check=True)


def sec_demo(ctx: Context, dtype_name: str) -> Iterator[Row]:
    from yggc.passes.pipeline import CompileJob, compile_bundle

    from yggc.plan.shape import TreeShape
    from yggc.runtime import Runtime
    from yggc.runtime.autoregressive import AutoregressiveDecoder
    from yggc.runtime.loading import demo_pair_dirs, parse_dtype

    s = "demo-" + {"bfloat16": "bf16", "float32": "fp32"}[dtype_name]
    job = CompileJob(*demo_pair_dirs(), ctx.work / f"{s}.bundle", TreeShape(*DEMO_SHAPE), dtype=parse_dtype(dtype_name),
                     max_seq=ctx.max_seq, device="cuda", overwrite=True, profile_repeats=5)
    t0 = time.time()
    compile_bundle(job, log=log)
    yield Row(s, "compile_bundle, device cuda, D{} W{} V{}".format(*DEMO_SHAPE), f"{time.time() - t0:.1f} s")
    t0 = time.time()
    rt = Runtime.load(job.out)
    graphs = sum(len(getattr(r, "graphs", {})) for m in rt.compiled.values() for r in m.runners.values())
    yield Row(s, "Runtime.load", f"{time.time() - t0:.2f} s, {graphs} CUDA graphs captured")
    prompts = [rt.encode(t) for t in heldout_prompts(ctx.prompts)]
    decoders = {"ar-eager": AutoregressiveDecoder(rt.verifier.graph, rt.verifier.layout),
                "ar-compiled+graphs": rt.decoder(speculative=False), "yggc-full": rt.decoder()}
    runs = decode_all(decoders, prompts, ctx.new_tokens, ctx.repeats)
    yield from report.decode_rows(s, runs, len(prompts), ctx.new_tokens, check=True)
    yield host_share_row(s, rt, prompts[0])


# name -> (section, whether it holds equality checks: one that fails or is skipped then fails them)
SECTIONS: dict[str, tuple[Callable[[Context], Iterator[Row]], bool]] = {
    "device": (sec_device, True), "cuda-python": (sec_cuda_python, False),
    "aoti-load": (lambda c: sec_aoti_load(c, pageout_all=False), True),
    "aoti-load-pageout": (lambda c: sec_aoti_load(c, pageout_all=True), False),
    "aoti-variants": (sec_aoti_variants, False), "tensorrt": (sec_tensorrt, True),
    "demo-bf16": (lambda c: sec_demo(c, "bfloat16"), True), "demo-fp32": (lambda c: sec_demo(c, "float32"), True),
    "demo-curve": (lambda c: sec_curve(c, "demo-curve"), False), "smollm2": (lambda c: sec_curve(c, "smollm2"), False)}


NO_PACKAGES = {"device", "cuda-python"}  # the sections that lower nothing
DIAGNOSTIC = {"aoti-load-pageout", "aoti-variants"}  # run only when named: they may crash on purpose
DEFAULT_SECTIONS = [name for name in SECTIONS if name not in DIAGNOSTIC]


# -- running sections ------------------------------------------------------------------------------
def run_section(name: str, ctx: Context, rows_file: Path | None = None) -> list[Row]:
    """The section's rows; an exception ends it with one FAIL row. Rows go to rows_file as they come."""
    fn, checks = SECTIONS[name]
    rows, t0 = [], time.time()

    def emit(row: Row) -> None:
        rows.append(row)
        if rows_file:
            report.append_row(rows_file, row)

    log(f"section {name}")
    try:
        for row in fn(ctx):
            emit(row)
    except Exception as e:
        traceback.print_exc(file=sys.stderr)
        emit(Row(name, "error", one_line(e), "FAIL", check=checks))
    emit(Row(name, "wall time", f"{time.time() - t0:.1f} s"))
    return rows


def run_child(name: str, ctx: Context, workload: list[str]) -> list[Row]:
    """The section in a child process (its stdout joins our stderr: stdout carries only the table)."""
    rows_file = ctx.work / f"rows-{name}.jsonl"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--sections", name, "--work", str(ctx.work),
           "--child-rows", str(rows_file), "--deadline", repr(ctx.deadline), *workload]
    try:
        rc = subprocess.run(cmd, stdout=2, timeout=max(1.0, ctx.deadline - time.time() + GRACE_S)).returncode
    except subprocess.TimeoutExpired:
        rc = None
    rows = report.read_rows(rows_file)
    return rows if rc == 0 else [*rows, report.child_failure_row(name, rc, SECTIONS[name][1], GRACE_S)]


def toolchain_row() -> Row:
    """Pick the C++ compiler whose CUDA packages load (passes/toolchain.py); the section children inherit it as
    CXX. On an H100 image the environment's CXX (a wrapper) built packages that crashed torch's loader."""
    from yggc.passes.toolchain import configured_compiler, loadable_compiler

    from yggc.errors import YggcError

    first = configured_compiler()
    try:
        cxx = loadable_compiler("cuda", log=log)
    except YggcError as e:
        return Row("toolchain", "C++ compiler whose packages load", str(e), "FAIL")
    os.environ["CXX"] = cxx
    return Row("toolchain", "C++ compiler whose packages load",
               cxx if cxx == first else f"{cxx} (packages built by CXX={first} do not load)", "PASS")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__.split("\n\n", 2)[2],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sections", default=",".join(DEFAULT_SECTIONS),
                    help=f"comma list of {', '.join(SECTIONS)} (default all but {', '.join(sorted(DIAGNOSTIC))})")
    ap.add_argument("--json", help="also write the results here (and to $OUT/gpu_smoke.json when OUT is set)")
    ap.add_argument("--budget-s", type=float, default=500.0, help="no section starts after this many seconds")
    ap.add_argument("--work", type=Path, help="folder for bundles and checkpoints (default: a temporary one, removed)")
    ap.add_argument("--in-process", action="store_true", help="run the sections in this process, not one child each")
    ap.add_argument("--max-seq", type=int, default=256)
    ap.add_argument("-n", "--new-tokens", type=int, default=96, help="tokens generated per prompt")
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=2, help="timed rounds after one warm-up round")
    ap.add_argument("--widths", default=",".join(map(str, WIDTHS)), help="widths of the T(W) curves")
    ap.add_argument("--child-rows", help=argparse.SUPPRESS)
    ap.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.sections = [s for s in args.sections.split(",") if s]
    if unknown := [s for s in args.sections if s not in SECTIONS]:
        ap.error(f"unknown section {unknown[0]!r}; choose from {', '.join(SECTIONS)}")
    args.widths = tuple(sorted({int(w) for w in args.widths.split(",")}))
    return args


def workload_args(args: argparse.Namespace) -> list[str]:
    return ["--max-seq", str(args.max_seq), "-n", str(args.new_tokens), "--prompts", str(args.prompts),
            "--repeats", str(args.repeats), "--widths", ",".join(map(str, args.widths))]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print(f"gpu_smoke: skipped: no CUDA device (torch {torch.__version__}, torch.cuda.is_available() is False)")
        return report.EXIT_NO_CUDA
    use_source_tree()
    work = args.work or Path(tempfile.mkdtemp(prefix="yggc-gpu-smoke-"))
    work.mkdir(parents=True, exist_ok=True)
    ctx = Context(work, args.max_seq, args.new_tokens, args.prompts, args.repeats, args.widths,
                  args.deadline or T0 + args.budget_s)
    if args.child_rows:
        for name in args.sections:
            run_section(name, ctx, Path(args.child_rows))
        return 0
    results = report.Results({"smoke": "tools/gpu/gpu_smoke.py", "gpu": torch.cuda.get_device_name(0),
                              "torch": torch.__version__, "cuda": torch.version.cuda,
                              "workload": " ".join(workload_args(args)), "budget_s": args.budget_s})
    if set(args.sections) - NO_PACKAGES:
        results.rows.append(toolchain_row())
    for name in args.sections:
        if time.time() > ctx.deadline:
            results.rows.append(Row(name, "not run", f"time budget ({args.budget_s:.0f} s) spent; run it with "
                                    f"--sections {name}", "SKIP", check=SECTIONS[name][1]))
        else:
            results.rows += run_section(name, ctx) if args.in_process else run_child(name, ctx, workload_args(args))
    results.meta["wall_s"] = round(time.time() - T0, 1)
    print(report.table(results), flush=True)
    for path in report.write_json(results, report.json_paths(args.json)):
        log(f"wrote {path}")
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return report.exit_code(results.rows)


if __name__ == "__main__":
    sys.exit(main())
