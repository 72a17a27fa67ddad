"""The static graph against transformers on the same files: logits, greedy tokens, cache semantics."""
import pytest
import torch
from checkpoints import CONFIGS
from yggc.graphs import CheckpointError, load_config, load_model

from yggc.artifacts.cache_layout import CacheLayout, causal_rows
from yggc.runtime.autoregressive import AutoregressiveDecoder
from yggc.tree.sampling import SamplingParams

transformers = pytest.importorskip("transformers")


def hf_model(path):
    return transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def prompt(vocab: int, n: int = 12, seed: int = 0) -> list[int]:
    return torch.randint(1, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_logits_match_transformers(checkpoint, name):
    path = checkpoint(name)
    cfg = load_config(path)
    ids = prompt(cfg.vocab_size, 40)
    layout = CacheLayout(64)
    ours = load_model(path, layout.n_slots)
    slots = torch.arange(len(ids))
    with torch.no_grad():
        got = ours(torch.tensor(ids), slots, slots, causal_rows(slots, layout.n_slots))
        want = hf_model(path)(torch.tensor([ids])).logits[0]
    assert got.shape == (len(ids), cfg.vocab_size)
    assert (got - want).abs().max().item() <= 1e-4


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_greedy_tokens_match_generate(checkpoint, name):
    path = checkpoint(name)
    cfg = load_config(path)
    ids = prompt(cfg.vocab_size, 10, seed=1)
    layout = CacheLayout(128)
    dec = AutoregressiveDecoder(load_model(path, layout.n_slots), layout)
    ours = [t for chunk in dec.stream(ids, 64, SamplingParams()) for t in chunk]
    with torch.no_grad():
        out = hf_model(path).generate(torch.tensor([ids]), max_new_tokens=64, do_sample=False,
                                      eos_token_id=None, pad_token_id=0)
    assert ours == out[0, len(ids):].tolist()
    assert dec.stats.n_generated == 64 and dec.stats.stop_reason == "max tokens"


def test_rope_table_rows_equal_the_angles_computed_per_position(checkpoint):
    from yggc.graphs.config import rope_inv_freq
    from yggc.graphs.llama import rope_cos_sin

    model = load_model(checkpoint("llama_gqa"), 65, torch.bfloat16)  # built on the meta device, then filled
    cfg, pos = model.cfg, torch.tensor([0, 1, 7, 64])
    cos, sin = rope_cos_sin(pos, rope_inv_freq(cfg.rope, cfg.head_dim), torch.bfloat16)
    got_cos, got_sin = model.rope(pos)
    assert model.rope.cos.shape == (65, cfg.head_dim) and got_cos.dtype == torch.bfloat16
    assert torch.equal(got_cos, cos) and torch.equal(got_sin, sin)


def test_cache_slot_is_independent_of_position(checkpoint):
    """Tokens written at scattered slots with the right positions and masks give the same logits."""
    path = checkpoint("llama_gqa")
    ids = torch.tensor(prompt(301, 9, seed=3))
    layout = CacheLayout(64)
    model = load_model(path, layout.n_slots)
    pos = torch.arange(9)
    with torch.no_grad():
        ref = model(ids, pos, pos, causal_rows(pos, layout.n_slots)).clone()
        slots = torch.tensor([40, 3, 17, 25, 8, 60, 33, 12, 50])
        mask = torch.zeros(9, layout.n_slots, dtype=torch.bool)
        for i in range(9):
            mask[i, slots[: i + 1]] = True
        model.caches()[0].k.normal_()  # stale garbage elsewhere must stay invisible
        got = model(ids, pos, slots, mask)
    assert torch.allclose(got, ref, atol=1e-5)


def test_tree_rows_see_only_their_ancestors(checkpoint):
    """Two sibling branches verified in one call equal each branch decoded on its own."""
    path = checkpoint("qwen2_bias")
    layout = CacheLayout(64)
    model = load_model(path, layout.n_slots)
    prefix, left, right = [5, 9, 11, 40], [70, 71], [80, 81]
    with torch.no_grad():
        def linear(seq):
            p = torch.arange(len(seq))
            return model(torch.tensor(seq), p, p, causal_rows(p, layout.n_slots))[-2:]

        want_left, want_right = linear(prefix + left), linear(prefix + right)
        p = torch.arange(4)
        model(torch.tensor(prefix), p, p, causal_rows(p, layout.n_slots))
        slots = torch.tensor([4, 5, 6, 7])  # left at 4,5; right at 6,7
        pos = torch.tensor([4, 5, 4, 5])
        mask = torch.zeros(4, layout.n_slots, dtype=torch.bool)
        mask[:, :4] = True
        for row, seen in enumerate([[4], [4, 5], [6], [6, 7]]):
            mask[row, seen] = True
        got = model(torch.tensor(left + right), pos, slots, mask)
    assert torch.allclose(got[:2], want_left, atol=1e-5)
    assert torch.allclose(got[2:], want_right, atol=1e-5)


def test_sharded_checkpoint_loads(tmp_path, checkpoint):
    src = checkpoint("llama_gqa")
    hf = hf_model(src)
    hf.save_pretrained(tmp_path, safe_serialization=True, max_shard_size="50KB")
    assert (tmp_path / "model.safetensors.index.json").exists()
    a, b = load_model(src, 16), load_model(tmp_path, 16)
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        if "cache" not in name:
            assert torch.equal(x, y), name


def test_bfloat16_close_to_float32(checkpoint):
    path = checkpoint("llama_gqa")
    ids = torch.tensor(prompt(301, 16))
    slots = torch.arange(16)
    f32, bf16 = load_model(path, 32), load_model(path, 32, torch.bfloat16)
    with torch.no_grad():
        a = torch.softmax(f32(ids, slots, slots, causal_rows(slots, 32)), -1)
        b = torch.softmax(bf16(ids, slots, slots, causal_rows(slots, 32)), -1)
    assert bf16.embed.weight.dtype == torch.bfloat16
    assert (a - b).abs().max().item() < 0.05


def test_missing_weight_is_named(tmp_path, checkpoint):
    from safetensors.torch import load_file, save_file

    src = checkpoint("llama_gqa")
    (tmp_path / "config.json").write_text((src / "config.json").read_text())
    tensors = load_file(src / "model.safetensors")
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError, match="layers.1.mlp.up_proj.weight"):
        load_model(tmp_path, 16)


def test_kv_compaction_moves_every_layer_pooled_or_not(checkpoint):
    """load_model pools the layers' caches so compaction is one gather and one scatter; it moves exactly
    what the per-layer copy moves, and a graph whose buffers were replaced (Module.to) falls back to that."""
    path = checkpoint(sorted(CONFIGS)[0])
    model = load_model(path, 32)
    assert model.pooled() is not None
    g = torch.Generator().manual_seed(0)
    for t in model.cache_tensors():
        t.copy_(torch.randn(t.shape, generator=g))
    src, dst = torch.tensor([9, 12, 15]), torch.tensor([5, 6, 7])
    want = [t.clone().index_copy_(1, dst, t.index_select(1, src)) for t in model.cache_tensors()]
    model.move_kv(src, dst)
    assert all(torch.equal(t, w) for t, w in zip(model.cache_tensors(), want))
    model.to(torch.float64)  # every buffer replaced: the pool no longer backs them
    assert model.pooled() is None
    model.move_kv(dst, src)
    assert all(torch.equal(t, w.double().index_copy_(1, src, w.double().index_select(1, dst)))
               for t, w in zip(model.cache_tensors(), want))
