"""The openvino rows of `yggc bench` (the optional extra yggc[openvino]): OpenVINO GenAI's LLMPipeline on the CPU.

* openvino: LLMPipeline(IR, "CPU") decoding the prompt's token ids, greedy or sampled (do_sample, temperature,
  top_k 0 = off, top_p 1, rng_seed), max_new_tokens = n with ignore_eos, so like every other row it decodes
  through EOS (min_new_tokens would instead mask EOS out and change the tokens).
* openvino-spec: the same with draft_model(drafter IR) and num_assistant_tokens = --openvino-assistant-tokens
  (default 5, a fixed-length draft like a yggc-chain of depth 5). It runs on OpenVINO's continuous-batching
  (paged-attention) pipeline, here with prefix caching off: with it on, openvino-genai 2026.4.1 sometimes failed
  sampled decodes whose prompt shared a prefix with an earlier one, repeated prompts included
  (`content_length <= prompt_ids.size() + m_generated_ids.size()`), and a cached prefix would let repeats skip
  their prefill (TPOT measured the same). Sampled, it is not lossless in 2026.4.1: on a tiny random pair (vocabulary
  8, T = 1, 2000 seeds) its second token followed the drafter's likeliest token 78% of the time where the
  verifier gives it 11% (the openvino row: within sampling noise), so the bench warns at --temp > 0.

Device properties: INFERENCE_NUM_THREADS = torch's thread count (--threads), INFERENCE_PRECISION_HINT and
KV_CACHE_PRECISION of the bench dtype (f32 / bf16, see device_config; the CPU plugin's default KV cache is
u8-compressed, lossy). The CPU plugin runs a bf16 hint in f32 where the CPU has no BF16 capability (no
AVX512-BF16/AMX); `runs as` says which. TPOT is OpenVINO's perf_metrics.get_tpot().mean: time after the first
new token / the tokens after it, the definition of the other rows. Tokens per step come from its raw metrics'
m_batch_sizes (tokens each pipeline step emitted; the first step is the prompt's): 1 for openvino, accepted + 1
for openvino-spec.

openvino_genai is imported only when one of these rows is built: the other rows never load it.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from ..errors import YggcError
from ..tree.sampling import SamplingParams
from .openvino_ir import cached_ir, is_ir, weight_format
from .rows import Result, Row, Runner
from .suite import BenchConfig, log


def require_openvino_genai():
    try:
        import openvino_genai
    except ImportError:
        raise YggcError("the openvino rows need openvino-genai: pip install 'yggc[openvino]', "
                        "or leave openvino,openvino-spec out of --rows") from None
    return openvino_genai


def have_openvino_genai() -> bool:
    return importlib.util.find_spec("openvino_genai") is not None


def inference_precision(dtype: str, capabilities: list[str]) -> str:
    """The precision the CPU plugin computes in for the bench dtype, given its OPTIMIZATION_CAPABILITIES."""
    return "bf16" if dtype == "bfloat16" and "BF16" in capabilities else "f32"


def device_config(dtype: str, threads: int, capabilities: list[str]) -> dict[str, object]:
    """LLMPipeline/draft_model properties. The KV cache keeps the bench dtype; on a CPU without BF16 it is f16 for
    bfloat16: the paged-attention kernels openvino-spec runs on take no bf16 cache there ("expect kvcache type
    f32"), and both rows keep the same 16-bit cache."""
    if dtype == "float32":
        hint = kv = "f32"
    else:
        hint, kv = "bf16", "bf16" if "BF16" in capabilities else "f16"
    return {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": hint, "KV_CACHE_PRECISION": kv}


def generation_kwargs(n: int, params: SamplingParams, assistant_tokens: int | None = None) -> dict[str, object]:
    """GenerationConfig fields of one decode of n tokens (EOS ignored, like the other rows)."""
    kw: dict[str, object] = {"max_new_tokens": n, "ignore_eos": True}
    if params.greedy:
        kw["do_sample"] = False
    else:
        kw.update(do_sample=True, temperature=params.temperature, top_k=0, top_p=1.0,
                  rng_seed=params.seed if params.seed is not None else 0)
    if assistant_tokens is not None:
        kw["num_assistant_tokens"] = assistant_tokens
    return kw


def encoded_result(res) -> Result:
    """An EncodedResults of one prompt as a bench Result."""
    metrics = res.perf_metrics
    per_step = [int(k) for k in metrics.raw_metrics.m_batch_sizes]
    return Result([int(t) for t in res.tokens[0]], float(metrics.get_tpot().mean), per_step[1:])


def tokenized(prompt: list[int]):
    import numpy as np
    import openvino as ov

    ids = np.array([prompt], dtype=np.int64)
    return require_openvino_genai().TokenizedInputs(ov.Tensor(ids), ov.Tensor(np.ones_like(ids)))


def openvino_runner(pipe, assistant_tokens: int | None = None) -> Runner:
    def run(prompt: list[int], n: int, params: SamplingParams) -> Result:
        return encoded_result(pipe.generate(tokenized(prompt), **generation_kwargs(n, params, assistant_tokens)))

    return run


def given_ir(path: Path, flag: str) -> Path:
    if not is_ir(path):
        raise YggcError(f"{flag} {path} holds no openvino_model.xml/.bin; export one with tools/export_openvino.py")
    return path


def resolve_irs(cfg: BenchConfig, spec: bool) -> tuple[Path, Path | None]:
    """(verifier IR, drafter IR or None): the flags', else exported into the cache (once)."""
    fmt = weight_format(cfg.dtype)
    verifier = (given_ir(cfg.openvino_ir, "--openvino-ir") if cfg.openvino_ir
                else cached_ir(cfg.verifier, cfg.openvino_cache, fmt, cfg.optimum_cli))
    if not spec:
        return verifier, None
    drafter = (given_ir(cfg.openvino_draft_ir, "--openvino-draft-ir") if cfg.openvino_draft_ir
               else cached_ir(cfg.drafter, cfg.openvino_cache, fmt, cfg.optimum_cli))
    return verifier, drafter


def openvino_row(name: str, cfg: BenchConfig) -> Row:
    """The openvino or openvino-spec row: its IRs resolved (or exported) and the pipeline loaded."""
    ov_genai = require_openvino_genai()
    import openvino as ov

    spec = name == "openvino-spec"
    verifier, drafter = resolve_irs(cfg, spec)
    capabilities = list(ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
    config = device_config(cfg.dtype, torch.get_num_threads(), capabilities)
    extra = {}
    if spec:
        scheduler = ov_genai.SchedulerConfig()
        scheduler.enable_prefix_caching = False  # each decode prefills anew, like every row's (see the docstring)
        extra = {"draft_model": ov_genai.draft_model(str(drafter), "CPU", **config), "scheduler_config": scheduler}
    pipe = ov_genai.LLMPipeline(str(verifier), "CPU", **config, **extra)
    weights = "" if cfg.openvino_ir else f", {weight_format(cfg.dtype)} weights"
    version = ov_genai.__version__.split("-")[0]
    runs_as = (f"OpenVINO GenAI {version}{weights}, "
               f"{inference_precision(cfg.dtype, capabilities)} compute, {config['KV_CACHE_PRECISION']} KV cache")
    if spec:
        runs_as += f", draft {cfg.assistant_tokens} tokens"
        if not cfg.greedy:
            log(f"warning: openvino-spec samples off the verifier's distribution in openvino-genai {version} "
                "(measured on a tiny pair: it over-accepts the drafter's likeliest tokens), so its accepted lengths "
                "at --temp > 0 are not comparable with the other rows'")
    return Row(name, openvino_runner(pipe, cfg.assistant_tokens if spec else None), runs_as)
