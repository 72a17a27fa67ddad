"""The decode check, for pipeline.py's decode-check pass: the chosen tree against the compiled verifier alone,
decoding real text end to end.

The phase profile prices one draft and one verify call at a fixed context; a decode loop also pays the
host's work between calls (acceptance, KV compaction, Python) and sees the contexts a request has. On a
CPU where the tree's margin is a few percent that difference decides (SmolLM2 bf16 on an AMD EPYC: the
phases said 1.02x, `yggc bench` measured 0.76x). So before a bundle keeps speculation on, both decoders
continue a few calibration windows greedily, interleaved, and the verdict is the ratio of their median
TPOTs. The tree's acceptance on those windows is the calibration text's, so that text must not be what the
drafter was trained on: on its training conversations the SmolLM2 drafter accepted ~1.8 tokens per D2 W2 V3
iteration against ~1.5 on held-out chat, and the check said 1.06x (tools/heldout_calib.py writes held-out text).
"""
from __future__ import annotations

import statistics

from ..plan.bundle_plan import DecodeCheck
from ..runtime.autoregressive import AutoregressiveDecoder
from ..tree.sampling import SamplingParams
from .calibrate import CalibrationSpec, calibration_prompts, read_calibration_text

CHECK_PROMPTS = 6     # calibration windows continued by each decoder, spread over the text
CHECK_TOKENS = 48     # greedy tokens per window
CHECK_ROUNDS = 2      # interleaved rounds over the windows, after one short warm-up decode each
# Speculation stays on only above this measured TPOT ratio. Not 1.0: the check's two medians move by a few
# percent between runs on a shared CPU, and held-out prompts accept fewer tokens than the calibration text.
# A SmolLM2 bundle kept at a check just above 1.0 decoded held-out chat slower than the verifier alone.
MIN_SPEEDUP = 1.05


def check_prompts(tokenizer, spec: CalibrationSpec) -> list[list[int]]:
    """CHECK_PROMPTS of the calibration windows, evenly spaced: acceptance differs along a text (on SmolLM2's
    calibration text, 1.1 to 3.0 tokens per iteration from one window to the next)."""
    texts = [text for _, text in read_calibration_text(spec.files)]
    windows = calibration_prompts(texts, tokenizer, spec.n_prompts, spec.prompt_tokens)
    return windows[::max(1, len(windows) // CHECK_PROMPTS)][:CHECK_PROMPTS]


def tpot_ms(decoder, prompt: list[int], n_new: int, params: SamplingParams) -> float:
    for _ in decoder.stream(prompt, n_new, params):
        pass
    return decoder.stats.tpot_ms


def decode_check(tree_decoder, ar_decoder: AutoregressiveDecoder, prompts: list[list[int]],
                 n_new: int = CHECK_TOKENS, rounds: int = CHECK_ROUNDS, temperature: float = 0.0) -> DecodeCheck:
    """Median TPOT of each decoder over `rounds` x prompts (interleaved, after one warm-up decode each)
    and their ratio, with the tokens each generated. temperature > 0 checks a sampling
    plan: both decoders sample (seeded per window, so a rebuild measures the same draws)."""
    params = [SamplingParams(temperature, seed=i if temperature > 0 else None) for i in range(len(prompts))]
    tpot_ms(tree_decoder, prompts[0], 8, params[0]), tpot_ms(ar_decoder, prompts[0], 8, params[0])
    tree, ar = [], []
    for _ in range(rounds):
        for prompt, param in zip(prompts, params, strict=True):
            tree.append(tpot_ms(tree_decoder, prompt, n_new, param))
            ar.append(tpot_ms(ar_decoder, prompt, n_new, param))
    tree_ms, ar_ms = statistics.median(tree), statistics.median(ar)
    return DecodeCheck(round(tree_ms, 4), round(ar_ms, 4), round(ar_ms / tree_ms, 4), len(prompts) * n_new * rounds)
