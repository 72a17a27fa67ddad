"""Measurements of tools/gpu/gpu_smoke.py: random checkpoints, decoding runs, T(W) curves, host share and
device bandwidth, each returned as report rows. Imported by the smoke after it has made yggc importable."""
from __future__ import annotations

import json
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import gpu_smoke_report as report
from gpu_smoke_report import Row, one_line

WIDTHS = (1, 2, 4, 8, 16, 32, 64)
VARIANTS = ("eager", "compiled", "compiled+graphs")
T0 = time.time()


def log(msg: str) -> None:
    print(f"[gpu_smoke {time.time() - T0:6.1f} s] {msg}", file=sys.stderr, flush=True)


@dataclass
class Context:
    work: Path
    max_seq: int = 256
    new_tokens: int = 96
    prompts: int = 3
    repeats: int = 2
    widths: tuple[int, ...] = WIDTHS
    deadline: float = float("inf")
    last_compile_s: float = 0.0  # how long the last lowering took: the next one is not started past the deadline

    def out_of_time(self) -> bool:
        return time.time() + self.last_compile_s > self.deadline


def hf_shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape of a Hugging Face Llama checkpoint with config `cfg`."""
    h, f, vocab, heads = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["num_attention_heads"]
    hd = cfg.get("head_dim") or h // heads
    q, kv = heads * hd, cfg.get("num_key_value_heads", heads) * hd
    layer = {"input_layernorm": (h,), "post_attention_layernorm": (h,), "self_attn.q_proj": (q, h),
             "self_attn.k_proj": (kv, h), "self_attn.v_proj": (kv, h), "self_attn.o_proj": (h, q),
             "mlp.gate_proj": (f, h), "mlp.up_proj": (f, h), "mlp.down_proj": (h, f)}
    shapes = {"model.embed_tokens.weight": (vocab, h), "model.norm.weight": (h,)}
    shapes.update({} if cfg.get("tie_word_embeddings", False) else {"lm_head.weight": (vocab, h)})
    shapes.update({f"model.layers.{i}.{k}.weight": shape for i in range(cfg["num_hidden_layers"])
                   for k, shape in layer.items()})
    return shapes


def write_random_llama(cfg: dict, out: Path, device: str = "cpu", seed: int = 0, std: float = 0.02) -> Path:
    """An HF checkpoint folder (config.json + bf16 model.safetensors) with N(0, std) weights, unit norms."""
    import torch
    from safetensors.torch import save_file

    g = torch.Generator(device=device).manual_seed(seed)
    tensors = {}
    for name, shape in hf_shapes(cfg).items():
        t = torch.ones(shape, device=device) if len(shape) == 1 else torch.randn(shape, generator=g, device=device) * std
        tensors[name] = t.to(torch.bfloat16).cpu()
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    return out


class Ungraphed:
    """CompiledModel's width dispatch without CUDA graphs: the AOTInductor packages called directly."""

    def __init__(self, graph, packages: dict[int, Path]):
        from yggc.artifacts.buckets import load_bucket

        self.graph, self.cfg = graph, graph.cfg
        self.runners = {w: load_bucket(p, graph) for w, p in packages.items()}

    def __call__(self, ids, pos, slots, mask):
        return self.runners.get(ids.shape[0], self.graph)(ids, pos, slots, mask)


def variants(graph, packages: dict[int, Path]) -> dict[str, Callable[[], object]]:
    """The graph eager, its buckets called directly, and its buckets through CUDA graphs (the runtime's)."""
    from yggc.artifacts.buckets import CompiledModel

    return dict(zip(VARIANTS, (lambda: graph, lambda: Ungraphed(graph, packages),
                               lambda: CompiledModel(graph, packages))))


def decode_all(decoders: dict, prompts: list[list[int]], n: int, repeats: int) -> dict[str, report.DecodeRun]:
    """Greedy decode every prompt with every decoder, rows interleaved, round 0 a warm-up. The
    reference is the first decoder's first run; every run of every decoder is compared with it."""
    from yggc.tree.sampling import SamplingParams

    runs = {name: report.DecodeRun() for name in decoders}
    for i, prompt in enumerate(prompts):
        ref = None
        for round_ in range(repeats + 1):
            for name, dec in decoders.items():
                tokens = [t for chunk in dec.stream(prompt, n, SamplingParams()) for t in chunk]
                ref = tokens if ref is None else ref
                runs[name].compare(i, tokens, ref)
                if round_:
                    runs[name].tpot_ms.append(dec.stats.tpot_ms)
                    runs[name].accepted.append(dec.stats.summary().get("mean_accepted_length", 1.0))
    return runs


def ar_rows(section: str, ctx: Context, model, makers: dict[str, Callable[[], object]], prompts: list[list[int]],
            check: bool) -> Iterator[Row]:
    """AR decoding through each model variant: TPOT and tokens against the first (eager). A variant
    that cannot be built (e.g. its CUDA graph capture fails) is one FAIL row."""
    from yggc.runtime.autoregressive import AutoregressiveDecoder

    decoders = {}
    for name, make in makers.items():
        try:
            decoders[f"ar-{name}"] = AutoregressiveDecoder(make(), model.layout)
        except Exception as e:
            traceback.print_exc(file=sys.stderr)
            yield Row(section, f"ar-{name}: build", one_line(e), "FAIL", check=check)
    runs = decode_all(decoders, prompts, ctx.new_tokens, ctx.repeats)
    yield from report.decode_rows(section, runs, len(prompts), ctx.new_tokens, check)


def host_share_row(section: str, rt, prompt: list[int], iterations: int = 30) -> Row:
    """Share of a steady yggc-full iteration spent outside the compiled draft and verify calls (each
    call is synchronised, so its GPU time counts as inside)."""
    import torch

    from yggc.artifacts.cache_layout import prefill
    from yggc.runtime.autoregressive import PREFILL_CHUNK, StopPolicy
    from yggc.tree.sampling import SamplingParams

    dec, layout, inside = rt.decoder(speculative=True), rt.verifier.layout, [0.0]

    def timed(fn):
        def call(*args):
            t0 = time.perf_counter()
            out = fn(*args)
            torch.cuda.synchronize()
            inside[0] += time.perf_counter() - t0
            return out
        return call

    phases = dec.proposer.phases
    phases.run, dec.run_verify = timed(phases.run), timed(dec.run_verify)
    iterations = max(1, min(iterations, (layout.max_seq - len(prompt) - rt.shape.n_nodes) // (rt.shape.depth + 1) - 3))
    with torch.inference_mode(), torch.device(dec.device):
        logits = prefill(dec.verifier, prompt, 0, layout, PREFILL_CHUNK)
        prefill(dec.drafter, prompt, 0, layout, PREFILL_CHUNK)
        n, pending, stop = len(prompt), [int(logits.argmax())], StopPolicy(10**9, (), layout)
        params, gen = SamplingParams(), torch.Generator(device=dec.device)
        for i in range(3 + iterations):  # 3 warm-up iterations
            if i == 3:
                torch.cuda.synchronize()
                inside[0], t0 = 0.0, time.perf_counter()
            _, n, pending = dec.iterate(n, pending, params, gen, stop)
        torch.cuda.synchronize()
        total = time.perf_counter() - t0
    host = total - inside[0]
    return Row(section, "host share of a yggc-full iteration", f"{100 * host / total:.1f}% ({1000 * host / iterations:.3f}"
               f" of {1000 * total / iterations:.3f} ms, {iterations} iterations)")


def lower_widths(ctx: Context, graph, widths: list[int], tag: str) -> tuple[dict[int, Path], dict[int, str]]:
    """One forward bucket per width (passes.lower, device cuda) -> (packages, width -> why it is missing)."""
    from yggc.passes.lower import lower_bucket

    packages, missing = {}, {}
    for w in widths:
        if ctx.out_of_time():
            missing[w] = "SKIP: time budget spent"
            continue
        t0 = time.time()
        try:
            packages[w] = lower_bucket(graph, w, graph.n_slots - 1, ctx.work / f"{tag}_w{w}.pt2", "cuda")
        except Exception as e:
            traceback.print_exc(file=sys.stderr)
            missing[w] = f"FAIL: {one_line(e)}"
        ctx.last_compile_s = time.time() - t0
        log(f"lowered {tag} W={w} in {ctx.last_compile_s:.1f} s")
    return packages, missing


def width_row(section: str, model, width: int, package: Path) -> tuple[Row, dict[str, float]]:
    """T(width) of every variant, timed as the profile pass times buckets."""
    from yggc.passes.profile import bucket_latency_ms, profile_context

    ms, errors = {}, []
    for label, make in variants(model.graph, {width: package}).items():
        try:
            ms[label] = bucket_latency_ms(make(), width, model.layout, profile_context(model.layout), 20)
        except Exception as e:
            traceback.print_exc(file=sys.stderr)
            errors.append(f"{label}: {one_line(e)}")
    value = " / ".join(f"{ms[k]:.3f}" if k in ms else "error" for k in VARIANTS)
    return Row(section, f"T({width}) ms: {' / '.join(VARIANTS)}", "; ".join([value, *errors]),
               "FAIL" if errors else "INFO"), ms


def curve_rows(section: str, ctx: Context, model, packages: dict[int, Path], missing: dict[int, str]
               ) -> Iterator[Row]:
    from yggc.plan.cost_model import fit_cost_curve

    points: dict[str, dict[int, float]] = {k: {} for k in VARIANTS}
    for w in ctx.widths:
        if w in missing:
            yield Row(section, f"T({w})", missing[w], missing[w].split(":")[0])
            continue
        row, ms = width_row(section, model, w, packages[w])
        yield row
        for label, t in ms.items():
            points[label][w] = t
    for label, pts in points.items():
        if len(pts) >= 2:
            c, lo, hi = fit_cost_curve(pts), min(pts), max(pts)
            yield Row(section, f"roofline fit, {label}", f"t0 {c.t0_ms:.3f} ms, knee W={c.knee:.0f}, slope "
                      f"{c.slope_ms:.4f} ms/W; T({hi})/T({lo}) = {pts[hi] / pts[lo]:.2f}")


def copy_bandwidth_gbs(nbytes: int = 1 << 30, repeats: int = 10) -> float:
    """Device-to-device copy: bytes read + written per second."""
    import torch

    src, events = torch.empty(nbytes, dtype=torch.uint8, device="cuda"), [torch.cuda.Event(enable_timing=True) for _ in "ab"]
    dst = src.clone()
    events[0].record()
    for _ in range(repeats):
        dst.copy_(src)
    events[1].record()
    events[1].synchronize()
    return 2 * nbytes * repeats / (events[0].elapsed_time(events[1]) / 1e3) / 1e9
