"""`yggc bench`: yggc side by side with what users would run instead, in one process.

Rows (ROWS, in this order) are set up and warmed up one after the other, then run interleaved per
prompt and repeat so that machine drift hits all of them alike; warm-up and tuning runs are not
samples. The table's columns are defined in yggc.bench_report (the physical floor in yggc.bench_floor).

yggc-chain and yggc-tree-static run eagerly with the shape of lowest TPOT on the warm-up prompt
among a small grid. The compiled rows use --bundle, else a bundle cached under
~/.cache/yggc/bundles/<pair key>-dDwWvV for the tuned tree shape, compiled in a child process when
absent (--quick never compiles: it uses a cached one or skips those rows). Without transformers,
--quick skips the hf rows; otherwise asking for them is an error.
"""
from __future__ import annotations

import hashlib
import json
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import torch

from . import models
from .autoregressive import AutoregressiveDecoder
from .bench_floor import physical_floor
from .bench_report import plot, require_matplotlib, shape_label, summary_lines, table, to_json
from .bench_rows import Result, Row, Runner, Sample, reference_row, sampling_params
from .errors import YggcError
from .graphs import check_pair
from .sampling import SamplingParams
from .speculative import SpeculativeDecoder, TreeShape

# table order = set-up order: eager rows first, so the compiled rows' RSS increments show only the bundle
ROWS = ("hf-ar", "hf-assisted", "yggc-ar-eager", "yggc-chain", "yggc-tree-static", "yggc-ar-compiled", "yggc-full")
HF_ROWS = frozenset({"hf-ar", "hf-assisted"})
DRAFTER_ROWS = frozenset({"hf-assisted", "yggc-chain", "yggc-tree-static", "yggc-full"})
BUNDLE_ROWS = frozenset({"yggc-ar-compiled", "yggc-full"})
CHAIN_DEPTHS = (2, 3, 4, 6, 8)
TREE_GRID = (TreeShape(3, 2, 6), TreeShape(4, 2, 8), TreeShape(4, 3, 8), TreeShape(5, 2, 10),
             TreeShape(4, 4, 12), TreeShape(6, 3, 12))
PROMPTS_FILE = models.DEMO_PAIR / "prompts.json"
BENCH_PAIR = Path("~/.cache/yggc/pairs/bench").expanduser()
BUNDLE_CACHE = Path("~/.cache/yggc/bundles").expanduser()
RANDOM_PROMPT_LEN = 32
TUNE_TOKENS = 64


def log(msg: str) -> None:
    print(f"yggc bench: {msg}", file=sys.stderr, flush=True)


# ---- configuration -------------------------------------------------------------------------------

@dataclass
class BenchConfig:
    verifier: Path
    drafter: Path | None
    bundle: Path | None = None  # None: compile one into BUNDLE_CACHE (or, with quick, use a cached one)
    rows: tuple[str, ...] = ROWS
    n_prompts: int = 4
    n_new: int = 128
    repeats: int = 3
    temperature: float = 0.0
    dtype: str = "float32"
    max_seq: int = 1024
    quick: bool = False
    prompts_file: Path | None = None
    chain_depths: tuple[int, ...] = CHAIN_DEPTHS
    tree_grid: tuple[TreeShape, ...] = TREE_GRID
    bundle_cache: Path = BUNDLE_CACHE
    bandwidth_mb: int = 256
    floor_repeats: int = 20
    json_path: Path | None = None
    plot_path: Path | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def parse_shape(text: str) -> TreeShape:
    """'4x2x8' (DxWxV) -> TreeShape."""
    try:
        depth, width, verify = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise YggcError(f"tree shapes are written DxWxV like 4x2x8, got {text!r}") from None
    return TreeShape.from_args(depth, width, verify)


# ---- runners -------------------------------------------------------------------------------------

def yggc_runner(decoder) -> Runner:
    def run(prompt: list[int], n: int, params: SamplingParams) -> Result:
        tokens = [t for chunk in decoder.stream(prompt, n, params) for t in chunk]
        st = decoder.stats
        per_iter = [k + 1 for k in st.accepted_lengths] if st.n_iterations else [1] * (len(tokens) - 1)
        return Result(tokens, st.tpot_ms, per_iter)

    return run


class StreamTimer:
    """transformers streamer: timestamps and sizes of the new-token callbacks (the first is the prompt)."""

    def __init__(self):
        self.calls: list[tuple[float, int]] = []

    def put(self, value: torch.Tensor) -> None:
        self.calls.append((time.perf_counter(), int(value.numel())))

    def end(self) -> None:
        pass

    def result(self, tokens: list[int]) -> Result:
        new = self.calls[1:]
        if len(new) < 2:
            return Result(tokens, 0.0, [])
        after_first = sum(k for _, k in new[1:])
        tpot = 1000 * (new[-1][0] - new[0][0]) / after_first if after_first else 0.0
        return Result(tokens, tpot, [k for _, k in new[1:]])


def require_transformers():
    try:
        import transformers
    except ImportError:
        raise YggcError("the hf-ar and hf-assisted rows need transformers: pip install 'yggc[hf]', "
                        "or leave them out with --rows") from None
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    return transformers


def hf_sampling_kwargs(params: SamplingParams) -> dict:
    if params.greedy:
        return {"do_sample": False}
    torch.manual_seed(params.seed if params.seed is not None else 0)
    return {"do_sample": True, "temperature": params.temperature, "top_k": 0, "top_p": 1.0}


def hf_runner(model, assistant=None) -> Runner:
    @torch.inference_mode()
    def run(prompt: list[int], n: int, params: SamplingParams) -> Result:
        timer, ids = StreamTimer(), torch.tensor([prompt])
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, streamer=timer,
                             eos_token_id=None, pad_token_id=0, assistant_model=assistant,
                             **hf_sampling_kwargs(params))
        return timer.result(out[0, len(prompt):].tolist())

    return run


# ---- models, loaded on first use and shared by the rows ------------------------------------------

def pair_key(cfg: BenchConfig) -> str:
    """Cache key of a compiled bundle for this pair, dtype, max_seq and toolchain (not the shape)."""
    from .bundle import environment, model_hashes

    env = environment("cpu", cfg.dtype)
    parts = [model_hashes(cfg.verifier), model_hashes(cfg.drafter), cfg.dtype, cfg.max_seq, env]
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def cached_bundles(cfg: BenchConfig) -> list[Path]:
    return sorted(cfg.bundle_cache.glob(f"{pair_key(cfg)}-*/manifest.json"), key=lambda p: p.stat().st_mtime)


def compile_bundle_subprocess(cfg: BenchConfig, shape: TreeShape, out: Path) -> None:
    """`yggc compile` in a child process, so the compiler's memory stays out of this one's RSS."""
    log(f"compiling a bundle for {shape_label(shape)} into {out} (a few minutes, once per pair and shape)")
    cmd = [sys.executable, "-m", "yggc.cli", "compile", "-m", str(cfg.verifier), "-md", str(cfg.drafter),
           "--depth", str(shape.depth), "--width", str(shape.width), "--verify", str(shape.verify),
           "--dtype", cfg.dtype, "--max-seq", str(cfg.max_seq), "-o", str(out), "--overwrite"]
    if subprocess.run(cmd).returncode != 0:
        raise YggcError(f"compiling the bundle failed (command: {' '.join(cmd)}); pass --bundle or --rows without "
                        "yggc-ar-compiled,yggc-full")


def resolve_bundle(cfg: BenchConfig, shape: Callable[[], TreeShape]) -> Path:
    """--bundle, else a cached bundle (quick: any shape; otherwise the tuned tree shape), else compile one."""
    from .bundle import validate_bundle

    if cfg.bundle is not None:
        return cfg.bundle
    found = cached_bundles(cfg)
    if cfg.quick:
        if not found:
            raise YggcError("no compiled bundle for this pair in the cache, and --quick does not compile one")
        return found[-1].parent
    want = shape()
    out = cfg.bundle_cache / f"{pair_key(cfg)}-d{want.depth}w{want.width}v{want.verify}"
    try:
        validate_bundle(out)
        return out
    except YggcError:
        compile_bundle_subprocess(cfg, want, out)
    return out


class Models:
    """Everything the rows run on, loaded on first use so each row's RSS increment shows what it added."""

    def __init__(self, cfg: BenchConfig, tune: Callable[[str], TreeShape]):
        self.cfg, self.dtype, self._tune = cfg, models.parse_dtype(cfg.dtype), tune

    @cached_property
    def hf_verifier(self):
        require_transformers()
        from transformers import AutoModelForCausalLM

        return AutoModelForCausalLM.from_pretrained(self.cfg.verifier, dtype=self.dtype).eval()

    @cached_property
    def hf_drafter(self):
        from transformers import AutoModelForCausalLM

        return AutoModelForCausalLM.from_pretrained(self.cfg.drafter, dtype=self.dtype).eval()

    @cached_property
    def verifier(self) -> models.LoadedModel:
        return models.load(self.cfg.verifier, self.dtype, self.cfg.max_seq)

    @cached_property
    def drafter(self) -> models.LoadedModel:
        return models.load(self.cfg.drafter, self.dtype, self.cfg.max_seq)

    @cached_property
    def runtime(self):
        from .runtime import Runtime

        path = resolve_bundle(self.cfg, lambda: self._tune("yggc-tree-static"))
        log(f"bundle {path}")
        return Runtime.load(path)

    def spec_decoder(self, shape: TreeShape) -> SpeculativeDecoder:
        v, d = self.verifier, self.drafter
        return SpeculativeDecoder(v.graph, d.graph, v.layout, shape)


# ---- rows ----------------------------------------------------------------------------------------

def tune_shape(name: str, shapes: Iterable[TreeShape], make: Callable[[TreeShape], Runner], prompt: list[int],
               n: int, params: SamplingParams) -> tuple[TreeShape, dict[str, float]]:
    """The shape with the lowest TPOT on one tuning prompt (after a short warm-up of each)."""
    times = {}
    for shape in shapes:
        run = make(shape)
        run(prompt, min(n, 8), params)
        times[shape] = run(prompt, n, params).tpot_ms
    best = min(times, key=times.get)
    log(f"{name} tuning (TPOT ms): " + ", ".join(f"{shape_label(s)} {t:.2f}" for s, t in times.items())
        + f" -> {shape_label(best)}")
    return best, {shape_label(s): t for s, t in times.items()}


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
        if name == "yggc-ar-eager":
            v = m.verifier
            return yggc_row(name, AutoregressiveDecoder(v.graph, v.layout), "eager")
        if name == "yggc-ar-compiled":
            rt = m.runtime
            return yggc_row(name, rt.decoder(speculative=False), "compiled buckets")
        if name in ("yggc-chain", "yggc-tree-static"):
            shape = self.tuned(name)
            return yggc_row(name, m.spec_decoder(shape), f"eager {shape_label(shape)} (tuned)")
        if name == "yggc-full":
            rt = m.runtime
            return yggc_row(name, rt.decoder(), f"compiled {shape_label(rt.shape)} (bundle plan)")
        raise YggcError(f"unknown row {name!r}; rows are {', '.join(ROWS)}")


def have_transformers() -> bool:
    import importlib.util

    return importlib.util.find_spec("transformers") is not None


def skip_reason(name: str, cfg: BenchConfig) -> str | None:
    """Why a row cannot run with this configuration (None: it can); raises where that is an error."""
    if name in HF_ROWS and not have_transformers():
        if cfg.quick:
            return "transformers is not installed"
        require_transformers()
    if name in DRAFTER_ROWS and cfg.drafter is None:
        return "needs a drafter (-md)"
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


# ---- measurement ---------------------------------------------------------------------------------

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


# ---- prompts -------------------------------------------------------------------------------------

def load_prompt_texts(path: Path | None) -> tuple[list[str] | None, str]:
    """Held-out prompt texts and where they came from: the JSON file, tools/train_pair.py, or none."""
    path = path or PROMPTS_FILE
    if path.exists():
        return [p["text"] for p in json.loads(path.read_text())["prompts"]], str(path)
    try:
        from train_pair import heldout_prompts  # tools/ is on sys.path when run as tools/bench.py

        return heldout_prompts(64), "tools/train_pair.py heldout_prompts"
    except ImportError:
        return None, "none"


def make_prompts(cfg: BenchConfig, tokenizer, vocab: int) -> tuple[list[list[int]], str]:
    """cfg.n_prompts measured prompts + 1 for warm-up and tuning, as token ids."""
    need = cfg.n_prompts + 1
    texts, source = load_prompt_texts(cfg.prompts_file)
    if texts is None or tokenizer is None:
        g = torch.Generator().manual_seed(0)
        why = "no prompt file" if texts is None else "the verifier has no tokenizer.json"
        log(f"using random token prompts ({why})")
        return [torch.randint(1, vocab, (RANDOM_PROMPT_LEN,), generator=g).tolist() for _ in range(need)], "random ids"
    if len(texts) < need:
        raise YggcError(f"{source} has {len(texts)} prompts; --prompts {cfg.n_prompts} needs {need} (one is for warm-up)")
    return [tokenizer.encode(t).ids for t in texts[:need]], source


def check_fits(prompts: list[list[int]], cfg: BenchConfig) -> None:
    longest = max(len(p) for p in prompts) + cfg.n_new + max(s.n_nodes for s in cfg.tree_grid) + 1
    if longest > cfg.max_seq:
        raise YggcError(f"prompt + {cfg.n_new} new tokens + a draft tree need {longest} cache slots but --max-seq is "
                        f"{cfg.max_seq}; raise --max-seq or lower -n")


# ---- the whole run -------------------------------------------------------------------------------

@dataclass
class Report:
    rows: list[Row]
    text: str
    failures: list[str]
    data: dict


def run_benchmark(cfg: BenchConfig) -> Report:
    if cfg.plot_path:
        require_matplotlib()  # fail before the long run, not after
    if cfg.drafter is not None:
        check_pair(cfg.verifier, cfg.drafter)
    tokenizer = models.load_tokenizer(cfg.verifier)
    prompts, source = make_prompts(cfg, tokenizer, models.load_config(cfg.verifier).vocab_size)
    check_fits(prompts, cfg)
    measured, warm = prompts[:-1], prompts[-1]
    factory = RowFactory(cfg, warm, sampling_params(cfg.temperature, 12345))
    rows = setup_rows(cfg, factory, warm)
    if not rows:
        raise YggcError("no row can run with these flags (see the skip notes above)")
    measure(rows, measured, cfg.n_new, cfg.repeats, cfg.temperature)
    ref = reference_row(rows) if cfg.greedy else None
    if cfg.quick and cfg.greedy and ref is None:
        raise YggcError("--quick checks equality against hf-ar or yggc-ar-eager; keep one of them in --rows")
    if ref is not None:
        check_equality(rows, ref)
    floor = physical_floor(cfg, rows, factory.models, measured[0])
    text = "\n".join(summary_lines(cfg, measured, source, floor, factory.tuning) + ["", table(rows, cfg.greedy, floor)])
    data = to_json(cfg, rows, floor, factory.tuning, source)
    if cfg.json_path:
        cfg.json_path.write_text(json.dumps(data))
    if cfg.plot_path:
        plot(rows, cfg.plot_path)
    return Report(rows, text, failures(rows) if cfg.greedy else [], data)
