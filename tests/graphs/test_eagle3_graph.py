"""EAGLE-3 heads: the verifier's features, the public checkpoint layout, and the check against the verifier."""
import json

import pytest
import torch
from checkpoints import write_checkpoint
from safetensors import safe_open
from yggc.graphs import CheckpointError, load_model
from yggc.graphs.eagle3_checkpoint import (
    FUSION_ONLY,
    head_base_config,
    is_eagle3,
    load_eagle3,
    new_eagle3,
    save_eagle3,
    save_fusion,
)

from yggc.artifacts.cache_layout import causal_rows

PUBLIC = {"fc.weight", "norm.weight", "lm_head.weight", "d2t", "t2d", "midlayer.input_layernorm.weight",
          "midlayer.hidden_norm.weight", "midlayer.post_attention_layernorm.weight",
          *(f"midlayer.self_attn.{n}_proj.weight" for n in "qkvo"),
          *(f"midlayer.mlp.{n}_proj.weight" for n in ("gate", "up", "down"))}


@pytest.fixture(scope="module")
def verifier_dir(ckpt_root):
    return write_checkpoint(ckpt_root / "e3g_v", "qwen2_bias", seed=2)


@pytest.fixture(scope="module")
def head_dir(ckpt_root, verifier_dir):
    ids = torch.randperm(307, generator=torch.Generator().manual_seed(0))[:100]
    head = new_eagle3(verifier_dir, ids, 8, seed=0)
    return save_eagle3(head, head_base_config(verifier_dir), ckpt_root / "e3g_head")


def test_features_are_the_inputs_of_the_feature_layers(verifier_dir):
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(verifier_dir, dtype=torch.float32)
    ids = torch.tensor([5, 9, 2, 44, 7, 1])
    pos = torch.arange(6)
    ours = load_model(verifier_dir, 16)
    ours.feature_layers = (0, 1, 2)
    with torch.inference_mode():
        ref = hf(ids[None], output_hidden_states=True).hidden_states  # [embeddings, after layer 0, ...]
        _, feats = ours.forward_features(ids, pos, pos, causal_rows(pos, 16))
    torch.testing.assert_close(feats, torch.cat([ref[i][0] for i in (0, 1, 2)], -1), atol=1e-5, rtol=1e-5)


def test_public_layout_round_trips(verifier_dir, head_dir):
    assert is_eagle3(head_dir) and not is_eagle3(verifier_dir)
    cfg = json.loads((head_dir / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["draft_vocab_size"] == 100
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == cfg["yggc"]["feature_layers"] == [0, 1, 2]
    with safe_open(str(head_dir / "model.safetensors"), framework="pt") as st:
        assert set(st.keys()) == PUBLIC
        d2t, t2d = st.get_tensor("d2t"), st.get_tensor("t2d")
    target = d2t + torch.arange(100)  # the draft -> target map, as SGLang reads it
    assert t2d.dtype == torch.bool and int(t2d.sum()) == 100 and bool(t2d[target].all())
    head = load_eagle3(head_dir, verifier_dir, 8)
    assert torch.equal(head.draft_ids, target)
    again = save_eagle3(head, head_base_config(verifier_dir), head_dir.parent / "e3g_again")
    reloaded = load_eagle3(again, verifier_dir, 8)
    for (name, a), b in zip(head.state_dict().items(), reloaded.state_dict().values()):
        assert torch.equal(a, b), name


def test_logits_cover_the_draft_vocabulary_only(verifier_dir, head_dir):
    head = load_eagle3(head_dir, verifier_dir, 8)
    slots = torch.arange(3)
    with torch.inference_mode():
        logits, out = head(torch.tensor([1, 2, 3]), torch.randn(3, 64), slots, slots, causal_rows(slots, 8))
        draft = head.lm_head(head.norm(out)).float()
    outside = torch.ones(307, dtype=torch.bool)
    outside[head.draft_ids] = False
    assert torch.isinf(logits[:, outside]).all() and torch.equal(logits[:, head.draft_ids], draft)


def test_head_for_another_verifier_fails_with_one_line(ckpt_root, head_dir):
    other_size = write_checkpoint(ckpt_root / "e3g_other", "mistral_headdim", seed=0)
    with pytest.raises(CheckpointError, match="was made for a verifier with hidden_size 64, this one has 48"):
        load_eagle3(head_dir, other_size, 8)
    same_shape = write_checkpoint(ckpt_root / "e3g_same_shape", "qwen2_bias", seed=9)  # other weights
    with pytest.raises(CheckpointError, match="trained for another verifier") as e:
        load_eagle3(head_dir, same_shape, 8)
    assert "\n" not in str(e.value)


def test_a_fusion_only_folder_loads_fc_and_the_draft_map_and_nothing_else(ckpt_root, verifier_dir, head_dir):
    """What an O2 bundle keeps of a head whose package holds the rest; weights=True still wants the checkpoint."""
    head = load_eagle3(head_dir, verifier_dir, 8)
    kept = ckpt_root / "e3g_fusion"
    kept.mkdir(exist_ok=True)
    (kept / "config.json").write_text((head_dir / "config.json").read_text())
    save_fusion(head, kept)
    light = load_eagle3(kept, verifier_dir, 8, weights=False)
    assert torch.equal(light.fc.weight, head.fc.weight) and torch.equal(light.draft_ids, head.draft_ids)
    assert torch.equal(light.embed.weight, head.embed.weight)  # the verifier's, gathered eagerly
    assert not light.has_weights and light.lm_head.weight.is_meta and light.attn.wqkv.weight.is_meta
    with pytest.raises(CheckpointError, match="has no complete safetensors weights"):
        load_eagle3(kept, verifier_dir, 8)
    (kept / FUSION_ONLY).write_bytes(b"cut short")
    with pytest.raises(CheckpointError, match="cannot be read as the head's feature fusion"):
        load_eagle3(kept, verifier_dir, 8, weights=False)


def test_corrupt_draft_map_is_refused(ckpt_root, verifier_dir, head_dir):
    from safetensors.torch import load_file, save_file

    bad = ckpt_root / "e3g_bad"
    bad.mkdir(exist_ok=True)
    (bad / "config.json").write_text((head_dir / "config.json").read_text())
    tensors = load_file(str(head_dir / "model.safetensors"))
    tensors["d2t"] = torch.zeros(100, dtype=torch.long) - torch.arange(100)  # every draft id -> token 0
    save_file(tensors, str(bad / "model.safetensors"))
    with pytest.raises(CheckpointError, match="d2t does not map the draft vocabulary onto distinct verifier tokens"):
        load_eagle3(bad, verifier_dir, 8)


def test_loading_a_head_imports_no_sympy(verifier_dir, head_dir):
    """Building the head on the meta device stays off torch's Python refs, whose import of sympy (via
    symbolic_shapes) cost `Runtime.load` of the SmolLM2 head bundle about 0.5 s."""
    import subprocess
    import sys

    code = ("import sys\nfrom yggc.graphs.eagle3_checkpoint import load_eagle3\n"
            f"head = load_eagle3({str(head_dir)!r}, {str(verifier_dir)!r}, 8)\n"
            "assert head.draft_ids.numel() == 100\nprint('sympy' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
