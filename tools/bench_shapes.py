"""Tree shapes side by side: mean accepted length and TPOT per (D, W, V) vs autoregressive.

    python tools/bench_shapes.py [-m VERIFIER -md DRAFTER] [--prompts 4] [-n 128] [--repeats 2]
    python tools/bench_shapes.py --bundle B --shapes 1x1x1,2x1x2,4x2x8 --prompts-file P.json --threads 2

Eager by default (the embedded demo pair, float32); with --bundle, forced shapes through the bundle's
compiled packages beside its compiled AR. Greedy, interleaved per prompt; every row must equal the first.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from bench_compiled import add_workload_args, compare_decoders, heldout_texts  # tools/ sibling

from yggc.bench.suite import parse_shape
from yggc.plan.shape import TreeShape
from yggc.runtime import Runtime, drafters, loading
from yggc.runtime.autoregressive import AutoregressiveDecoder
from yggc.runtime.speculative import SpeculativeDecoder

SHAPES = [TreeShape(d, 1, d) for d in (4, 6, 8)] + [TreeShape(6, w, v) for w, v in ((4, 16), (4, 24), (8, 16), (8, 32))]


def label(shape: TreeShape) -> str:
    return f"D={shape.depth} W={shape.width} V={shape.verify}"


def prompt_texts(path: Path | None, n: int) -> list[str]:
    if path is None:
        return heldout_texts(n)
    return [p["text"] for p in json.loads(path.read_text())["prompts"]][:n]


def bundle_shapes(args, shapes: list[TreeShape], texts: list[str]) -> None:
    """The bundle's own plan and forced shapes through its compiled packages (any width an O2 package takes)
    vs its compiled AR."""
    rt = Runtime.load(args.bundle)
    prompts = [rt.encode(t) for t in texts]
    plan = f"bundle plan: {label(rt.shape)}{' + depth predictor' if rt.policy else ''}"
    decoders = {"compiled AR": rt.decoder(speculative=False), plan: rt.decoder()}
    decoders |= {label(s): rt.decoder(shape=s) for s in shapes}
    eos = rt.verifier.eos_ids if args.stop_at_eos else ()
    print(f"{args.bundle}; {len(prompts)} held-out prompts x {args.n} tokens x {args.repeats} repeats"
          f"{' (or to the end of turn)' if eos else ''}, {args.threads} thread(s), compiled, greedy")
    print("\n".join(compare_decoders(decoders, prompts, args.n, args.repeats, eos, args.host_bubble)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model")
    ap.add_argument("-md", "--model-draft")
    ap.add_argument("--bundle", help="forced shapes through this bundle's compiled packages")
    ap.add_argument("--shapes", help="DxWxV,... (default: a chain and wide-tree sweep)")
    ap.add_argument("--prompts-file", type=Path, help="held-out prompts JSON (default: the demo pair's)")
    ap.add_argument("--stop-at-eos", action="store_true", help="with --bundle: stop where a chat answer ends "
                    "(the end-of-turn token), as `yggc run --chat` does, instead of always decoding -n tokens")
    ap.add_argument("--host-bubble", action="store_true", help="with --bundle: trace the tree decoders and add "
                    "each one's median host bubble per iteration (time outside compiled model calls)")
    add_workload_args(ap)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    shapes = [parse_shape(s) for s in args.shapes.split(",")] if args.shapes else SHAPES
    texts = prompt_texts(args.prompts_file, args.prompts)
    if args.bundle:
        return bundle_shapes(args, shapes, texts)
    vdir, ddir = (args.model, args.model_draft) if args.model else loading.demo_pair_dirs()
    v, d = drafters.load_pair(vdir, ddir, torch.float32, 1024)
    prompts = [loading.encode_prompt(v.tokenizer, t) for t in texts]
    decoders = {"autoregressive": AutoregressiveDecoder(v.graph, v.layout)}
    decoders |= {label(s): SpeculativeDecoder(v.graph, d.graph, v.layout, s) for s in shapes}
    print(f"{vdir} + {ddir}; {len(prompts)} held-out prompts x {args.n} tokens x {args.repeats} repeats, "
          f"{args.threads} thread(s), eager, greedy")
    print("\n".join(compare_decoders(decoders, prompts, args.n, args.repeats)))


if __name__ == "__main__":
    main()
