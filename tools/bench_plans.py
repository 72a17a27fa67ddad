"""Compiled bundles of one pair side by side: does the calibrated plan beat the other tree shapes?

    python tools/bench_plans.py CALIBRATED.bundle OTHER.bundle [...] [--prompts 4] [-n 128] [--repeats 2]

Each bundle decodes autoregressively and with its own plan through its compiled phases; the first
bundle's compiled AR is the reference every row must equal. For a calibrated bundle the objective's estimate of ms per
token is printed next to the measurement.
"""
from __future__ import annotations

import argparse
import json

import torch
from bench_compiled import add_workload_args, compare_decoders, heldout_texts  # tools/ sibling

from yggc.runtime import Runtime


def label(rt: Runtime) -> str:
    plan = json.loads((rt.path / "plan.json").read_text())
    s = rt.shape
    text = f"{rt.path.name}: D={s.depth} W={s.width} V={s.verify} ({plan.get('source', '?')}"
    if "objective" in plan:
        text += f", estimated {plan['objective']['ms_per_token']:.2f} ms/token"
    return text + ")"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bundles", nargs="+")
    add_workload_args(ap)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    runtimes = [Runtime.load(b) for b in args.bundles]
    prompts = [runtimes[0].encode(t) for t in heldout_texts(args.prompts)]
    decoders = {f"{rt.path.name}: compiled AR (opt {rt.manifest.extra.get('opt', 'O1')})": rt.decoder(speculative=False)
                for rt in runtimes}
    decoders |= {label(rt): rt.decoder() for rt in runtimes}
    print(f"{len(prompts)} held-out prompts x {args.n} tokens x {args.repeats} repeats, {args.threads} thread(s), "
          f"torch {torch.__version__}")
    print("\n".join(compare_decoders(decoders, prompts, args.n, args.repeats)))


if __name__ == "__main__":
    main()
