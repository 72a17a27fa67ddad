"""`yggc bench`: yggc side by side with what users would run instead, in one process.

Rows (ROWS, in this order) are set up and warmed up one after the other, then run interleaved per
prompt and repeat so that machine drift hits all of them alike; warm-up and tuning runs are not
samples. Definitions used in the table:

* TPOT: time after the first new token / (new tokens - 1), as `yggc run` reports it; for
  transformers, from the streamer's first new-token callback to its last.
* tokens/s: 1000 / TPOT median (decode speed, prefill excluded).
* mean accepted: tokens committed per decode iteration, bonus token included (vLLM's convention);
  1 for autoregressive rows, tokens per streamer callback for hf-assisted.
* peak RSS: the process high-water mark (getrusage ru_maxrss) right after the row was set up and
  warmed up. It is cumulative: "+N" is what the row added on top of the rows above it. Models are
  loaded once and shared (hf-assisted reuses hf-ar's verifier, the eager yggc rows share one
  verifier/drafter, the compiled rows share one bundle), so each is charged to the first row using it.
* floor: verifier weight bytes / measured memory bandwidth, the least time a verifier step that reads
  every weight can take here. The bandwidth is the fastest of a full read and a copy of a large
  tensor (main memory) and a repeated read of a weights-sized tensor (the caches, when the weights
  fit in them: then the main-memory floor would not be a floor). Medians, at the rows' thread count.
  "verify ms" is the median verify call inside one extra decode of the first prompt (the decoder's
  call is wrapped by a timer): the one-token step for AR rows, the verify phase (pruning, tree-masked
  verifier forward, acceptance, KV compaction) for greedy speculative rows, the V+1-row verifier
  forward when sampling; "x floor" is its ratio to the floor.
* equal: greedy tokens equal to hf-ar's (yggc-ar-eager's when transformers is missing), else the
  first mismatching prompt and position.

yggc-chain and yggc-tree-static run eagerly with the shape of lowest TPOT on the warm-up prompt
among a small grid. The compiled rows use --bundle, else a bundle cached under
~/.cache/yggc/bundles/<pair key>-dDwWvV for the tuned tree shape, compiled in a child process when
absent (--quick never compiles: it uses a cached one or skips those rows). Without transformers,
--quick skips the hf rows; otherwise asking for them is an error.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import torch

from . import __version__, models
from .autoregressive import AutoregressiveDecoder
from .errors import YggcError
from .graphs import check_pair
from .sampling import SamplingParams
from .speculative import SpeculativeDecoder, TreeShape
from .timing import median_ms

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


def shape_label(shape: TreeShape) -> str:
    return f"D{shape.depth} W{shape.width} V{shape.verify}"


def parse_shape(text: str) -> TreeShape:
    """'4x2x8' (DxWxV) -> TreeShape."""
    try:
        depth, width, verify = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise YggcError(f"tree shapes are written DxWxV like 4x2x8, got {text!r}") from None
    return TreeShape.from_args(depth, width, verify)


# ---- samples and rows ----------------------------------------------------------------------------

@dataclass
class Result:
    tokens: list[int]
    tpot_ms: float
    per_iter: list[int]  # tokens committed per decode iteration after the first token


Runner = Callable[[list[int], int, SamplingParams], Result]


@dataclass
class Sample:
    prompt: int
    repeat: int
    tokens: list[int]
    tpot_ms: float
    per_iter: list[int]


@dataclass
class Row:
    name: str
    run: Runner
    runs_as: str  # how the row runs: "eager", "compiled D4 W2 V8 (bundle plan)", ...
    decoder: object | None = None  # the yggc decoder behind `run` (None for transformers rows)
    samples: list[Sample] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)
    rss_mb: float = 0.0
    rss_delta_mb: float = 0.0
    verify_ms: float | None = None

    def tpots(self) -> list[float]:
        return [s.tpot_ms for s in self.samples]

    def per_iter(self) -> list[int]:
        return [k for s in self.samples for k in s.per_iter]


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def p90(xs: list[float]) -> float:
    """Nearest-rank 90th percentile."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[max(0, -(-9 * len(s) // 10) - 1)]


def mean_accepted(row: Row) -> float:
    k = row.per_iter()
    return sum(k) / len(k) if k else float("nan")


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

def sampling_params(temperature: float, seed: int) -> SamplingParams:
    return SamplingParams() if temperature == 0.0 else SamplingParams(temperature=temperature, seed=seed)


def measure(rows: list[Row], prompts: list[list[int]], n: int, repeats: int, temperature: float) -> None:
    """Every row on every prompt and repeat, interleaved; the same seed for all rows in one slot."""
    for p, prompt in enumerate(prompts):
        log(f"prompt {p + 1}/{len(prompts)} ({len(prompt)} tokens)")
        for r in range(repeats):
            params = sampling_params(temperature, 1000 * p + r)
            for row in rows:
                res = row.run(prompt, n, params)
                row.samples.append(Sample(p, r, res.tokens, res.tpot_ms, res.per_iter))


def reference_row(rows: list[Row]) -> Row | None:
    by_name = {r.name: r for r in rows}
    return by_name.get("hf-ar") or by_name.get("yggc-ar-eager")


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


# ---- physical floor ------------------------------------------------------------------------------

def read_gbs(n_bytes: int, repeats: int = 7) -> float:
    """GB/s of a full read (sum) of `n_bytes` of float32, median; repeated, so it stays in cache if it fits."""
    a = torch.ones(max(n_bytes // 4, 1))
    return 4 * a.numel() / median_ms(lambda: a.sum(), repeats, warmup=2) / 1e6


def copy_gbs(n_bytes: int, repeats: int = 7) -> float:
    """GB/s of a copy (bytes read + bytes written) of `n_bytes` of float32, median."""
    a = torch.ones(max(n_bytes // 4, 1))
    b = torch.empty_like(a)
    return 8 * a.numel() / median_ms(lambda: b.copy_(a), repeats, warmup=2) / 1e6


def weight_bytes(module: torch.nn.Module) -> int:
    """Parameter bytes (tied weights once); the KV cache buffers are not weights."""
    return sum(p.numel() * p.element_size() for p in module.parameters())


def verifier_weight_bytes(m: Models) -> int:
    """Of the verifier as the rows ran it (a yggc graph if one is loaded, else transformers' model)."""
    loaded = m.__dict__  # cached_property values; nothing new is loaded here unless nothing was
    if "verifier" in loaded:
        return weight_bytes(loaded["verifier"].graph)
    if "runtime" in loaded:
        return weight_bytes(loaded["runtime"].verifier.graph)
    if "hf_verifier" in loaded:
        return weight_bytes(loaded["hf_verifier"])
    return weight_bytes(m.verifier.graph)


class CallTimer:
    """Stands in for a decoder's model/phase attribute and times the calls whose input has `width` rows."""

    def __init__(self, fn: Callable, width: int | None):
        self.fn, self.width, self.ms = fn, width, []

    def __call__(self, *args, **kw):
        t0 = time.perf_counter()
        out = self.fn(*args, **kw)
        if self.width is None or args[0].shape[0] == self.width:
            self.ms.append(1000 * (time.perf_counter() - t0))
        return out

    def __getattr__(self, name: str):  # cfg, move_kv, ... of the wrapped model
        return getattr(self.fn, name)


def verify_hook(decoder, greedy: bool) -> tuple[str, int | None]:
    """(attribute, input width) of the call that verifies: the one-token step of an AR decoder, the
    fused prune+verify+accept phase of a greedy speculative decoder, else its verifier at V+1 rows."""
    if isinstance(decoder, AutoregressiveDecoder):
        return "model", 1
    if greedy and hasattr(decoder, "run_verify"):
        return "run_verify", None
    return "verifier", decoder.shape.verify + 1


def verify_step_ms(row: Row, prompt: list[int], n: int, params: SamplingParams) -> float | None:
    """Median verify-step time inside one extra (unsampled) decode of `prompt`."""
    attr, width = verify_hook(row.decoder, params.greedy)
    original = getattr(row.decoder, attr)
    timer = CallTimer(original, width)
    setattr(row.decoder, attr, timer)
    try:
        row.run(prompt, n, params)
    finally:
        setattr(row.decoder, attr, original)
    return median(timer.ms) if timer.ms else None


def physical_floor(cfg: BenchConfig, rows: list[Row], m: Models, prompt: list[int]) -> dict:
    params = sampling_params(cfg.temperature, 54321)
    for row in rows:
        if row.decoder is not None:
            row.verify_ms = verify_step_ms(row, prompt, cfg.n_new, params)
    wb = verifier_weight_bytes(m)
    big = cfg.bandwidth_mb * 2**20
    bw = {"read_gbs": read_gbs(big), "copy_gbs": copy_gbs(big), "weights_read_gbs": read_gbs(wb)}
    # the fastest of them: main memory, or the caches when the weights fit there
    return {**bw, "mb": cfg.bandwidth_mb, "weight_bytes": wb, "floor_ms": wb / max(bw.values()) / 1e6}


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


# ---- report --------------------------------------------------------------------------------------

def machine_line() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    load = f", load average {os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else ""
    return (f"{cpu}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads, torch {torch.__version__}, "
            f"yggc {__version__}{load}")


def speedup(base: Row | None, row: Row) -> str:
    if base is None:
        return "-"
    return f"{median(base.tpots()) / median(row.tpots()):.2f}x"


def equal_cell(row: Row, ref: Row | None) -> str:
    if ref is None:
        return "-"
    if row is ref:
        return "(reference)"
    return "yes" if not row.mismatches else "NO: " + "; ".join(row.mismatches)


def verify_cell(row: Row, floor_ms: float | None) -> str:
    if row.verify_ms is None:
        return "-"
    ratio = f" ({row.verify_ms / floor_ms:.1f}x)" if floor_ms else ""
    return f"{row.verify_ms:.3f}{ratio}"


def table(rows: list[Row], greedy: bool, floor: dict | None) -> str:
    by_name = {r.name: r for r in rows}
    hf_ar, hf_as, ref = by_name.get("hf-ar"), by_name.get("hf-assisted"), reference_row(rows)
    floor_ms = floor["floor_ms"] if floor else None
    head = ["row", "runs as", "TPOT median ms", "TPOT p90 ms", "tokens/s", "mean accepted", "vs hf-ar",
            "vs hf-assisted", "peak RSS MB (+added)", "verify ms (x floor)"]
    if greedy:
        head.append(f"equal to {ref.name if ref else 'hf-ar'}")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        med = median(row.tpots())
        cells = [row.name, row.runs_as, f"{med:.3f}", f"{p90(row.tpots()):.3f}", f"{1000 / med:.1f}",
                 f"{mean_accepted(row):.2f}", speedup(hf_ar, row), speedup(hf_as, row),
                 f"{row.rss_mb:.0f} (+{row.rss_delta_mb:.0f})", verify_cell(row, floor_ms)]
        if greedy:
            cells.append(equal_cell(row, ref))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary_lines(cfg: BenchConfig, prompts: list[list[int]], source: str, floor: dict | None,
                  tuning: dict) -> list[str]:
    mode = "greedy" if cfg.greedy else f"temperature {cfg.temperature:g} (sampling; no equality column)"
    lines = [f"machine: {machine_line()}",
             f"pair: verifier {cfg.verifier}, drafter {cfg.drafter}; dtype {cfg.dtype}, max_seq {cfg.max_seq}",
             f"workload: {cfg.n_prompts} prompt(s) ({source}; {statistics.mean(map(len, prompts)):.0f} tokens on "
             f"average) x {cfg.n_new} new tokens x {cfg.repeats} repeat(s), {mode}; rows interleaved, warm-up "
             "excluded"]
    for name, times in tuning.items():
        lines.append(f"{name} tuned on a held-out warm-up prompt, TPOT ms: "
                     + ", ".join(f"{k} {v:.2f}" for k, v in times.items()))
    if floor:
        lines.append(f"floor: memory bandwidth {floor['read_gbs']:.1f} GB/s read, {floor['copy_gbs']:.1f} GB/s copy "
                     f"over {floor['mb']} MB, {floor['weights_read_gbs']:.1f} GB/s reading a weights-sized buffer "
                     f"again and again (cache-resident if it fits); verifier weights {floor['weight_bytes'] / 1e6:.1f} "
                     f"MB / the fastest of these = {floor['floor_ms']:.3f} ms per verify step")
        lines.append("verify ms: median verify call inside one more decode of prompt 0 (AR: the 1-token step; "
                     "greedy trees/chains: the verify phase, pruning and acceptance included)")
    return lines


def to_json(cfg: BenchConfig, rows: list[Row], floor: dict | None, tuning: dict, source: str) -> dict:
    return {
        "machine": machine_line(), "argv": sys.argv, "prompt_source": source,
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(cfg).items()
                   if k not in ("tree_grid",)} | {"tree_grid": [shape_label(s) for s in cfg.tree_grid]},
        "floor": floor, "tuning": tuning,
        "rows": [{"name": r.name, "runs_as": r.runs_as, "rss_mb": r.rss_mb, "rss_delta_mb": r.rss_delta_mb,
                  "verify_ms": r.verify_ms, "mismatches": r.mismatches,
                  "samples": [vars(s) for s in r.samples]} for r in rows],
    }


def require_matplotlib():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise YggcError("--plot needs matplotlib: pip install matplotlib (or drop --plot)") from None
    return plt


def plot(rows: list[Row], path: Path) -> None:
    """TPOT bars (median, p90 whisker) and the accepted-length histogram of the speculative rows."""
    plt = require_matplotlib()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    meds = [median(r.tpots()) for r in rows]
    ax1.bar([r.name for r in rows], meds, yerr=[[0] * len(rows), [p90(r.tpots()) - m for r, m in zip(rows, meds)]])
    ax1.set_ylabel("TPOT ms (median, p90 whisker)")
    ax1.tick_params(axis="x", rotation=30)
    spec = [r for r in rows if any(k > 1 for k in r.per_iter())]
    top = max((max(r.per_iter()) for r in spec), default=1)
    for r in spec:
        ax2.hist(r.per_iter(), bins=range(1, top + 2), alpha=0.5, label=r.name, density=True, align="left")
    ax2.set_xlabel("tokens accepted per iteration (bonus included)")
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path)


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
