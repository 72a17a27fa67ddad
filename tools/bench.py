"""Side-by-side decode benchmark: yggc against what users would run instead, in one process.

    python tools/bench.py -m VERIFIER [-md DRAFTER] [--prompts 4] [-n 128] [--repeats 3]

Systems run interleaved per prompt and repeat so machine drift hits all alike; warm-up excluded.
TPOT = time after the first new token / (new tokens - 1), as `yggc run` reports it.
Every yggc row's greedy tokens are compared with hf-ar's.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from yggc.graphs import load_tokenizer

from yggc import models
from yggc.autoregressive import AutoregressiveDecoder
from yggc.sampling import SamplingParams


@dataclass
class Sample:
    tokens: list[int]
    tpot_ms: float
    mean_accepted: float = 1.0


@dataclass
class Row:
    name: str
    samples: list[Sample] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)

    def tpots(self) -> list[float]:
        return [s.tpot_ms for s in self.samples]


class HFTimer:
    """transformers streamer that timestamps each new token."""

    def __init__(self):
        self.times: list[float] = []
        self.calls = 0

    def put(self, value):
        self.calls += 1
        if self.calls > 1:  # the first call carries the prompt
            self.times.append(time.perf_counter())

    def end(self):
        pass


def hf_runner(verifier_dir: Path, dtype: torch.dtype, drafter_dir: Path | None = None) -> Callable:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(verifier_dir, dtype=dtype).eval()
    assistant = AutoModelForCausalLM.from_pretrained(drafter_dir, dtype=dtype).eval() if drafter_dir else None

    @torch.inference_mode()
    def run(prompt: list[int], n: int) -> Sample:
        timer = HFTimer()
        kw = {"assistant_model": assistant} if assistant is not None else {}
        out = model.generate(torch.tensor([prompt]), max_new_tokens=n, min_new_tokens=n, do_sample=False,
                             streamer=timer, pad_token_id=0, eos_token_id=None, **kw)
        new = out[0, len(prompt):].tolist()
        tpot = 1000 * (timer.times[-1] - timer.times[0]) / (len(new) - 1)
        return Sample(new, tpot, (len(new) / (timer.calls - 1)) if assistant is not None else 1.0)

    return run


def yggc_runner(decoder) -> Callable:
    def run(prompt: list[int], n: int) -> Sample:
        tokens = [t for chunk in decoder.stream(prompt, n, SamplingParams()) for t in chunk]
        s = decoder.stats.summary()
        return Sample(tokens, s["tpot_ms"], s.get("mean_accepted_length", 1.0))

    return run


def build_systems(args) -> dict[str, Callable]:
    dtype = models.parse_dtype(args.dtype)
    systems = {"hf-ar": hf_runner(args.model, dtype)}
    if args.model_draft and "hf-assisted" in args.systems:
        systems["hf-assisted"] = hf_runner(args.model, dtype, args.model_draft)
    verifier = models.load(args.model, dtype, args.max_seq)
    systems["yggc-ar-eager"] = yggc_runner(AutoregressiveDecoder(verifier.graph, verifier.layout))
    return {k: v for k, v in systems.items() if k in args.systems}


def default_prompts(verifier_dir: Path, n_prompts: int, vocab: int) -> list[list[int]]:
    tok = load_tokenizer(verifier_dir)
    try:
        from train_pair import heldout_prompts  # tools/ sibling, present with the trained pairs

        texts = heldout_prompts(n_prompts)
    except Exception:
        texts = None
    if tok is not None and texts:
        return [tok.encode(t).ids for t in texts]
    g = torch.Generator().manual_seed(0)
    return [torch.randint(1, vocab, (32,), generator=g).tolist() for _ in range(n_prompts)]


def machine_line() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    return f"{cpu}, {torch.get_num_threads()} threads, torch {torch.__version__}"


def measure(systems: dict[str, Callable], prompts: list[list[int]], n: int, repeats: int) -> dict[str, Row]:
    rows = {name: Row(name) for name in systems}
    for run in systems.values():  # warm-up
        run(prompts[0], min(n, 8))
    for p_i, prompt in enumerate(prompts):
        for _ in range(repeats):
            for name, run in systems.items():
                rows[name].samples.append(run(prompt, n))
        ref = rows["hf-ar"].samples[-1].tokens if "hf-ar" in rows else None
        for name, row in rows.items():
            got = row.samples[-1].tokens
            if ref is not None and name.startswith("yggc") and got != ref:
                pos = next((i for i, (a, b) in enumerate(zip(got, ref)) if a != b), min(len(got), len(ref)))
                row.mismatches.append(f"prompt {p_i} position {pos}")
    return rows


def table(rows: dict[str, Row]) -> str:
    base = statistics.median(rows["hf-ar"].tpots()) if "hf-ar" in rows else None
    lines = ["| system | TPOT median ms | TPOT p90 ms | tokens/s | mean accepted | speedup vs hf-ar | equal to hf-ar |",
             "|---|---|---|---|---|---|---|"]
    for row in rows.values():
        t = sorted(row.tpots())
        med, p90 = statistics.median(t), t[min(len(t) - 1, int(0.9 * len(t)))]
        acc = statistics.mean(s.mean_accepted for s in row.samples)
        speed = f"{base / med:.2f}x" if base else "-"
        equal = "-" if row.name.startswith("hf") else ("yes" if not row.mismatches else "NO: " + "; ".join(row.mismatches))
        lines.append(f"| {row.name} | {med:.3f} | {p90:.3f} | {1000 / med:.1f} | {acc:.2f} | {speed} | {equal} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", type=Path, required=True, help="verifier checkpoint folder")
    ap.add_argument("-md", "--model-draft", type=Path, help="drafter checkpoint folder")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("-n", type=int, default=128, help="new tokens per prompt")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--max-seq", type=int, default=1024)
    ap.add_argument("--systems", default="hf-ar,hf-assisted,yggc-ar-eager", type=lambda s: s.split(","))
    ap.add_argument("--json", type=Path, help="write raw samples here")
    args = ap.parse_args()
    systems = build_systems(args)
    vocab = models.load_config(args.model).vocab_size
    rows = measure(systems, default_prompts(args.model, args.prompts, vocab), args.n, args.repeats)
    print(f"machine: {machine_line()}; dtype {args.dtype}; {args.prompts} prompts x {args.n} tokens x "
          f"{args.repeats} repeats")
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps({k: [s.__dict__ for s in r.samples] for k, r in rows.items()}))


if __name__ == "__main__":
    main()
