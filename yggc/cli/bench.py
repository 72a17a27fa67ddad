"""`yggc bench`: flags and the hook the CLI calls (the harness itself is yggc.bench, imported lazily)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .arg_types import Verbs, comma_list, whole_number

POSITIVE = whole_number(1)
QUICK = {"prompts": 2, "n": 32, "repeats": 1}
FULL = {"prompts": 4, "n": 128, "repeats": 3}
DESCRIPTION = (
    "Benchmark yggc against transformers (greedy generate and assisted generation), and OpenVINO GenAI when its "
    "rows are asked for, on held-out prompts, all "
    "rows in one process, interleaved per prompt, warm-up excluded: TPOT median/p90, tokens/s, mean accepted "
    "length, speedups, peak RSS, verify step vs the memory-bandwidth floor, and whether every yggc row's "
    "greedy tokens equal the verifier's own (exit 1 if not). --turns, --json-schema, --shapes, --ablation and "
    "--sampling-rules measure one --bundle instead of the rows.")


def _depths(text: str) -> list[int]:
    return [POSITIVE(t) for t in comma_list(text)]


def _temperatures(text: str) -> list[float]:
    try:
        temps = [float(t) for t in comma_list(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected temperatures like 0.7,1.0, got {text!r}") from None
    if not temps or min(temps) <= 0:
        raise argparse.ArgumentTypeError(f"expected temperatures > 0 (the rules sample), got {text!r}")
    return temps


def add_bench_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-m", "--model", type=Path, metavar="VERIFIER",
                   help="verifier checkpoint; default: the bundle's, else the benchmark pair in "
                        "~/.cache/yggc/pairs/bench, else the embedded demo pair")
    p.add_argument("-md", "--model-draft", type=Path, metavar="DRAFTER", help="drafter checkpoint folder or .gguf")
    p.add_argument("--bundle", type=Path, help="compiled bundle for the compiled rows; default: compile one into "
                   "the cache for the tuned tree shape (--quick only uses one already there)")
    p.add_argument("--rows", "--systems", dest="rows", type=comma_list, metavar="A,B",
                   help="rows to run (default all but the openvino and llama.cpp ones): hf-ar,hf-assisted,openvino,"
                        "openvino-spec,llama.cpp,llama.cpp-gguf,yggc-ar-eager,yggc-chain,yggc-tree-static,"
                        "yggc-ar-compiled,yggc-suffix (the compiled verifier drafting from the text's own repeats),"
                        "yggc-full (the bundle's drafter tree alone),yggc-full-suffix (with suffix branches in its "
                        "tree: what greedy `yggc run` decodes on a CPU)")
    p.add_argument("--prompts", type=POSITIVE, help="measured prompts (default 4; --quick 2)")
    p.add_argument("-n", "--n-predict", dest="n", type=POSITIVE, help="new tokens per prompt (default 128; --quick 32)")
    p.add_argument("--repeats", type=POSITIVE, help="runs per prompt and row (default 3; --quick 1)")
    p.add_argument("--temp", type=float, default=0.0,
                   help="temperature; 0 = greedy (default), > 0 samples and reports acceptance only")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], help="default: the bundle's, else float32")
    p.add_argument("--max-seq", type=POSITIVE, help="KV cache capacity (default: the bundle's, else min(model, 2048))")
    p.add_argument("--threads", type=POSITIVE,
                   help="torch intra-op threads, and the openvino and llama.cpp rows' threads (default: torch's; "
                        "--quick: 1). On a busy machine use fewer "
                        "threads than idle cores: a parallel region waits for its slowest, descheduled thread")
    p.add_argument("--quick", action="store_true",
                   help="smoke test (CI): the demo pair unless -m, 2 prompts x 32 tokens, 1 repeat, 1 thread; compiled rows only "
                        "with --bundle or a bundle already in the cache")
    p.add_argument("--prompts-file", type=Path, help="JSON {\"prompts\": [{\"text\": ...}]} (default: the shipped "
                   "held-out stdlib prompts)")
    p.add_argument("--chain-depths", type=_depths, help="chain depths D tried for yggc-chain (default 2,3,4,6,8)")
    p.add_argument("--tree-grid", type=comma_list, metavar="DxWxV,...",
                   help="static trees tried for yggc-tree-static (default 3x2x6,4x2x8,4x3x8,5x2x10,4x4x12,6x3x12)")
    p.add_argument("--bundle-cache", type=Path, help="where compiled bundles are cached (default "
                   "~/.cache/yggc/bundles); exported OpenVINO IRs and GGUFs go into the sibling folders openvino/ "
                   "and llama.cpp/")
    ov = p.add_argument_group("openvino rows", "OpenVINO GenAI's LLMPipeline (pip install 'yggc[openvino]'); "
                              "the IRs are exported with optimum-cli into the cache unless given")
    ov.add_argument("--openvino-ir", type=Path, metavar="DIR", help="the verifier's OpenVINO IR folder "
                    "(tools/export_openvino.py writes one)")
    ov.add_argument("--openvino-draft-ir", type=Path, metavar="DIR", help="the drafter's IR folder, for openvino-spec")
    ov.add_argument("--openvino-assistant-tokens", type=POSITIVE, metavar="K",
                    help="openvino-spec: draft tokens per verify step (num_assistant_tokens; default 5)")
    ov.add_argument("--optimum-cli", type=Path, metavar="PATH",
                    help="optimum-cli to export with (default $YGGC_OPTIMUM_CLI, else the one on PATH)")
    lc = p.add_argument_group("llama.cpp rows", "llama-cpp-python (pip install 'yggc[llama-cpp]'): llama.cpp decodes "
                              "the verifier exported to an F32/BF16 GGUF (the bench dtype), llama.cpp-gguf a given file")
    lc.add_argument("--gguf", type=Path, metavar="FILE",
                    help="the GGUF llama.cpp-gguf decodes, e.g. a quantized one (default: -m when it is a .gguf)")
    p.add_argument("--turns", action="store_true",
                   help="instead of the rows: a chat's next turn through --bundle, time to first token with the "
                        "prompt cache beside a cold prefill, per prompt (answers of -n tokens; see --turn-tokens)")
    p.add_argument("--turn-tokens", type=POSITIVE, default=1000,
                   help="with --turns: the chat goes on until the timed turn's prompt holds this many tokens "
                        "(default 1000)")
    p.add_argument("--json-schema", type=Path, metavar="FILE",
                   help="instead of the rows: TPOT of --bundle's answers under this JSON schema beside free answers "
                        "(-n tokens at most each) to 50 requests for a JSON record, or --prompts-file's")
    p.add_argument("--shapes", type=comma_list, metavar="DxWxV,...",
                   help="instead of the rows: these tree shapes forced through --bundle's compiled packages beside "
                        "its plan and its compiled AR, greedy, interleaved per prompt after a warm-up round: mean "
                        "accepted length, TPOT and whether each row equals the first (exit 1 if not); a shape whose "
                        "draft phase the bundle compiled is also run drafting eagerly, beside it")
    p.add_argument("--host-bubble", action="store_true",
                   help="with --shapes: trace the tree rows and add each one's median host bubble per iteration "
                        "(time outside the compiled model calls)")
    p.add_argument("--ablation", action="store_true",
                   help="instead of the rows: one component at a time on a --bundle compiled with --calib: AR, the "
                        "best tree without pruning, with verify pruning, with the depth predictor (if kept); TPOT, "
                        "accepted length, measured and estimated iteration, host bubble; then its stage plan")
    p.add_argument("--sampling-rules", type=comma_list, metavar="RULE:DxWxV,...",
                   help="instead of the rows: tokens per verify call and TPOT of each T > 0 rule (chain, point-mass, "
                        "rrs, rrs-q or traversal) at that shape through --bundle at every --temps, -n tokens, "
                        "--repeats seeds per prompt, beside its AR and its greedy and sampling plans")
    p.add_argument("--temps", type=_temperatures, default=[0.7, 1.0], metavar="T,T",
                   help="with --sampling-rules: temperatures (default 0.7,1.0)")
    p.add_argument("--exact", action="store_true",
                   help="with --sampling-rules: also price every verified draft exactly under each rule that fits it "
                        "(expected tokens per call on the same drafts; TPOT then includes the pricing)")
    p.add_argument("--json", type=Path, metavar="FILE", help="write the raw samples and settings here")
    p.add_argument("--plot", type=Path, metavar="PNG", help="TPOT bars + accepted-length histogram (needs matplotlib)")


def add_parser(sub: Verbs) -> None:
    """`yggc bench`: its flags; main runs it."""
    p = sub.add_parser("bench", help="benchmark yggc against transformers on this machine", description=DESCRIPTION)
    add_bench_args(p)
    p.set_defaults(main=main)


def resolve_pair(args: argparse.Namespace) -> tuple[Path, Path | None]:
    from ..bench.suite import BENCH_PAIR
    from ..bundle import load_manifest, weights_in_bundle
    from ..errors import YggcError
    from ..runtime import loading

    if args.model_draft is not None and args.model is None:
        raise YggcError("-md needs -m: name the verifier the drafter belongs to")
    if args.model is not None:
        # dequantized folders: the peer rows (transformers, OpenVINO, the llama.cpp export) read them as checkpoints
        drafter = None if args.model_draft is None else loading.model_dir(args.model_draft, keep_blocks=False)
        return loading.model_dir(args.model, keep_blocks=False), drafter
    if args.bundle is not None:
        if not weights_in_bundle(load_manifest(args.bundle), "verifier"):
            raise YggcError(f"{args.bundle} keeps the verifier's weights only in its compiled package (O2), and the "
                            "baseline rows need them; pass the checkpoints too: -m VERIFIER -md DRAFTER")
        return args.bundle / "verifier", args.bundle / "drafter"
    if not args.quick and all((BENCH_PAIR / r / "config.json").exists() for r in ("verifier", "drafter")):
        return BENCH_PAIR / "verifier", BENCH_PAIR / "drafter"
    return loading.demo_pair_dirs()


def make_config(args: argparse.Namespace):
    from ..bench.suite import (
        ASSISTANT_TOKENS,
        BUNDLE_CACHE,
        CHAIN_DEPTHS,
        DEFAULT_ROWS,
        ROWS,
        TREE_GRID,
        BenchConfig,
        parse_shape,
    )
    from ..bundle import load_manifest
    from ..errors import YggcError
    from ..runtime import loading

    verifier, drafter = resolve_pair(args)
    manifest = load_manifest(args.bundle) if args.bundle is not None else None
    rows = args.rows or list(DEFAULT_ROWS)
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        raise YggcError(f"unknown row {unknown[0]!r}; rows are {','.join(ROWS)}")
    sizes = QUICK if args.quick else FULL
    return BenchConfig(
        verifier=verifier, drafter=drafter, bundle=args.bundle,
        rows=tuple(r for r in ROWS if r in rows),
        n_prompts=args.prompts or sizes["prompts"], n_new=args.n or sizes["n"],
        repeats=args.repeats or sizes["repeats"], temperature=args.temp,
        dtype=args.dtype or (manifest.dtype if manifest else "float32"),
        max_seq=args.max_seq or (manifest.max_seq if manifest else loading.context_length(verifier, None)),
        quick=args.quick, prompts_file=args.prompts_file,
        chain_depths=tuple(args.chain_depths) if args.chain_depths else CHAIN_DEPTHS,
        tree_grid=tuple(parse_shape(s) for s in args.tree_grid) if args.tree_grid else TREE_GRID,
        bundle_cache=args.bundle_cache or BUNDLE_CACHE,
        openvino_ir=args.openvino_ir, openvino_draft_ir=args.openvino_draft_ir,
        assistant_tokens=args.openvino_assistant_tokens or ASSISTANT_TOKENS, optimum_cli=args.optimum_cli,
        gguf=args.gguf or (args.model if args.model is not None and args.model.suffix.lower() == ".gguf" else None),
        bandwidth_mb=64 if args.quick else 256, floor_repeats=5 if args.quick else 20,
        json_path=args.json, plot_path=args.plot,
    )


def main(args: argparse.Namespace) -> int:
    """Run the benchmark; the table goes to stdout. Exit 1 if a yggc row's greedy tokens differ."""
    from ..bench.harness import run_benchmark
    from ..errors import YggcError
    from .run import set_threads

    if args.temp < 0:
        raise YggcError(f"--temp must be >= 0, got {args.temp}")
    bundle_mode = any(getattr(args, m) for m in BUNDLE_MODES)
    if bundle_mode:
        check_bundle_mode_flags(args)  # a bad flag is one line, before any machine-load warning
    set_threads(args.threads or (1 if args.quick else None), "yggc bench")  # --quick checks tokens, not times
    if bundle_mode:
        return bundle_mode_command(args)
    report = run_benchmark(make_config(args))
    print(report.text)
    for failure in report.failures:
        print(f"yggc bench: FAIL: {failure}; yggc must reproduce the verifier's greedy tokens", file=sys.stderr)
    return 1 if report.failures else 0


BUNDLE_MODES = ("turns", "json_schema", "shapes", "ablation", "sampling_rules")


def check_bundle_mode_flags(args: argparse.Namespace) -> None:
    """One bundle measurement at a time, of a bundle given, with its files present."""
    from ..errors import YggcError

    flags = ["--" + m.replace("_", "-") for m in BUNDLE_MODES if getattr(args, m)]
    if len(flags) > 1:
        raise YggcError(f"{' and '.join(flags)} are separate measurements; run one at a time")
    if args.bundle is None:
        raise YggcError(f"{flags[0]} measures a bundle; pass --bundle BUNDLE")
    if args.json_schema is not None and not args.json_schema.is_file():
        raise YggcError(f"--json-schema {args.json_schema} is not a file")


def bundle_mode_command(args: argparse.Namespace) -> int:
    """--turns, --json-schema, --shapes, --ablation or --sampling-rules: one measurement of --bundle, printed as a
    table; exit 1 where a greedy row's tokens differ from the first row's."""
    from ..bench.prompt_sets import load_prompt_texts
    from ..bench.sampling_rules import parse_runs
    from ..bench.suite import parse_shape
    from ..runtime import Runtime

    shapes = [parse_shape(s) for s in args.shapes or ()]  # a bad one is refused before the bundle loads
    runs = parse_runs(",".join(args.sampling_rules)) if args.sampling_rules else []
    import torch

    rt = Runtime.load(args.bundle)
    n_new, repeats = args.n or FULL["n"], args.repeats or FULL["repeats"]
    if args.json_schema and not args.prompts_file:
        from ..bench.structured import json_requests

        texts = json_requests()
    else:
        texts = load_prompt_texts(args.prompts_file)[0]
    texts = texts[:args.prompts or (len(texts) if args.json_schema else FULL["prompts"])]
    print(f"{args.bundle}: dtype {rt.manifest.dtype}, {len(texts)} prompts x {n_new} tokens x {repeats} repeats, "
          f"{torch.get_num_threads()} threads")
    if args.json_schema:
        from ..bench.structured import schema_table, schema_tpot

        print(schema_table(schema_tpot(rt, texts, args.json_schema.read_text(), n_new, repeats)))
        return 0
    if args.turns:
        from ..bench.turns import second_turn, turns_table

        print(turns_table([second_turn(rt, text, n_new, repeats, args.turn_tokens) for text in texts]))
        return 0
    if runs:
        from ..bench.sampling_rules import compare_rules, rules_table

        results = compare_rules(rt, runs, texts, n_new, args.temps, repeats, args.exact)
        print(rules_table(results))
        if args.json:
            args.json.write_text(json.dumps(results, indent=2))
        return 0
    return shapes_mode(args, rt, shapes, [rt.encode(t) for t in texts], n_new, repeats)


def shapes_mode(args: argparse.Namespace, rt, shapes: list, prompts: list[list[int]], n_new: int, repeats: int) -> int:
    """--shapes or --ablation: greedy rows of one bundle, interleaved (yggc.bench.side_by_side)."""
    from ..bench.side_by_side import decode_rows, shape_decoders, shapes_table

    if shapes:
        rows = decode_rows(shape_decoders(rt, shapes), prompts, n_new, repeats, trace=args.host_bubble)
        print(shapes_table(rows, bubble=args.host_bubble))
    else:
        from ..bench.ablation import ablation_decoders, ablation_table, unpruned_shape
        from ..plan.bundle_plan import read_plan
        from ..plan.bundle_profile import Profile
        from ..plan.stages import StageCosts
        from .inspect import print_adaptive, print_schedule

        plan, profile = read_plan(args.bundle), Profile.load(args.bundle)
        decoders = ablation_decoders(rt, unpruned_shape(plan))
        rows = decode_rows({k: dec for k, (dec, _) in decoders.items()}, prompts, n_new, repeats, trace=True)
        stages = StageCosts.from_profile(profile) if profile.models else None
        print(ablation_table(rows, {k: shape for k, (_, shape) in decoders.items()}, stages))
        if plan.adaptive:
            print_adaptive(plan.adaptive)
        if plan.schedule:
            print_schedule(plan.schedule, plan.measured)
    if args.json:
        args.json.write_text(json.dumps({k: vars(r) for k, r in rows.items()}, indent=2))
    unequal = [name for name, r in rows.items() if not r.equal]
    for name in unequal:
        print(f"yggc bench: FAIL: {name} differs from the first row's greedy tokens", file=sys.stderr)
    return 1 if unequal else 0


def script_main(argv: list[str] | None = None) -> int:
    """Standalone entry (tools/bench.py): the same flags as `yggc bench`."""
    from ..errors import USER_ERRORS

    parser = argparse.ArgumentParser(prog="bench.py", description=DESCRIPTION)
    add_bench_args(parser)
    args = parser.parse_args(argv)
    try:
        return main(args)
    except USER_ERRORS as e:
        print(f"yggc: error: {e}", file=sys.stderr)
        return 2
