"""Runners: one decode of a prompt by yggc or by transformers, returning tokens, TPOT and tokens per step."""
from __future__ import annotations

import importlib.util
import time

import torch

from ..errors import YggcError
from ..tree.sampling import SamplingParams
from .rows import Result, Runner


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


def have_transformers() -> bool:
    return importlib.util.find_spec("transformers") is not None


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
