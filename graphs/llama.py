"""A compile-friendly Llama-family decoder with a static, in-place KV cache (after gpt-fast).

Every use - prefill chunks, one-token decode, drafting a tree level, verifying a tree - goes
through one forward:

    (input_ids [W], position_ids [W], cache_slots [W], attn_mask [W, S]) -> logits [W, V]

The K/V of the W inputs are written into the cache at `cache_slots`; each query then attends to
cache slots 0..S-1 where `attn_mask` is True. The RoPE position is separate from the cache slot,
so a token tree (many nodes at one depth) is verified in one call. S may be smaller than the
allocated cache (a shorter view is cheaper); every mask row must allow at least one slot.
There is no data-dependent Python control flow, so torch.compile / torch.export see one graph.
Exported, attention is written as plain reductions (attend_rowwise) so that, with GEMM kernels whose
K order does not depend on the row count, a row's logits are bit-identical whatever the width.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .config import ModelConfig, RopeConfig, rope_inv_freq
from .moe import feed_forward


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in float32 like the reference implementation, then cast back.
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


class KVCache(nn.Module):
    def __init__(self, n_kv_heads: int, n_slots: int, head_dim: int, dtype: torch.dtype):
        super().__init__()
        shape = (n_kv_heads, n_slots, head_dim)
        self.register_buffer("k", torch.zeros(shape, dtype=dtype), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype), persistent=False)

    def write(self, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        # slots [W]; k, v [kv_heads, W, head_dim]
        self.k.index_copy_(1, slots, k)
        self.v.index_copy_(1, slots, v)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x [heads, W, head_dim]; cos, sin [W, head_dim] (halves duplicated, HF's rotate_half layout)
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def realized(x: torch.Tensor) -> torch.Tensor:
    """x itself, but written to a contiguous buffer of its own when exported for Inductor (its
    force_stride_order prim). Inductor inlines a producer costing fewer ops than its realize threshold into
    the consumer's loops: unrealized, the RoPE'd queries are recomputed once per cache slot inside attention's
    score loop, which made wide verifies on an AMX Xeon markedly slower (docs/benchmarks/cpu-verify-curve.md)."""
    if not torch.compiler.is_exporting():
        return x
    from torch._inductor import inductor_prims  # noqa: F401  (registers the prim)
    from torch._prims_common import make_contiguous_strides_for

    return torch.ops.prims.inductor_force_stride_order(x, make_contiguous_strides_for(x.shape))


def attend_rowwise(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Masked GQA attention as elementwise products and sums, laid out so that every sum over cache slots
    runs slot by slot within one row (rows, not slots, are what a vector lane holds). Compiled, a row's
    result is then bit-identical whatever the number of rows and wherever its visible keys sit in the
    cache: masked slots add exact zeros. A BLAS batched GEMM picks kernels by the row count instead.
    q [H, W, hd]; keys, values [KV, S, hd]; mask [W, S] bool -> [H, W, hd]."""
    (H, W, hd), n_kv = q.shape, keys.shape[0]
    qg = realized(q).reshape(n_kv, 1, H // n_kv, W, hd)  # heads sharing a KV head side by side
    scores = (keys[:, :, None, None, :] * qg).sum(-1, dtype=torch.float32) * hd ** -0.5  # [KV, S, G, W]
    scores = scores.masked_fill(~mask.t()[:, None, :], float("-inf"))
    e = torch.exp(scores - scores.amax(1, keepdim=True))  # [KV, S, G, W]
    num = (e[..., None] * values[:, :, None, None, :]).sum(1)  # [KV, G, W, hd]
    return (num / e.sum(1)[..., None]).to(q.dtype).view(H, W, hd)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, n_slots: int, dtype: torch.dtype):
        super().__init__()
        self.n_heads, self.n_kv, self.hd = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        qkv_out = (cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim
        self.wqkv = nn.Linear(cfg.hidden_size, qkv_out, bias=cfg.qkv_bias)  # fused q, k, v
        self.wo = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.hidden_size, bias=cfg.o_bias)
        self.cache = KVCache(cfg.n_kv_heads, n_slots, cfg.head_dim, dtype)
        self.attend_exported = attend_rowwise  # what export traces; set_exported_attention swaps it

    def forward(self, x, cos, sin, slots, mask, kv=None):
        # x [W, hidden]; mask [W, S] bool; kv: (k, v) cache tensors passed in, else this layer's buffers
        W = x.shape[0]
        q, k, v = self.wqkv(x).split([self.n_heads * self.hd, self.n_kv * self.hd, self.n_kv * self.hd], -1)
        q = rotate(q.view(W, self.n_heads, self.hd).transpose(0, 1), cos, sin)  # [H, W, hd]
        k = rotate(k.view(W, self.n_kv, self.hd).transpose(0, 1), cos, sin)  # [KV, W, hd]
        v = v.view(W, self.n_kv, self.hd).transpose(0, 1)
        k_cache, v_cache = kv if kv is not None else (self.cache.k, self.cache.v)  # [KV, n_slots, hd]
        k_cache.index_copy_(1, slots, k)
        v_cache.index_copy_(1, slots, v)
        S = mask.shape[1]
        keys, values = k_cache[:, :S], v_cache[:, :S]  # [KV, S, hd]
        if torch.compiler.is_exporting():
            out = self.attend_exported(q, keys, values, mask)  # [H, W, hd]
        else:  # eager: the fused kernel is much faster than the broadcast products
            out = F.scaled_dot_product_attention(q.unsqueeze(0), keys.unsqueeze(0), values.unsqueeze(0),
                                                 attn_mask=mask[None, None], enable_gqa=True)[0]  # [H, W, hd]
        return self.wo(out.transpose(0, 1).reshape(W, self.n_heads * self.hd))


AttendFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def set_exported_attention(module: nn.Module, attend: AttendFn) -> None:
    """Every Attention inside `module` exports `attend` (same contract as attend_rowwise), e.g. a kernel op."""
    for m in module.modules():
        if isinstance(m, Attention):
            m.attend_exported = attend


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, n_slots: int, dtype: torch.dtype, layer: int = 0):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.attn = Attention(cfg, n_slots, dtype)
        self.mlp_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = feed_forward(cfg, layer)

    def forward(self, x, cos, sin, slots, mask, kv=None):
        x = x + self.attn(self.attn_norm(x), cos, sin, slots, mask, kv)
        return x + self.mlp(self.mlp_norm(x))


class CacheOwner(nn.Module):
    """A graph whose attention layers own static KV caches: KV compaction for every graph kind."""

    def caches(self) -> list[KVCache]:
        """Every layer's cache, found once (walking the modules on each compaction is costly host work)."""
        found = self.__dict__.get("_caches")
        if found is None:
            found = self.__dict__["_caches"] = [m for m in self.modules() if isinstance(m, KVCache)]
        return found

    def cache_tensors(self) -> list[torch.Tensor]:
        """Every layer's K/V as (k0, v0, k1, v1, ...): the trailing `caches` of a forward that takes them as inputs."""
        return [t for cache in self.caches() for t in (cache.k, cache.v)]

    def pool_caches(self) -> None:
        """Every layer's K/V as views of one buffer [layers, 2, kv_heads, slots, head_dim], contents kept, so
        KV compaction moves every layer's rows in one gather and one scatter instead of 4 ops per layer (each
        a torch dispatch on the host). Caches of differing shapes, dtypes or devices stay apart."""
        caches = self.caches()
        if len({(c.k.shape, c.k.dtype, c.k.device) for c in caches}) != 1 or caches[0].k.is_meta:
            return
        pool = torch.stack([torch.stack((c.k, c.v)) for c in caches])
        for i, cache in enumerate(caches):
            cache.k, cache.v = pool[i, 0], pool[i, 1]
        self.__dict__["_kv_pool"] = pool

    def pooled(self) -> torch.Tensor | None:
        """The pool behind every cache, unless a buffer was replaced since (Module.to, materialize) or the
        graph is being traced -> None."""
        pool, caches = self.__dict__.get("_kv_pool"), self.caches()
        if torch.compiler.is_compiling() or torch.compiler.is_exporting():
            return None  # traced (an O1 verify phase): the graph's own buffers, layer by layer
        if pool is None or caches[0].k.data_ptr() != pool.data_ptr() or caches[-1].v.data_ptr() != pool[-1, 1].data_ptr():
            return None
        return pool

    def move_kv(self, src_slots: torch.Tensor, dst_slots: torch.Tensor) -> None:
        """Copy the K/V at src_slots to dst_slots in every layer (KV compaction after a verify)."""
        pool = self.pooled()
        if pool is not None:  # [layers, 2, kv_heads, slots, head_dim]
            pool.index_copy_(3, dst_slots, pool.index_select(3, src_slots))
            return
        for cache in self.caches():
            cache.write(dst_slots, cache.k.index_select(1, src_slots), cache.v.index_select(1, src_slots))


def rope_cos_sin(position_ids: torch.Tensor, inv_freq: torch.Tensor, dtype: torch.dtype):
    """position_ids [W] -> cos, sin [W, head_dim] in `dtype` (angles in float32)."""
    angles = position_ids.float()[:, None] * inv_freq[None, :]  # [W, hd/2]
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


class RopeTable(nn.Module):
    """cos and sin of every position a cache of `n_positions` slots can hold (a position never exceeds its
    slot), [n_positions, head_dim] each, in the model's dtype: a forward gathers its rows. Compiled, cos/sin
    evaluated per call would be inlined into their consumers and recomputed inside attention's loops over
    cache slots, a large part of a wide verify's cost."""

    def __init__(self, rope: RopeConfig, n_positions: int, head_dim: int, dtype: torch.dtype):
        super().__init__()
        self.rope, self.head_dim = rope, head_dim
        for name in ("cos", "sin"):
            self.register_buffer(name, torch.empty(n_positions, head_dim, dtype=dtype), persistent=False)
        self.fill()

    def fill(self) -> None:
        """Compute the tables (float32 angles, as rope_cos_sin); again after meta-device construction."""
        if self.cos.is_meta:
            return
        inv_freq = rope_inv_freq(self.rope, self.head_dim).to(self.cos.device)
        positions = torch.arange(self.cos.shape[0], device=self.cos.device)
        self.cos, self.sin = rope_cos_sin(positions, inv_freq, self.cos.dtype)

    def forward(self, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.cos[position_ids], self.sin[position_ids]  # [W, head_dim] each


class LlamaGraph(CacheOwner):
    """Decoder + static KV cache with `n_slots` slots (the caller reserves any scratch slots).

    `feature_layers` (set by an EAGLE-3 pairing): forward_features also returns the hidden states entering
    these layers, concatenated (the low/mid/high features an EAGLE-3 head drafts from); `feature_fc` (the
    head's fusion layer, set where a compiled verifier runs it) fuses them into the head's input feature."""

    def __init__(self, cfg: ModelConfig, n_slots: int, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.cfg, self.n_slots = cfg, n_slots
        # no random init: weights always come from a checkpoint (and meta-device init costs seconds)
        self.embed = nn.Embedding(cfg.vocab_size, cfg.hidden_size, _weight=torch.empty(cfg.vocab_size, cfg.hidden_size))
        self.layers = nn.ModuleList(Block(cfg, n_slots, dtype, i) for i in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.embed.weight
        self.rope = RopeTable(cfg.rope, n_slots, cfg.head_dim, dtype)
        self.feature_layers: tuple[int, ...] = ()
        self.feature_fc: nn.Module | None = None
        self.to(dtype)

    def run_layers(self, input_ids, position_ids, cache_slots, attn_mask, caches=()):
        """-> (logits [W, V] float32, last hidden state [W, hidden], taps: the inputs of feature_layers)."""
        x = self.embed(input_ids)
        cos, sin = self.rope(position_ids)
        taps = []
        for i, layer in enumerate(self.layers):
            taps += [x] * self.feature_layers.count(i)
            x = layer(x, cos, sin, cache_slots, attn_mask, caches[2 * i: 2 * i + 2] if caches else None)
        h = self.norm(x)
        return self.lm_head(h).float(), h, taps

    def forward_hidden(self, input_ids, position_ids, cache_slots, attn_mask, *caches):
        """-> (logits [W, V] float32, last hidden state [W, hidden]). `caches` (k0, v0, k1, v1, ...), if
        given, replace the cache buffers (backends whose compiled programs cannot own a mutable buffer)."""
        logits, h, _ = self.run_layers(input_ids, position_ids, cache_slots, attn_mask, caches)
        return logits, h

    def forward_features(self, input_ids, position_ids, cache_slots, attn_mask, *caches):
        """-> (logits [W, V] float32, features [W, len(feature_layers) * hidden]) (feature_layers ascending), or
        with feature_fc the fused features [W, head hidden]."""
        logits, _, taps = self.run_layers(input_ids, position_ids, cache_slots, attn_mask, caches)
        features = torch.cat(taps, dim=-1)
        return logits, features if self.feature_fc is None else self.feature_fc(features)

    def forward(self, input_ids, position_ids, cache_slots, attn_mask, *caches):
        return self.forward_hidden(input_ids, position_ids, cache_slots, attn_mask, *caches)[0]

    @property
    def has_weights(self) -> bool:
        """False when built without them (graphs.load_model(weights=False)): compiled packages carry them."""
        return not self.embed.weight.is_meta
