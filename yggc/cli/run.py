"""`yggc run`: its flags, and loading a bundle or checkpoints, decoding one prompt, streaming text and reporting
stats."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..errors import YggcError
from ..plan.bundle_plan import TimelineSlot, read_plan
from ..plan.shape import TreeShape
from ..runtime import drafters, loading
from ..runtime.autoregressive import AutoregressiveDecoder
from ..runtime.detokenize import StreamDecoder
from ..runtime.drafters.suffix_branches import has_suffix_branches, with_suffix_branches
from ..runtime.speculative import SpeculativeDecoder
from ..tree.sampling import SamplingParams
from .arg_types import Verbs
from .flags import POSITIVE, add_decode_args, add_model_args, add_tree_args

DEFAULT_DEPTH, DEFAULT_WIDTH = 4, 2


def add_parser(sub: Verbs) -> None:
    """`yggc run`: its flags; main runs it."""
    p = sub.add_parser(
        "run", help="decode one prompt, streaming text to stdout",
        description="Decode one prompt. With BUNDLE: the compiled bundle's tree speculative decoding. "
                    "Without: eager decoding of -m alone (autoregressive) or, with -md, tree speculative "
                    "decoding (Equal-Growth Tree of --depth x --width, pruned to --verify nodes). "
                    "Output equals the verifier's own greedy decoding token for token.")
    p.add_argument("bundle", nargs="?", help="a bundle written by `yggc compile` (optional)")
    add_model_args(p)
    add_decode_args(p)
    add_tree_args(p)
    p.add_argument("--no-spec", action="store_true", help="with BUNDLE: decode autoregressively (baseline)")
    p.add_argument("--tp", type=POSITIVE, default=1,
                   help="without BUNDLE: split the verifier over this many local processes (tensor parallel; "
                        "torchrun --nproc-per-node N -m yggc run ... does the same across nodes)")
    p.add_argument("--draft-parallel", choices=["sequential", "fuzzy"], default="sequential",
                   help="without BUNDLE: fuzzy runs sets of the drafter's attention layers at once, one per rank "
                        "(EasySpec), and recomputes the accepted tokens' drafter K/V exactly after each "
                        "verification; output is unchanged (default sequential)")
    p.add_argument("--fuzzy-layers", type=POSITIVE, default=None,
                   help="with --draft-parallel fuzzy: attention layers per set (default the rank count, or 2)")
    p.add_argument("--fuzzy-span", choices=["inner", "all"], default="inner",
                   help="with --draft-parallel fuzzy: layers that may join a set; inner leaves out the first and "
                        "last (EasySpec's choice; default)")
    p.add_argument("--suffix", action="store_true",
                   help="draft from the text's own repeats instead of a drafter: the continuations of the longest "
                        "suffix of prompt and output that occurred before (no drafter runs; -m alone or BUNDLE). "
                        "--depth: tokens per branch (default 6), --width: branches (2), --verify: nodes (8)")
    branches = p.add_mutually_exclusive_group()
    branches.add_argument("--with-suffix", action="store_true",
                          help="add the text's suffix matches to the drafter's tree as extra branches, priced by how "
                               "often they are accepted (verified with the drafts in one call; output unchanged). A "
                               "BUNDLE's greedy runs add them by default; this adds them at --temp > 0 and to -m/-md "
                               "runs too")
    branches.add_argument("--no-suffix", action="store_true",
                          help="a BUNDLE's drafter tree alone, without the suffix branches its greedy runs add")
    p.add_argument("--static", action="store_true",
                   help="with BUNDLE: draft the plan's one tree shape every iteration (no depth predictor)")
    p.add_argument("--trace", metavar="OUT.json",
                   help="write a Chrome trace (chrome://tracing, ui.perfetto.dev) of every iteration, phase and "
                        "compiled model call, beside the bundle's estimated stage plan; print the medians")
    p.set_defaults(main=main)


def tree_shape(args: argparse.Namespace, plan: TreeShape | None = None) -> TreeShape:
    depth = args.depth or (plan.depth if plan else DEFAULT_DEPTH)
    width = args.width or (plan.width if plan else DEFAULT_WIDTH)
    verify = args.verify or (plan.verify if plan and (depth, width) == (plan.depth, plan.width) else None)
    return TreeShape.from_args(depth, width, verify)


def load_models(args: argparse.Namespace) -> tuple[loading.LoadedModel, loading.LoadedModel | None]:
    dtype = loading.parse_dtype(args.dtype)
    if args.model is None:
        if args.model_draft is not None:
            raise YggcError("-md needs -m: name the verifier the drafter belongs to")
        verifier_dir, drafter_dir = loading.demo_pair_dirs()
    else:
        verifier_dir = loading.model_dir(args.model)
        drafter_dir = None if args.model_draft is None else loading.model_dir(args.model_draft)
    max_seq = loading.context_length(verifier_dir, args.max_seq)
    from ..runtime.tp_processes import verifier_loader

    load_verifier = verifier_loader(tp_world(args))  # one rank of several loads its slice of the verifier
    if drafter_dir is None:
        return load_verifier(verifier_dir, dtype, max_seq), None
    return drafters.load_pair(verifier_dir, drafter_dir, dtype, max_seq, load_verifier)


def eager_decoder(args: argparse.Namespace):
    verifier, drafter = load_models(args)
    if drafter is None and args.draft_parallel == "fuzzy":
        raise YggcError("--draft-parallel fuzzy needs a drafter: name it with -md")
    if drafter is None:
        return verifier, AutoregressiveDecoder(verifier.graph, verifier.layout)
    if args.draft_parallel == "fuzzy":
        from ..runtime.drafters.fuzzy_proposer import fuzzy_drafter

        fuzzy = fuzzy_drafter(drafter.graph, args.fuzzy_layers or max(2, tp_world(args)), args.fuzzy_span)
        proposer = drafters.PROPOSERS["fuzzy"](verifier.graph, drafter.graph, verifier.layout, tree_shape(args), fuzzy)
        return verifier, SpeculativeDecoder(proposer, args.chain_rule, tree_rule=args.tree_rule)
    dec = drafters.speculative_decoder(verifier.graph, drafter.graph, verifier.layout, tree_shape(args),
                                       args.chain_rule, args.tree_rule)
    return verifier, dec


def bundle_runtime(args: argparse.Namespace):
    """The bundle's Runtime, once the flags a bundle fixes are checked."""
    from ..runtime.runtime import Runtime

    if args.draft_parallel != "sequential":
        raise YggcError("--draft-parallel fuzzy runs the drafter eagerly; drop the bundle and name the pair with "
                        "-m/-md")
    if args.model or args.model_draft or args.max_seq or args.dtype != "float32":
        raise YggcError("a bundle fixes its models, dtype and --max-seq; drop -m/-md/--dtype/--max-seq "
                        "or re-run `yggc compile` with them")
    return Runtime.load(args.bundle)


def bundle_decoder(args: argparse.Namespace):
    rt = bundle_runtime(args)
    forced = bool(args.depth or args.width or args.verify)
    speculative = False if args.no_spec else (True if forced else None)
    verdict = rt.plan_for(args.temp > 0)[1]
    if speculative is None and not verdict:
        print("yggc: the bundle's plan decodes without speculation (its calibrated tree was slower than the "
              "verifier alone on the compiling machine; --depth/--width force a tree)", file=sys.stderr)
    branches = rt.suffix_branches_for(args.temp > 0, suffix_choice(args))
    return rt.verifier, rt.decoder(speculative, tree_shape(args, rt.shape) if forced else None, args.chain_rule,
                                     args.tree_rule, adaptive=not args.static, sampling=args.temp > 0,
                                     suffix_branches=branches)


def suffix_decoder(args: argparse.Namespace):
    """--suffix: the verifier (the bundle's compiled one, or -m eagerly) drafting from its own text."""
    from ..runtime.drafters.suffix_proposer import SUFFIX_SHAPE, SuffixDrafter

    if args.model_draft or args.no_spec or args.draft_parallel != "sequential":
        raise YggcError("--suffix drafts from the text, with no drafter; drop -md, --no-spec and --draft-parallel")
    shape = tree_shape(args, SUFFIX_SHAPE)
    if args.bundle:
        rt = bundle_runtime(args)
        return rt.verifier, rt.suffix_decoder(shape)
    verifier, _ = load_models(args)
    proposer = drafters.PROPOSERS["suffix"](verifier.graph, SuffixDrafter(), verifier.layout, shape)
    return verifier, SpeculativeDecoder(proposer)


def suffix_choice(args: argparse.Namespace) -> bool | None:
    """--with-suffix: True, --no-suffix: False, neither: None (the runtime's default)."""
    return True if args.with_suffix else False if args.no_suffix else None


def add_suffix_branches(args: argparse.Namespace, decoder):
    """--with-suffix: the text's suffix matches as extra branches of the drafter's tree (a bundle's decoder has them
    from bundle_decoder, priced with its profile)."""
    if getattr(getattr(decoder, "proposer", None), "drafter", None) is None or args.draft_parallel != "sequential":
        raise YggcError("--with-suffix adds branches to a drafter's tree, and this run has none (--no-spec, no "
                        "drafter, --draft-parallel, or the bundle's plan: force a tree with --depth/--width)")
    return with_suffix_branches(decoder)


def prompt_ids_of(args: argparse.Namespace, verifier: loading.LoadedModel) -> list[int]:
    """-p text, --prompt-ids, or --chat (with --system) through the verifier's chat template."""
    if args.system is not None and args.chat is None:
        raise YggcError("--system goes with --chat")
    if args.chat is not None:
        system = [{"role": "system", "content": args.system}] if args.system is not None else []
        return loading.encode_chat(verifier, [*system, {"role": "user", "content": args.chat}])
    if args.prompt_ids is not None:
        return args.prompt_ids
    return loading.encode_prompt(verifier.tokenizer, args.prompt)


def set_threads(threads: int | None, prog: str = "yggc") -> None:
    """--threads, and a warning when other processes leave too few idle cores for the threads."""
    import torch

    from ..artifacts.cpu_use import busy_warning

    if threads:
        torch.set_num_threads(threads)
    warning = busy_warning(torch.get_num_threads())
    if warning:
        print(f"{prog}: warning: {warning} (try --threads 1)", file=sys.stderr)


def planned_timeline(args: argparse.Namespace, decoder) -> tuple[tuple[TimelineSlot, ...] | None, float | None]:
    """The bundle's estimated stage plan (timeline, ms per iteration), if it has one for the shape that
    ran every iteration (not for a forced shape, nor for shapes a depth predictor picked)."""
    schedule = read_plan(args.bundle).schedule if args.bundle and not args.suffix else None
    if schedule is None or decoder.policy is not None or schedule.executed.shape != decoder.shape:
        return None, None
    return schedule.timeline, schedule.executed.iteration_ms


def write_trace(args: argparse.Namespace, trace, decoder) -> str:
    """Write --trace's file (atomically) -> the line summarising it."""
    timeline, estimate = planned_timeline(args, decoder)
    out = Path(args.trace)
    tmp = out.with_name(f".{out.name}.partial")
    tmp.write_text(json.dumps(trace.chrome_trace(timeline)))
    tmp.replace(out)
    s = trace.summary()
    if not s:
        return f"wrote {out} (no speculative iteration ran)"
    line = (f"wrote {out}: median iteration {s['iteration_ms']:.3f} ms (draft {s['draft_ms']:.3f}, "
            f"verify {s['verify_ms']:.3f}, model calls {s['model_ms']:.3f}, host bubble {s['host_bubble_ms']:.3f} = "
            f"{s['host_share']:.0%}: draft {s['draft_host_ms']:.3f}, verify {s['verify_host_ms']:.3f})")
    return line + (f"; the plan estimated {estimate:.3f} ms" if estimate else "")


def tp_world(args: argparse.Namespace) -> int:
    """The tensor-parallel degree: torchrun's world size, else --tp; one clear error where they disagree."""
    from ..runtime.tp_processes import launched_world

    world = launched_world()
    if world > 1 and args.tp not in (1, world):
        raise YggcError(f"--tp {args.tp} but torchrun started {world} ranks; drop --tp or make them equal")
    return max(world, args.tp)


def grammar_of(args: argparse.Namespace, verifier: loading.LoadedModel):
    """--json-schema FILE or --grammar FILE (GBNF, or Lark by its .lark suffix) -> the request's grammar state."""
    from ..runtime.constraint import GrammarCompiler, GrammarSpec

    path = args.json_schema or args.grammar
    if path is None:
        return None
    if not path.is_file():
        raise YggcError(f"{'--json-schema' if args.json_schema else '--grammar'} {path} is not a file")
    kind = "json_schema" if args.json_schema else "lark" if path.suffix == ".lark" else "gbnf"
    compiler = GrammarCompiler(verifier.tokenizer, verifier.eos_ids, verifier.graph.cfg.vocab_size)
    return compiler.constraint(GrammarSpec(kind, path.read_text()))


def main(args: argparse.Namespace) -> int:
    """Decode the prompt the flags name and print it (streamed, or as --json) -> the exit code."""
    from ..runtime.tp_processes import launched_world

    world = tp_world(args)
    if args.suffix and (args.with_suffix or args.no_suffix):
        flag = "--with-suffix" if args.with_suffix else "--no-suffix"
        raise YggcError(f"--suffix drafts from the text alone, without a drafter; drop {flag}")
    if (args.suffix or args.with_suffix) and world > 1:
        raise YggcError(f"--{'with-' * args.with_suffix}suffix runs on one process; drop --tp")
    if world > launched_world():  # --tp N without torchrun: start the N ranks here, each runs this command
        from .ranks import launch_ranks

        return launch_ranks(world, main, args)
    params = SamplingParams(args.temp, args.top_k, args.top_p, args.seed, args.min_p)
    set_threads(args.threads)
    verifier, decoder = (suffix_decoder(args) if args.suffix else bundle_decoder(args) if args.bundle
                         else eager_decoder(args))
    if args.with_suffix:
        decoder = add_suffix_branches(args, decoder)
    if args.trace and not Path(args.trace).parent.is_dir():
        raise YggcError(f"--trace {args.trace}: the folder {Path(args.trace).parent} does not exist")
    if args.trace and not hasattr(decoder, "enable_trace"):
        raise YggcError("--trace times speculative iterations, and this run decodes autoregressively "
                        "(--no-spec, no drafter, or the bundle's plan); force a tree with --depth/--width")
    trace = decoder.enable_trace() if args.trace else None
    prompt_ids = prompt_ids_of(args, verifier)
    decoder.constraint = grammar_of(args, verifier)
    text = StreamDecoder(verifier.tokenizer)
    steps = decoder.stream(prompt_ids, args.n_predict, params, verifier.eos_ids)
    try:
        for tokens in steps:
            piece = text.push(tokens)
            if piece and not args.json:
                sys.stdout.write(piece)
                sys.stdout.flush()
    except KeyboardInterrupt:  # Ctrl-C: end the partial line; main() prints one line and exits 130
        steps.close()
        if text.emitted and not args.json:
            print(flush=True)
        raise
    stats = decoder.stats
    traced = write_trace(args, trace, decoder) if trace else None
    if args.json:
        extra = {"trace": trace.summary()} if trace else {}
        print(json.dumps({"tokens": text.ids, "text": text.text(), "prompt_ids": prompt_ids, **stats.summary(),
                          "suffix_branches": has_suffix_branches(decoder), **extra}))
    else:
        print()
        for line in stats.log_lines() + ([traced] if traced else []):
            print(f"yggc: {line}", file=sys.stderr)
    return 0
