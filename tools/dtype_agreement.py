#!/usr/bin/env python3
"""How far bfloat16 greedy output follows float32 greedy output of the same model.

Losslessness is defined per dtype (a bf16 bundle equals yggc's own bf16 verifier decoding); this
measures what the cheaper dtype costs against float32: for each prompt, the first position where the
two greedy continuations differ, and the share of positions that agree. Eager AR decoding, the
same prompts as `yggc bench --prompts-file`.

    python tools/dtype_agreement.py -m $(yggc pull smollm2) \
        --prompts-file $(yggc pull smollm2 --drafter)/prompts.json -n 128 --prompts 8
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from yggc.bench.prompt_sets import load_prompt_texts
from yggc.runtime import loading
from yggc.runtime.autoregressive import AutoregressiveDecoder
from yggc.tree.sampling import SamplingParams


def greedy(model: loading.LoadedModel, ids: list[int], n: int) -> tuple[list[int], float]:
    dec = AutoregressiveDecoder(model.graph, model.layout)
    t0 = time.perf_counter()
    out = [t for chunk in dec.stream(ids, n, SamplingParams()) for t in chunk]
    return out, (time.perf_counter() - t0) * 1000 / n


def first_difference(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", type=Path, required=True, help="checkpoint folder or .gguf")
    ap.add_argument("--prompts-file", type=Path, help="JSON {\"prompts\": [{\"text\": ...}]}")
    ap.add_argument("--prompts", type=int, default=8, help="prompts to decode (default 8)")
    ap.add_argument("-n", type=int, default=128, help="new tokens per prompt (default 128)")
    ap.add_argument("--json", type=Path, help="write the result here too")
    args = ap.parse_args(argv)
    path = loading.model_dir(args.model)
    texts, source = load_prompt_texts(args.prompts_file)
    loaded = {d: loading.load(path, loading.parse_dtype(d), 1024) for d in ("float32", "bfloat16")}
    rows = []
    for text in texts[:args.prompts]:
        ids = loaded["float32"].tokenizer.encode(text).ids
        (a, ms32), (b, ms16) = greedy(loaded["float32"], ids, args.n), greedy(loaded["bfloat16"], ids, args.n)
        rows.append({"first_difference": first_difference(a, b), "agreement": sum(x == y for x, y in zip(a, b)) / args.n,
                     "eager_ms_per_token": {"float32": ms32, "bfloat16": ms16}})
        print(json.dumps(rows[-1]), flush=True)
    result = {"model": str(path), "prompts": source, "n_new": args.n, "per_prompt": rows,
              "identical_prompts": sum(r["first_difference"] == args.n for r in rows),
              "median_first_difference": statistics.median(r["first_difference"] for r in rows),
              "mean_agreement": statistics.mean(r["agreement"] for r in rows)}
    print(json.dumps({k: v for k, v in result.items() if k != "per_prompt"}, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
