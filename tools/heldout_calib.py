#!/usr/bin/env python3
"""Calibration text from held-out prompts: the verifier's own greedy answers, as whole conversations.

`yggc compile --calib` picks the tree shape from the acceptance it measures on the calibration text, and
checks the choice by decoding that text. Text the drafter was trained on overstates acceptance: on SmolLM2
the shipped drafter accepted ~1.8 tokens per D2 W2 V3 iteration on its training conversations and ~1.5 on
held-out chat prompts, enough to flip the verdict. This writes conversations the drafter never saw: each
held-out prompt (already in the chat format, as in prompts.json) followed by the verifier's greedy answer up
to its end of turn, decoded with a compiled bundle's verifier alone (lossless, so any bundle of the pair
gives the same text in its dtype). The first --skip prompts are left out, so `yggc bench --prompts-file`
(which measures the first ones) never runs on calibration prompts.

    python tools/heldout_calib.py smollm2.bundle --prompts-file $D/prompts.json --skip 16 -o $D/calib.txt
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from tqdm import tqdm


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bundle", type=Path, help="a compiled bundle of the pair (its verifier answers)")
    ap.add_argument("--prompts-file", type=Path, required=True, help='JSON {"prompts": [{"text": ...}]} (held out)')
    ap.add_argument("--skip", type=int, default=16, help="leave the first N prompts to benchmarks (default 16)")
    ap.add_argument("-n", "--max-new-tokens", type=int, default=192, help="answer length cap (default 192)")
    ap.add_argument("-o", "--out", type=Path, required=True, help="the calibration text file to write")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads (default: all cores)")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    from yggc import Runtime

    torch.set_num_threads(args.threads)
    texts = [p["text"] for p in json.loads(args.prompts_file.read_text())["prompts"]][args.skip:]
    if not texts:
        raise SystemExit(f"heldout_calib: error: {args.prompts_file} has no prompts after the first {args.skip}")
    rt = Runtime.load(args.bundle)
    decoder, end = rt.decoder(speculative=False), rt.verifier.chat.eos_token if rt.verifier.chat else ""
    conversations = []
    for text in tqdm(texts, desc="heldout_calib", unit="prompt"):
        answer = rt.generate(text, args.max_new_tokens, decoder=decoder).text  # stops at the end of turn
        conversations.append(f"{text}{answer.removesuffix(end)}{end}\n")
    part = args.out.with_name(args.out.name + ".part")
    part.write_text("".join(conversations), encoding="utf-8")
    part.rename(args.out)
    print(f"heldout_calib: wrote {len(conversations)} conversations to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
