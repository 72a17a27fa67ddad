"""Flag groups several `yggc` verbs share: the model pair (run, compile), one decode (run) and the draft tree's
shape and rules (run, compile)."""
from __future__ import annotations

import argparse
from pathlib import Path

from ..tree.rules import ChainRule, TreeRule
from .arg_types import token_ids, whole_number

NON_NEGATIVE = whole_number(0)
POSITIVE = whole_number(1)


def add_model_args(p: argparse.ArgumentParser) -> None:
    """-m/-md, --dtype, --max-seq: the verifier and drafter to load."""
    p.add_argument("-m", "--model", metavar="VERIFIER",
                   help="verifier: a checkpoint folder (HF format) or a llama .gguf file (imported once into "
                        "~/.cache/yggc/gguf); default: the embedded demo pair (with its drafter)")
    p.add_argument("-md", "--model-draft", metavar="DRAFTER",
                   help="drafter checkpoint folder (or .gguf) sharing the verifier's tokenizer")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="weights and KV cache dtype")
    p.add_argument("--max-seq", type=NON_NEGATIVE, default=None,
                   help="KV cache capacity in tokens (prompt + output); default min(model limit, 2048)")


def add_decode_args(p: argparse.ArgumentParser) -> None:
    """The prompt, sampling, output format and threads of one decode."""
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
    """--depth/--width/--verify and the verification rules: the draft tree's shape."""
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
