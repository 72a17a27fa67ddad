"""A bundle without compiled packages, written in seconds: a tiny random pair (the verifier with a chat template),
its plan and a profile; `Runtime.load` runs both models eagerly. For the bundle-level measurements (`yggc bench
--shapes/--ablation/--sampling-rules`, `yggc inspect --load-time`), whose logic does not depend on compiled code."""
from __future__ import annotations

import json
from pathlib import Path

from checkpoints import write_checkpoint

CHAT = ("{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}[assistant] {% endif %}")
PLAN = {"depth": 2, "width": 2, "verify": 3, "source": "calibration",
        "best_unpruned": {"depth": 2, "width": 2, "verify": 4, "tokens_per_iter": 1.8, "iteration_ms": 1.6,
                          "ms_per_token": 0.9, "speedup": 1.1}}
PROFILE = {"models": {name: {"cost_curve": {"t0_ms": t0, "slope_ms": 0.05, "knee": 8.0}, "bucket_ms": {"1": t0}}
                      for name, t0 in (("verifier", 1.0), ("drafter", 0.2))}}


def write_eager_bundle(root: Path, plan: dict | None = None, template_file: bool = False) -> Path:
    """template_file: the verifier keeps its chat template in chat_template.jinja (as transformers 5 saves it)."""
    from yggc.passes.write_bundle import BundleWriter

    from yggc.plan.bundle_profile import Profile

    v = write_checkpoint(root / "v", "llama_gqa", seed=21)
    config = {"eos_token": "<|endoftext|>"} if template_file else {"eos_token": "<|endoftext|>", "chat_template": CHAT}
    (v / "tokenizer_config.json").write_text(json.dumps(config))
    if template_file:
        (v / "chat_template.jinja").write_text(CHAT)
    d = write_checkpoint(root / "d", "llama_gqa", seed=22, base=v, noise=0.03)
    out = root / "bundle"
    with BundleWriter(out) as w:
        w.copy_model_dir(v, "verifier")
        w.copy_model_dir(d, "drafter")
        w.write_json("plan.json", plan or PLAN)
        Profile(PROFILE).save(w)
        w.finish({"device": "cpu", "dtype": "float32", "max_seq": 256, "buckets": []})
    return out
