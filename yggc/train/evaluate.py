"""``yggc train evaluate``: held-out metrics of a verifier/drafter pair written by ``yggc train pair``.

Metrics
    * held-out perplexity of each model: non-overlapping ``--ctx``-token windows
      of the held-out stream ``[EOT] file0 [EOT] file1 ...`` (at most
      ``--max-eval-tokens`` tokens), mean next-token NLL over every position.
    * top-1 agreement: fraction of those positions where the drafter's argmax
      equals the verifier's argmax (teacher forcing on held-out text).
    * chain speculative decoding: for each of ``--prompts`` held-out prompts
      (``heldout_prompts()``) the verifier greedily generates ``--new-tokens``
      tokens; teacher-forced on prompt + continuation, ``match[i]`` says whether
      the drafter's argmax equals the verifier's token ``i``.  Greedy chain
      drafting of length k is then simulated exactly: from position ``pos`` the
      drafts ``pos .. pos+k-1`` are accepted up to the first mismatch, the
      verifier adds one bonus token, ``pos += accepted + 1``.  The mean accepted
      length counts the bonus token (vLLM convention: 1 <= length <= k + 1);
      a step is only simulated while all k drafts and the bonus token lie inside
      the continuation.

``heldout_prompts(n, n_chars)`` (corpus.py) is the stable prompt set, also the
demo pair's ``prompts.json``.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import YggcError
from .corpus import (
    encode_documents,
    eot_id,
    heldout_files,
    heldout_prompt_records,
    load_tokenizer,
    read_text,
    stdlib_root,
)
from .options import EvaluateOptions
from .presets import checkpoint_folder, load_hf_model, n_params, require_transformers

if TYPE_CHECKING:
    import torch
    from tokenizers import Tokenizer
    from transformers import LlamaForCausalLM

# --------------------------------------------------------------------------- metrics


def heldout_windows(tok: Tokenizer, ctx: int, max_tokens: int,
                    root: str | Path | None = None) -> tuple[torch.Tensor, int]:
    """Non-overlapping ``ctx + 1``-token windows (stride ctx) over the held-out stream."""
    import torch

    stream = encode_documents(tok, [read_text(p) for p in heldout_files(root)])
    n_win = min((len(stream) - 1) // ctx, max(1, max_tokens // ctx))
    wins = [stream[i * ctx : i * ctx + ctx + 1].astype(np.int64) for i in range(n_win)]
    return torch.from_numpy(np.stack(wins)), len(stream)


def text_metrics(verifier: LlamaForCausalLM, drafter: LlamaForCausalLM, windows: torch.Tensor, batch: int = 8) -> dict:
    """Held-out perplexities and teacher-forced top-1 agreement."""
    import torch
    import torch.nn.functional as F

    nll_v = nll_d = agree = count = 0.0
    with torch.inference_mode():
        for i in range(0, len(windows), batch):
            x = windows[i : i + batch]
            inp, tgt = x[:, :-1], x[:, 1:].reshape(-1)
            lv = verifier(input_ids=inp).logits.float().flatten(0, 1)
            ld = drafter(input_ids=inp).logits.float().flatten(0, 1)
            nll_v += F.cross_entropy(lv, tgt, reduction="sum").item()
            nll_d += F.cross_entropy(ld, tgt, reduction="sum").item()
            agree += (lv.argmax(-1) == ld.argmax(-1)).sum().item()
            count += tgt.numel()
    return {
        "tokens": int(count),
        "ppl_verifier": float(np.exp(nll_v / count)),
        "ppl_drafter": float(np.exp(nll_d / count)),
        "top1_agreement": agree / count,
    }


def greedy_continuation(model: LlamaForCausalLM, prompt_ids: list[int], n_new: int) -> list[int]:
    """``n_new`` greedy tokens (KV cache; EOT is not treated as a stop token)."""
    import torch

    out, past = [], None
    x = torch.tensor([prompt_ids])
    with torch.inference_mode(), warnings.catch_warnings():
        # transformers 5 renames past_key_values (a FutureWarning); the name still works, 4.x knows only it
        warnings.filterwarnings("ignore", message="`past_key_values` is deprecated", category=FutureWarning)
        for _ in range(n_new):
            res = model(input_ids=x, past_key_values=past, use_cache=True)
            past = res.past_key_values
            nxt = int(res.logits[0, -1].argmax())
            out.append(nxt)
            x = torch.tensor([[nxt]])
    return out


def match_flags(drafter: LlamaForCausalLM, prompt_ids: list[int], cont: list[int]) -> list[bool]:
    """``match[i]``: drafter argmax after ``prompt + cont[:i]`` equals ``cont[i]``."""
    import torch

    x = torch.tensor([prompt_ids + cont[:-1]])
    with torch.inference_mode():
        pred = drafter(input_ids=x).logits[0, len(prompt_ids) - 1 :].argmax(-1)
    return (pred == torch.tensor(cont)).tolist()


def chain_accept_lengths(matches: Sequence[bool], k: int) -> list[int]:
    """Tokens emitted per verification step (accepted drafts + bonus) of greedy chain drafts."""
    lengths, pos = [], 0
    while pos + k < len(matches):
        acc = 0
        while acc < k and matches[pos + acc]:
            acc += 1
        lengths.append(acc + 1)
        pos += acc + 1
    return lengths


def chain_metrics(verifier: LlamaForCausalLM, drafter: LlamaForCausalLM, tok: Tokenizer, prompts: list[str],
                  n_new: int, ks: Sequence[int] = (4, 8)) -> tuple[dict, list[str]]:
    """Chain agreement and mean accepted length per k over the prompts; the verifier's continuations."""
    bos = eot_id(tok)
    all_matches, samples = [], []
    for text in prompts:
        ids = [bos] + tok.encode(text, add_special_tokens=False).ids
        cont = greedy_continuation(verifier, ids, n_new)
        all_matches.append(match_flags(drafter, ids, cont))
        samples.append(tok.decode(cont, skip_special_tokens=False))
    res = {
        "prompts": len(prompts),
        "new_tokens": n_new,
        "chain_agreement": float(np.mean([m for ms in all_matches for m in ms])),
    }
    for k in ks:
        lengths = [n for ms in all_matches for n in chain_accept_lengths(ms, k)]
        res[f"mean_accept_k{k}"] = float(np.mean(lengths))
    return res, samples


def print_table(r: dict) -> None:
    """The metrics as a short table on stdout."""
    print(f"pair {r['pair']}  ({r['heldout_files']} held-out files, {r['tokens']} tokens scored, ctx {r['ctx']})")
    print(f"{'model':10}{'params':>10}{'held-out ppl':>14}")
    for role in ("verifier", "drafter"):
        print(f"{role:10}{r['params_' + role] / 1e6:>9.2f}M{r['ppl_' + role]:>14.3f}")
    print(f"top-1 agreement drafter vs verifier (held-out text): {100 * r['top1_agreement']:.1f}%")
    print(
        f"chain drafts, {r['prompts']} prompts x {r['new_tokens']} verifier-greedy tokens: "
        f"agreement {100 * r['chain_agreement']:.1f}%, mean accepted length (incl. bonus) "
        + ", ".join(f"k={k}: {r[f'mean_accept_k{k}']:.2f}" for k in (4, 8))
    )


def run(options: EvaluateOptions) -> dict:
    """Score the pair in --pair; prints the table (and --show-samples continuations) on stdout, returns the metrics."""
    require_transformers()
    verifier_dir, drafter_dir = (checkpoint_folder(options.pair / role, "--pair")
                                 for role in ("verifier", "drafter"))
    t0 = time.time()
    records = heldout_prompt_records(options.prompts, options.prompt_chars, options.corpus_dir)
    if not records:
        raise YggcError(f"no held-out function of {options.prompt_chars // 2}+ characters to prompt with under "
                        f"{options.corpus_dir or stdlib_root()}")
    import torch

    if options.threads:
        torch.set_num_threads(options.threads)
    tok = load_tokenizer(verifier_dir / "tokenizer.json")
    verifier, drafter = load_hf_model(verifier_dir), load_hf_model(drafter_dir)
    windows, _ = heldout_windows(tok, options.ctx, options.max_eval_tokens, options.corpus_dir)
    res = {
        "pair": str(options.pair),
        "heldout_files": len(heldout_files(options.corpus_dir)),
        "ctx": options.ctx,
        "params_verifier": n_params(verifier),
        "params_drafter": n_params(drafter),
    }
    res.update(text_metrics(verifier, drafter, windows))
    chain, samples = chain_metrics(verifier, drafter, tok, [p.text for p in records], options.new_tokens)
    res.update(chain, seconds=time.time() - t0)
    print_table(res)
    for rec, sample in list(zip(records, samples))[: options.show_samples]:
        print(f"\n--- prompt ({rec.path}:{rec.line}) ---\n{rec.text}\n--- verifier greedy continuation ---\n{sample}")
    return res
