"""`yggc bench`: yggc side by side with what users would run instead, in one process.

Rows (ROWS, in this order) are set up and warmed up one after the other, then run interleaved per
prompt and repeat so that machine drift hits all of them alike; warm-up and tuning runs are not
samples. The table's columns are defined in yggc.bench.report (the physical floor in yggc.bench.floor).

yggc-chain and yggc-tree-static run eagerly with the shape of lowest TPOT on the warm-up prompt
among a small grid. The compiled rows use --bundle, else a bundle cached under
~/.cache/yggc/bundles/<pair key>-dDwWvV for the tuned tree shape, compiled in a child process when
absent (--quick never compiles: it uses a cached one or skips those rows). Without transformers,
--quick skips the hf rows; otherwise asking for them is an error. The openvino rows (yggc.bench.openvino) and
the llama.cpp rows (yggc.bench.llama_cpp) run only when named in --rows, and need openvino-genai or
llama-cpp-python.
"""
from __future__ import annotations

import json
import resource
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..errors import YggcError
from ..plan.shape import TreeShape
from ..runtime import loading
from ..runtime.autoregressive import AutoregressiveDecoder
from ..runtime.drafters import check_drafter, kind_of_folder
from ..tree.sampling import SamplingParams
from .floor import physical_floor
from .llama_cpp import llama_cpp_row, require_llama_cpp
from .model_cache import Models, cached_bundles
from .openvino import openvino_row, require_openvino_genai
from .prompt_sets import check_fits, make_prompts
from .report import efficiency_lines, plot, require_matplotlib, summary_lines, table, to_json
from .rows import Row, Runner, Sample, reference_row, sampling_params
from .runners import have_transformers, hf_runner, require_transformers, yggc_runner
from .suite import (
    BUNDLE_ROWS,
    DRAFTER_ROWS,
    HF_ROWS,
    LLAMA_CPP_ROWS,
    OPENVINO_ROWS,
    ROWS,
    TUNE_TOKENS,
    BenchConfig,
    log,
)


def tune_shape(name: str, shapes: Iterable[TreeShape], make: Callable[[TreeShape], Runner], prompt: list[int],
               n: int, params: SamplingParams) -> tuple[TreeShape, dict[str, float]]:
    """The shape with the lowest TPOT on one tuning prompt (after a short warm-up of each)."""
    times = {}
    for shape in shapes:
        run = make(shape)
        run(prompt, min(n, 8), params)
        times[shape] = run(prompt, n, params).tpot_ms
    best = min(times, key=times.get)
    log(f"{name} tuning (TPOT ms): " + ", ".join(f"{s.short} {t:.2f}" for s, t in times.items())
        + f" -> {best.short}")
    return best, {s.short: t for s, t in times.items()}


def yggc_row(name: str, decoder, runs_as: str) -> Row:
    return Row(name, yggc_runner(decoder), runs_as, decoder)


class RowFactory:
    """Builds each row by name; chain and tree shapes are tuned here, once, on the tuning prompt."""

    def __init__(self, cfg: BenchConfig, tune_prompt: list[int], params: SamplingParams):
        self.cfg, self.tune_prompt, self.params = cfg, tune_prompt, params
        self.models = Models(cfg, self.tuned)
        self.tuning: dict[str, dict[str, float]] = {}
        self._tuned: dict[str, TreeShape] = {}

    def tuned(self, name: str) -> TreeShape:
        if name not in self._tuned:
            shapes = ([TreeShape(d, 1, d) for d in self.cfg.chain_depths] if name == "yggc-chain"
                      else list(self.cfg.tree_grid))
            n = min(self.cfg.n_new, TUNE_TOKENS)
            make = lambda s: yggc_runner(self.models.spec_decoder(s))  # noqa: E731
            self._tuned[name], self.tuning[name] = tune_shape(name, shapes, make, self.tune_prompt, n, self.params)
        return self._tuned[name]

    def build(self, name: str) -> Row:
        m = self.models
        if name == "hf-ar":
            return Row(name, hf_runner(m.hf_verifier), "transformers generate, eager")
        if name == "hf-assisted":
            return Row(name, hf_runner(m.hf_verifier, m.hf_drafter), "transformers assisted generation")
        if name in OPENVINO_ROWS:
            return openvino_row(name, self.cfg)
        if name in LLAMA_CPP_ROWS:
            return llama_cpp_row(name, self.cfg)
        if name == "yggc-ar-eager":
            v = m.verifier
            return yggc_row(name, AutoregressiveDecoder(v.graph, v.layout), "eager")
        if name == "yggc-ar-compiled":
            rt = m.runtime
            return yggc_row(name, rt.decoder(speculative=False), "compiled buckets")
        if name == "yggc-suffix":
            dec = m.runtime.suffix_decoder()
            return yggc_row(name, dec, f"compiled verifier, suffix drafts {dec.shape.short}")
        if name in ("yggc-chain", "yggc-tree-static"):
            shape = self.tuned(name)
            return yggc_row(name, m.spec_decoder(shape), f"eager {shape.short} (tuned)")
        if name in ("yggc-full", "yggc-full-suffix"):
            rt, sampling, branches = m.runtime, not self.cfg.greedy, name == "yggc-full-suffix"
            shape, speculate = rt.plan_for(sampling)
            plan = "sampling plan" if sampling and rt.sampling_plan else "bundle plan"
            runs_as = (f"compiled {shape.short} ({plan})" if speculate
                       else f"compiled AR ({plan}: its tree priced or measured slower)")
            if branches and speculate:
                runs_as += " + suffix branches"
            return yggc_row(name, rt.decoder(sampling=sampling, suffix_branches=branches), runs_as)
        raise YggcError(f"unknown row {name!r}; rows are {', '.join(ROWS)}")


def skip_reason(name: str, cfg: BenchConfig) -> str | None:
    """Why a row cannot run with this configuration (None: it can); raises where that is an error."""
    if name in HF_ROWS and not have_transformers():
        if cfg.quick:
            return "transformers is not installed"
        require_transformers()
    if name in DRAFTER_ROWS and cfg.drafter is None and not (name == "openvino-spec" and cfg.openvino_draft_ir):
        return "needs a drafter (-md)"
    kind = kind_of_folder(cfg.drafter) if cfg.drafter is not None else None
    if kind is not None and kind.head and name in ("hf-assisted", "openvino-spec"):
        return f"needs a standalone drafter (-md is {kind.description})"
    if name == "llama.cpp-gguf" and cfg.gguf is None:
        return "needs a GGUF file (--gguf FILE, or -m MODEL.gguf)"
    if name in BUNDLE_ROWS and cfg.bundle is None:
        if cfg.drafter is None:
            return "needs --bundle or a drafter to compile one"
        if cfg.quick and not cached_bundles(cfg):
            return "no cached bundle for this pair (--quick does not compile; pass --bundle)"
    return None


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def setup_rows(cfg: BenchConfig, factory: RowFactory, warm_prompt: list[int]) -> list[Row]:
    """Build and warm up each row in order, noting the RSS high-water mark after each."""
    rows, before = [], peak_rss_mb()
    for name in cfg.rows:
        reason = skip_reason(name, cfg)
        if reason:
            log(f"skipping {name}: {reason}")
            continue
        log(f"setting up {name}")
        row = factory.build(name)
        row.run(warm_prompt, min(cfg.n_new, 16), factory.params)
        row.rss_mb = peak_rss_mb()
        row.rss_delta_mb, before = row.rss_mb - before, row.rss_mb
        rows.append(row)
    return rows


def measure(rows: list[Row], prompts: list[list[int]], n: int, repeats: int, temperature: float) -> None:
    """Every row on every prompt and repeat, interleaved; the same seed for all rows in one slot."""
    for p, prompt in enumerate(prompts):
        log(f"prompt {p + 1}/{len(prompts)} ({len(prompt)} tokens)")
        for r in range(repeats):
            params = sampling_params(temperature, 1000 * p + r)
            for row in rows:
                res = row.run(prompt, n, params)
                row.samples.append(Sample(p, r, res.tokens, res.tpot_ms, res.per_iter))


def first_difference(a: list[int], b: list[int]) -> int | None:
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def check_equality(rows: list[Row], ref: Row) -> None:
    """Each row's tokens against the reference's for the same prompt: first mismatch per prompt."""
    want = {s.prompt: s.tokens for s in ref.samples if s.repeat == 0}
    for row in rows:
        if row is ref:
            continue
        bad: dict[int, int] = {}
        for s in row.samples:
            pos = first_difference(s.tokens, want[s.prompt])
            if pos is not None and s.prompt not in bad:
                bad[s.prompt] = pos
        row.mismatches = [f"prompt {p} position {pos}" for p, pos in sorted(bad.items())]


def failures(rows: list[Row]) -> list[str]:
    return [f"{r.name} differs ({'; '.join(r.mismatches)})" for r in rows if r.name.startswith("yggc") and r.mismatches]


@dataclass
class Report:
    rows: list[Row]
    text: str
    failures: list[str]
    data: dict


def run_benchmark(cfg: BenchConfig) -> Report:
    if cfg.plot_path:
        require_matplotlib()  # fail before the long run, not after
    if OPENVINO_ROWS.intersection(cfg.rows):
        require_openvino_genai()
    if LLAMA_CPP_ROWS.intersection(cfg.rows):
        require_llama_cpp()
    if cfg.drafter is not None:
        check_drafter(cfg.verifier, cfg.drafter)
    tokenizer = loading.load_tokenizer(cfg.verifier)
    prompts, source = make_prompts(cfg, tokenizer, loading.load_config(cfg.verifier).vocab_size)
    check_fits(prompts, cfg)
    measured, warm = prompts[:-1], prompts[-1]
    factory = RowFactory(cfg, warm, sampling_params(cfg.temperature, 12345))
    rows = setup_rows(cfg, factory, warm)
    if not rows:
        raise YggcError("no row can run with these flags (see the skip notes above)")
    measure(rows, measured, cfg.n_new, cfg.repeats, cfg.temperature)
    ref = reference_row(rows, cfg.dtype) if cfg.greedy else None
    if cfg.quick and cfg.greedy and ref is None:
        raise YggcError("--quick checks equality against the verifier decoding alone; keep hf-ar or a yggc-ar row in --rows")
    if ref is not None:
        check_equality(rows, ref)
    floor = physical_floor(cfg, rows, factory.models, measured[0])
    text = "\n".join(summary_lines(cfg, measured, source, floor, factory.tuning) + ["", table(rows, ref), ""]
                     + efficiency_lines(rows))
    data = to_json(cfg, rows, floor, factory.tuning, source)
    if cfg.json_path:
        cfg.json_path.write_text(json.dumps(data))
    if cfg.plot_path:
        plot(rows, cfg.plot_path)
    return Report(rows, text, failures(rows) if cfg.greedy else [], data)
