#!/usr/bin/env python3
"""Greedy tree decoding through a bundle against the same bundle's compiled autoregressive decoding.

For each prompt (chat prompts from a prompts.json, as `yggc bench --prompts-file` reads them) and each
tree shape, decodes `-n` tokens both ways and reports the first token where they part, if any. On an
O2 bundle every row's logits are bit-identical whatever the width, so this must hold in bf16 too.

    python tools/check_lossless.py smollm2_bf16.bundle --prompts-file $D/prompts.json --shapes 4x2x8,3x1x3,2x4x8
"""
from __future__ import annotations

import argparse
import json

import torch

from yggc.plan.shape import TreeShape
from yggc.runtime import Runtime


def first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundle")
    ap.add_argument("--prompts-file", required=True,
                    help="prompts.json: {'prompts': [{'text': ...}, ...]}, texts already in the chat format")
    ap.add_argument("--prompts", type=int, default=4, help="prompts to decode (default 4)")
    ap.add_argument("--shapes", default="", help="DxWxV tree shapes, comma-separated (default: the bundle's plan)")
    ap.add_argument("-n", type=int, default=128, help="new tokens per prompt (default 128)")
    ap.add_argument("--threads", type=int, help="torch threads")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    rt = Runtime.load(args.bundle)
    shapes = [TreeShape.from_args(*(int(v) for v in s.split("x"))) for s in args.shapes.split(",") if s] or [rt.shape]
    prompts = json.loads(open(args.prompts_file, encoding="utf-8").read())["prompts"][: args.prompts]
    print(f"{args.bundle}: dtype {rt.manifest.dtype}, opt {rt.manifest.extra.get('opt', 'O1')}, {args.n} tokens")
    n_equal = 0
    for i, prompt in enumerate(prompts):
        ar = rt.generate(prompt["text"], args.n, decoder=rt.decoder(speculative=False)).tokens
        for shape in shapes:
            tree = rt.generate(prompt["text"], args.n, decoder=rt.decoder(shape=shape))
            where = first_difference(tree.tokens, ar)
            n_equal += where is None
            verdict = "equal" if where is None else f"DIFFERS at token {where}"
            print(f"prompt {i} ({len(ar)} tokens) D{shape.depth} W{shape.width} V{shape.verify}: {verdict}, "
                  f"mean accepted {tree.stats.summary().get('mean_accepted_length', 1.0):.2f}")
    print(f"{n_equal} of {len(prompts) * len(shapes)} tree decodings equal the bundle's AR decoding")


if __name__ == "__main__":
    main()
