"""The real target, SmolLM2-135M-Instruct from its GGUF: yggc's logits against transformers' own GGUF
conversion, and greedy tree decoding against autoregressive decoding.

CI does not download the 98 MB file on every run: these tests run where `yggc pull smollm2`
has cached it (or YGGC_SMOLLM2_GGUF names it) and are skipped elsewhere.
"""
import json
import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from yggc.graphs import load_model
from yggc.graphs.gguf_import import cached_import

from yggc.artifacts.cache_layout import causal_rows
from yggc.pinned_models import CACHE, MODELS
from yggc.plan.shape import TreeShape
from yggc.runtime import drafters, loading
from yggc.runtime.autoregressive import AutoregressiveDecoder
from yggc.runtime.drafters import speculative_decoder
from yggc.tree.sampling import SamplingParams

GGUF = Path(os.environ.get("YGGC_SMOLLM2_GGUF", CACHE / MODELS["smollm2"].gguf_name)).expanduser()
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not GGUF.is_file(), reason=f"{GGUF} absent (yggc pull smollm2)")]
PROMPTS = ["def fibonacci(n):", "The three primary colors are"]
N_NEW = 48  # enough for trees and chains to be accepted many times; eager fp32 steps are slow on 2 cores


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    return cached_import(GGUF, tmp_path_factory.mktemp("smollm2"))


def transformers_reference(gguf_path: Path):
    """LlamaForCausalLM with the weights transformers' own GGUF loader dequantizes and renames."""
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    cfg = load_gguf_checkpoint(str(gguf_path))["config"]
    config = transformers.LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("model_type", "_model_name_or_path")})
    model = transformers.LlamaForCausalLM(config)  # on CPU: its RoPE buffers are computed, not loaded
    tensors = load_gguf_checkpoint(str(gguf_path), return_tensors=True, model_to_load=model)["tensors"]
    state = {k: torch.as_tensor(v).float() for k, v in tensors.items()}
    if "lm_head.weight" not in state:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    model.load_state_dict(state)
    return model.eval()


def test_logits_equal_transformers_gguf_loading(smollm2):
    ref = transformers_reference(GGUF)
    tok = loading.load(smollm2, torch.float32, 64).tokenizer
    graph = load_model(smollm2, 64, torch.float32)
    for text in PROMPTS + ["<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n"]:
        ids = tok.encode(text).ids
        pos = torch.arange(len(ids))
        with torch.no_grad():
            want = ref(torch.tensor([ids])).logits[0]
        got = graph(torch.tensor(ids), pos, pos, causal_rows(pos, 64))
        assert (got - want).abs().max() < 1e-4


def truncated_copy(src: Path, dst: Path, layers: int) -> Path:
    """The first `layers` blocks of a checkpoint (same tokenizer): a drafter made from the target itself."""
    dst.mkdir()
    cfg = json.loads((src / "config.json").read_text()) | {"num_hidden_layers": layers}
    (dst / "config.json").write_text(json.dumps(cfg))
    keep = {k: v for k, v in load_file(str(src / "model.safetensors")).items()
            if not k.startswith("model.layers.") or int(k.split(".")[2]) < layers}
    save_file(keep, str(dst / "model.safetensors"))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (dst / name).write_bytes((src / name).read_bytes())
    return dst


@pytest.fixture(scope="module")
def pair_and_reference(smollm2, tmp_path_factory):
    """(verifier, drafter made of its first 4 layers, {prompt ids: greedy AR continuation})."""
    drafter_dir = truncated_copy(smollm2, tmp_path_factory.mktemp("drafter") / "d", layers=4)
    verifier, drafter = drafters.load_pair(smollm2, drafter_dir, torch.float32, 512)
    ar = AutoregressiveDecoder(verifier.graph, verifier.layout)
    reference = {}
    for text in PROMPTS:
        ids = verifier.tokenizer.encode(text).ids
        reference[tuple(ids)] = [t for chunk in ar.stream(ids, N_NEW, SamplingParams()) for t in chunk]
    return verifier, drafter, reference


@pytest.mark.parametrize("prompt, shape", [(0, TreeShape(3, 2, 6)), (1, TreeShape(4, 1, 4))])
def test_greedy_tree_decoding_equals_autoregressive(pair_and_reference, prompt, shape):
    """A tree and a chain, one prompt each (eager decoding of the full model is slow on 2 cores)."""
    verifier, drafter, reference = pair_and_reference
    for ids, want in list(reference.items())[prompt:prompt + 1]:
        spec = speculative_decoder(verifier.graph, drafter.graph, verifier.layout, shape)
        got = [t for chunk in spec.stream(list(ids), N_NEW, SamplingParams()) for t in chunk]
        assert got == want and len(want) == N_NEW
        assert spec.stats.n_iterations < N_NEW  # drafts were accepted, so this was real speculation


SHIPPED_DRAFTER = Path(loading.__file__).parents[1] / "smollm2_drafter"


@pytest.mark.skipif(not (SHIPPED_DRAFTER / "model.safetensors").is_file(), reason="no shipped SmolLM2 drafter")
@pytest.mark.xfail(strict=True, reason="bf16 is not batch-invariant on CPU: the 9-row verify rounds differently "
                   "from the 1-row step and a near-tie flips at token 21 (issue #20: batch-invariant bf16 verify)")
def test_shipped_drafter_is_lossless_in_bfloat16(smollm2):
    """The distilled drafter in the package, bf16 end to end: tree decoding of a held-out chat prompt should
    equal yggc's own bf16 autoregressive decoding. It does not yet (a known failure, kept strict so that
    the fix shows): in float32 the same pair is lossless (test above and the benchmark)."""
    verifier, drafter = drafters.load_pair(smollm2, SHIPPED_DRAFTER, torch.bfloat16, 512)
    text = json.loads((SHIPPED_DRAFTER / "prompts.json").read_text())["prompts"][0]["text"]
    ids = verifier.tokenizer.encode(text).ids
    ar = AutoregressiveDecoder(verifier.graph, verifier.layout)
    n = 32  # the first flip is at token 21
    want = [t for chunk in ar.stream(ids, n, SamplingParams()) for t in chunk]
    spec = speculative_decoder(verifier.graph, drafter.graph, verifier.layout, TreeShape(4, 2, 8))
    assert [t for chunk in spec.stream(ids, n, SamplingParams()) for t in chunk] == want
    assert spec.stats.n_iterations < n * 2 // 3  # more than 1.5 tokens per iteration


SHIPPED_EAGLE3 = Path(loading.__file__).parents[1] / "smollm2_eagle3"


def test_shipped_eagle3_files_stay_under_16_mib():
    """The head ships inside the package: its weights are shards (graphs.eagle3_checkpoint.MAX_FILE_BYTES)."""
    from yggc.graphs.checkpoint import weight_files

    assert len(weight_files(SHIPPED_EAGLE3)) == 2
    assert all(p.stat().st_size < 16 * 2**20 for p in SHIPPED_EAGLE3.iterdir())


@pytest.mark.skipif(not (SHIPPED_EAGLE3 / "config.json").is_file(), reason="no shipped SmolLM2 EAGLE-3 head")
def test_shipped_eagle3_head_is_lossless(smollm2):
    """The trained EAGLE-3 head in the package (float32 verifier, eager): tree decoding of a held-out chat prompt
    equals autoregressive decoding, with drafts accepted."""
    verifier = loading.load(smollm2, torch.float32, 512)
    head = drafters.load_drafter(SHIPPED_EAGLE3, verifier, torch.float32)
    text = json.loads((SHIPPED_DRAFTER / "prompts.json").read_text())["prompts"][1]["text"]
    ids = verifier.tokenizer.encode(text).ids
    want = [t for chunk in AutoregressiveDecoder(verifier.graph, verifier.layout).stream(ids, 48, SamplingParams())
            for t in chunk]
    spec = drafters.speculative_decoder(verifier.graph, head.graph, verifier.layout, TreeShape(4, 2, 8))
    assert [t for chunk in spec.stream(ids, 48, SamplingParams()) for t in chunk] == want
    assert spec.stats.n_iterations < 40  # drafts were accepted (32 iterations when written)
