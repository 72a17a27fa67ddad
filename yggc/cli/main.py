"""`yggc` command line: argument parsing only; the work lives in the modules it calls."""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

from .. import __version__
from ..bundle.manifest import OptLevel
from ..errors import USER_ERRORS
from ..tree.rules import ChainRule, TreeRule
from .arg_types import token_ids, whole_number
from .bench import add_bench_parser
from .noise import silence_third_party_noise
from .pull import add_pull_parser
from .serve import add_serve_parser
from .train import add_train_parser

# subcommand -> (module of yggc.cli, function): imported only when that command runs
COMMANDS = {"run": ("run", "run_command"), "compile": ("compile", "compile_command"),
            "import": ("import_gguf", "import_command"), "inspect": ("inspect", "inspect_command"),
            "profile": ("inspect", "profile_command"), "bench": ("bench", "bench_command"),
            "serve": ("serve", "serve_command"), "pull": ("pull", "pull_command"),
            "train": ("train", "train_command")}
NON_NEGATIVE = whole_number(0)
POSITIVE = whole_number(1)


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("-m", "--model", metavar="VERIFIER",
                   help="verifier: a checkpoint folder (HF format) or a llama .gguf file (imported once into "
                        "~/.cache/yggc/gguf); default: the embedded demo pair (with its drafter)")
    p.add_argument("-md", "--model-draft", metavar="DRAFTER",
                   help="drafter checkpoint folder (or .gguf) sharing the verifier's tokenizer")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="weights and KV cache dtype")
    p.add_argument("--max-seq", type=NON_NEGATIVE, default=None,
                   help="KV cache capacity in tokens (prompt + output); default min(model limit, 2048)")


def add_decode_args(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("-p", "--prompt", help="prompt text")
    src.add_argument("--prompt-ids", type=token_ids, metavar="1,2,3", help="prompt as token ids")
    src.add_argument("--chat", metavar="MESSAGE",
                     help="a user message, sent through the model's chat template; stops at its end of turn")
    p.add_argument("--system", metavar="TEXT", help="with --chat: a system message first")
    p.add_argument("-n", "--n-predict", type=NON_NEGATIVE, default=128, help="new tokens at most (default 128)")
    p.add_argument("--temp", type=float, default=0.0, help="temperature; 0 = greedy (default)")
    p.add_argument("--top-k", type=NON_NEGATIVE, default=0, help="sample from the k likeliest tokens (0 = off)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (1 = off)")
    p.add_argument("--min-p", type=float, default=0.0,
                   help="drop tokens below this fraction of the likeliest token's probability (0 = off)")
    p.add_argument("--seed", type=int, default=None, help="random seed for sampling")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json-schema", type=Path, metavar="FILE",
                     help="the output is JSON following this JSON schema (pip install 'yggc[grammar]')")
    fmt.add_argument("--grammar", type=Path, metavar="FILE",
                     help="the output follows this grammar: GBNF as llama.cpp takes it, or Lark in a .lark file")
    p.add_argument("--json", action="store_true", help="print one JSON object (tokens, text, stats) instead of text")
    p.add_argument("--threads", "-t", type=POSITIVE, help="torch/OpenMP threads (default: torch's, one per core); "
                   "on a busy machine use fewer than the idle cores: compiled kernels wait for descheduled threads")


def add_tree_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--depth", type=NON_NEGATIVE, default=None,
                   help="draft depth D (drafter calls per iteration; default 4, the bundle's plan, or chosen by "
                        "--calib)")
    p.add_argument("--width", type=NON_NEGATIVE, default=None,
                   help="draft width W (new nodes per draft step; 1 = chain; default 2, the bundle's plan, or "
                        "chosen by --calib)")
    p.add_argument("--verify", type=NON_NEGATIVE, default=None, help="verify nodes V (default D*W)")
    p.add_argument("--chain-rule", choices=[r.value for r in ChainRule], default=ChainRule.BLOCK.value,
                   help="verification rule for chains (W=1) when sampling (default block)")
    p.add_argument("--tree-rule", choices=[r.value for r in TreeRule], default=TreeRule.RRS.value,
                   help="rule for trees (W>1) when sampling: rrs and traversal grow the tree from drafter "
                        "samples and verify it by recursive rejection sampling or by traversal verification "
                        "(leaves first, whole paths); point-mass verifies the greedy-grown tree (default rrs)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="yggc", description="Latency-optimal tree speculative decoding on a static-graph runtime.")
    parser.add_argument("--version", action="version", version=f"yggc {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser(
        "run", help="decode one prompt, streaming text to stdout",
        description="Decode one prompt. With BUNDLE: the compiled bundle's tree speculative decoding. "
                    "Without: eager decoding of -m alone (autoregressive) or, with -md, tree speculative "
                    "decoding (Equal-Growth Tree of --depth x --width, pruned to --verify nodes). "
                    "Output equals the verifier's own greedy decoding token for token.")
    run.add_argument("bundle", nargs="?", help="a bundle written by `yggc compile` (optional)")
    add_model_args(run)
    add_decode_args(run)
    add_tree_args(run)
    run.add_argument("--no-spec", action="store_true", help="with BUNDLE: decode autoregressively (baseline)")
    run.add_argument("--tp", type=POSITIVE, default=1,
                     help="without BUNDLE: split the verifier over this many local processes (tensor parallel; "
                          "torchrun --nproc-per-node N -m yggc run ... does the same across nodes)")
    run.add_argument("--draft-parallel", choices=["sequential", "fuzzy"], default="sequential",
                     help="without BUNDLE: fuzzy runs sets of the drafter's attention layers at once, one per rank "
                          "(EasySpec), and recomputes the accepted tokens' drafter K/V exactly after each "
                          "verification; output is unchanged (default sequential)")
    run.add_argument("--fuzzy-layers", type=POSITIVE, default=None,
                     help="with --draft-parallel fuzzy: attention layers per set (default the rank count, or 2)")
    run.add_argument("--fuzzy-span", choices=["inner", "all"], default="inner",
                     help="with --draft-parallel fuzzy: layers that may join a set; inner leaves out the first and "
                          "last (EasySpec's choice; default)")
    run.add_argument("--suffix", action="store_true",
                     help="draft from the text's own repeats instead of a drafter: the continuations of the longest "
                          "suffix of prompt and output that occurred before (no drafter runs; -m alone or BUNDLE). "
                          "--depth: tokens per branch (default 6), --width: branches (2), --verify: nodes (8)")
    branches = run.add_mutually_exclusive_group()
    branches.add_argument("--with-suffix", action="store_true",
                          help="add the text's suffix matches to the drafter's tree as extra branches, priced by how "
                               "often they are accepted (verified with the drafts in one call; output unchanged). A "
                               "BUNDLE's greedy runs add them by default; this adds them at --temp > 0 and to -m/-md "
                               "runs too")
    branches.add_argument("--no-suffix", action="store_true",
                          help="a BUNDLE's drafter tree alone, without the suffix branches its greedy runs add")
    run.add_argument("--static", action="store_true",
                     help="with BUNDLE: draft the plan's one tree shape every iteration (no depth predictor)")
    run.add_argument("--trace", metavar="OUT.json",
                     help="write a Chrome trace (chrome://tracing, ui.perfetto.dev) of every iteration, phase and "
                          "compiled model call, beside the bundle's estimated stage plan; print the medians")

    comp = sub.add_parser(
        "compile", help="compile a drafter/verifier pair into a graph bundle",
        description="Lower drafter and verifier into fixed-width AOTInductor buckets, profile every bucket "
                    "and host stage, choose the tree shape (D, W, V) by the latency objective from calibration "
                    "text (--calib; the demo pair brings its own) or take it from the flags, and write a "
                    "self-contained bundle (atomically).")
    add_model_args(comp)
    add_tree_args(comp)
    comp.add_argument("--calib", nargs="+", metavar="FILE",
                      help="calibration text files: decode them to measure acceptance and let the latency "
                           "objective choose --depth/--width/--verify (flags given too stay fixed)")
    comp.add_argument("--calib-prompts", type=POSITIVE, default=16,
                      help="windows of the calibration text decoded per candidate width (default 16)")
    comp.add_argument("--calib-tokens", type=POSITIVE, default=64,
                      help="greedy tokens decoded after each calibration window (default 64)")
    comp.add_argument("--temp", type=float,
                      help="with --calib: also decode the text by sampling at this temperature and keep a second "
                           "plan, which requests at T > 0 use (default 1, what OpenAI clients and yggc serve "
                           "sample at unless told; 0: greedy only, sampled requests then draft the greedy plan's "
                           "tree)")
    comp.add_argument("--weights", choices=["q8_0", "q4_0", "q4_1", "bfloat16", "float32"],
                      help="the verifier's linear layers: ggml block formats streamed by yggc's CPU kernel (O2 on a "
                           "cpu; a GGUF's matrices stored so are kept as they are, others quantized), or float as "
                           "--dtype. Default: a .gguf's own formats (on a cpu at O2), else --dtype")
    comp.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="target device (default cpu)")
    comp.add_argument("--tp", type=POSITIVE, default=1,
                      help="split the verifier over this many local processes (tensor parallel): each compiles its "
                           "slice, collectives inside the graph; the bundle then runs on exactly as many ranks "
                           "(fixed --depth/--width, --opt O1; torchrun --nproc-per-node N -m yggc compile ... too)")
    comp.add_argument("--opt", choices=[o.value for o in OptLevel],
                      help="O2 (default on cpu): one package per model serving every width, weights frozen in and "
                           "packed for Inductor's C++ GEMMs, batch-invariant rows, eager tree phases around it. "
                           "O1 (default on cuda): a weightless package per width plus fused draft/verify phases")
    comp.add_argument("--backend", default="inductor", choices=["inductor", "tensorrt"],
                      help="forward-bucket compiler: inductor (default; CPU and CUDA) or tensorrt (CUDA only, "
                           "needs `pip install 'yggc[tensorrt]'`)")
    comp.add_argument("-o", "--output", required=True, help="bundle directory to write")
    comp.add_argument("--overwrite", action="store_true", help="replace an existing bundle at -o")

    imp = sub.add_parser(
        "import", help="convert a llama GGUF file into a checkpoint folder",
        description="Dequantize a llama-architecture GGUF file (F32/F16/BF16 and the common block quantizations) "
                    "into a Hugging Face-format folder: config.json, model.safetensors, tokenizer.json and "
                    "tokenizer_config.json (with the chat template). -m also takes a .gguf file directly.")
    imp.add_argument("gguf", metavar="MODEL.gguf", help="the GGUF file")
    imp.add_argument("-o", "--output", required=True, help="folder to write")
    imp.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                     help="stored weight dtype (default float32: the dequantized values exactly)")
    imp.add_argument("--overwrite", action="store_true", help="replace an existing folder at -o")

    insp = sub.add_parser("inspect", help="show a bundle's manifest, buckets and profile")
    insp.add_argument("bundle", help="a bundle written by `yggc compile`")
    insp.add_argument("--json", action="store_true", help="print the manifest and profile as JSON")
    insp.add_argument("--plot", metavar="OUT.png",
                      help="also draw the stage plan's timeline (a Gantt chart of one steady-state iteration)")
    insp.add_argument("--load-time", action="store_true",
                      help="instead: load the bundle and decode one 64-token chat answer in this process: size on "
                           "disk against the weights, process start to imported, Runtime.load, load to first token, "
                           "RSS after import and load and at its peak (one bundle per process; --json: as JSON)")
    insp.add_argument("--threads", "-t", type=POSITIVE, help="with --load-time: torch threads (default: torch's)")
    prof = sub.add_parser("profile", help="show a bundle's measured stage latencies and cost curves")
    prof.add_argument("bundle", help="a bundle written by `yggc compile`")
    prof.add_argument("--plot", metavar="OUT.png", help="also draw the measured points and fitted curves")
    add_bench_parser(sub)
    add_serve_parser(sub)
    add_pull_parser(sub)
    add_train_parser(sub)
    return parser


def leave_ranks(completed: bool) -> None:
    """Started by torchrun: leave the process group the command joined, at a barrier after a completed one."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        from ..runtime.tp_processes import leave

        leave(completed)


def main(argv: list[str] | None = None) -> int:
    silence_third_party_noise()
    args = build_parser().parse_args(argv)
    try:
        module, function = COMMANDS[args.command]
        code = getattr(importlib.import_module(f".{module}", __package__), function)(args)
        leave_ranks(completed=True)
        return code
    except USER_ERRORS as e:
        print(f"yggc: error: {e}", file=sys.stderr)
        leave_ranks(completed=False)
        return 2
    except KeyboardInterrupt:
        print("yggc: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`yggc inspect B | head`): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return 0

