"""The attention kernel ops (yggc/artifacts/kernels/attend_rows.cpp): they compute masked GQA attention, and
a row's bits do not depend on how many rows share the call or on which cache slots hold its keys. v2 scores bf16
with VDPBF16PS where the CPU has it (kernels/pair_scores.cpp); v3 (what new packages call) also weights the values
with it, in slot pairs; v2 and v1 stay for older packages."""

import math

import pytest
import torch
from yggc.passes.kernels import kernel_library

from yggc.artifacts import kernel_ops


@pytest.fixture(scope="module", autouse=True)
def library():
    return kernel_library.build()


OPS = [kernel_ops.ATTEND_OP, "attend_rows_v2", "attend_rows_v1"]


def attend(op: str):
    return getattr(getattr(torch.ops, kernel_ops.NAMESPACE), op)


def cache_views(n_kv: int, n_slots: int, S: int, hd: int, dtype, seed: int):
    g = torch.Generator().manual_seed(seed)
    k = torch.randn(n_kv, n_slots, hd, generator=g).to(dtype)
    v = torch.randn(n_kv, n_slots, hd, generator=g).to(dtype)
    return k[:, :S], v[:, :S]  # strided views of a longer cache, as the graphs pass them


def reference(q, keys, values, mask):
    """float64 softmax attention with GQA; q [H, W, hd]."""
    H, n_kv = q.shape[0], keys.shape[0]
    k = keys.double().repeat_interleave(H // n_kv, 0)
    v = values.double().repeat_interleave(H // n_kv, 0)
    scores = (q.double() @ k.transpose(1, 2)) / math.sqrt(q.shape[-1])
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), -1) @ v


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
# head_dim 32, 64, 96, 128: v3's bf16 pairs in 32- and 64-column passes; 8, 24, 80: the arithmetic of v1
@pytest.mark.parametrize("H,n_kv,hd", [(9, 3, 64), (12, 2, 64), (4, 2, 32), (4, 1, 96), (8, 2, 128), (4, 4, 8),
                                       (6, 2, 24), (2, 1, 80)])
@pytest.mark.parametrize("op", OPS)
def test_matches_float64_attention(dtype, tol, H, n_kv, hd, op):
    keys, values = cache_views(n_kv, 64, 40, hd, dtype, seed=hd)
    q = torch.randn(H, 7, hd, generator=torch.Generator().manual_seed(1)).to(dtype)
    mask = torch.rand(7, 40, generator=torch.Generator().manual_seed(2)) < 0.6
    mask[:, 0] = True
    out = attend(op)(q, keys, values, mask)
    assert out.dtype == dtype and out.shape == q.shape
    torch.testing.assert_close(out.double(), reference(q, keys, values, mask), atol=tol, rtol=tol)


@pytest.fixture(params=[1, 2], ids=["1-thread", "2-threads"])
def threads(request):
    """v3 shares a call's rows out in runs per key/value head by the thread count (one run a head on 1 thread); the
    suite's one_torch_thread puts the next test back on one."""
    torch.set_num_threads(request.param)
    return request.param


@pytest.mark.parametrize("dtype,hd", [(torch.float32, 64), (torch.bfloat16, 64), (torch.bfloat16, 96)])
@pytest.mark.parametrize("op", OPS)
def test_rows_do_not_depend_on_width_or_slot_placement(dtype, hd, op, threads):
    """Row j of a 33-row tree call equals a one-row call over the same keys, both at the tree's slots and
    compacted to consecutive slots after the prefix (the autoregressive layout)."""
    prefix, rows = 90, 33
    keys, values = cache_views(3, 256, prefix + rows, hd, dtype, seed=5)
    q = torch.randn(9, rows, hd, generator=torch.Generator().manual_seed(6)).to(dtype)
    mask = torch.zeros(rows, prefix + rows, dtype=torch.bool)
    mask[:, :prefix] = True
    g = torch.Generator().manual_seed(7)
    for j in range(rows):  # a random subset of the earlier tree slots as ancestors, and the row itself
        mask[j, prefix:prefix + j] = torch.rand(j, generator=g) < 0.5
        mask[j, prefix + j] = True
    wide = attend(op)(q, keys, values, mask)
    for j in range(rows):
        one = attend(op)(q[:, j:j + 1], keys, values, mask[j:j + 1])
        assert torch.equal(one[:, 0], wide[:, j])
        visible = mask[j].nonzero().flatten()
        k2, v2 = (torch.zeros(3, 256, hd, dtype=dtype) for _ in range(2))
        k2[:, :len(visible)], v2[:, :len(visible)] = keys[:, visible], values[:, visible]
        compact = torch.zeros(1, len(visible) + 5, dtype=torch.bool)
        compact[0, :len(visible)] = True
        moved = attend(op)(q[:, j:j + 1], k2[:, :len(visible) + 5], v2[:, :len(visible) + 5], compact)
        assert torch.equal(moved[:, 0], wide[:, j])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("head_dim_apart", [False, True])
def test_strided_queries_and_mask_read_as_their_copies(dtype, head_dim_apart):
    """q as the graphs pass it (a transposed [W, H, hd] view; or with head_dim's elements apart) and a mask cut
    from a wider one: read through their strides, bit for bit what their contiguous copies give."""
    keys, values = cache_views(3, 64, 40, 64, dtype, seed=4)
    q = torch.randn(5, 9, 64, generator=torch.Generator().manual_seed(5)).to(dtype).transpose(0, 1)  # [H, W, hd]
    if head_dim_apart:
        q = q.permute(2, 1, 0).contiguous().permute(2, 1, 0)  # same values, head_dim the outermost in memory
    wide = torch.rand(5, 2, 40, generator=torch.Generator().manual_seed(6)) < 0.6
    wide[:, :, 0] = True
    mask = wide[:, 1]  # [W, S], row stride 80
    assert not q.is_contiguous() and not mask.is_contiguous()
    out = kernel_ops.attend_rows(q, keys, values, mask)
    assert out.is_contiguous() and out.shape == q.shape
    assert torch.equal(out, kernel_ops.attend_rows(q.contiguous(), keys, values, mask.contiguous()))


@pytest.mark.parametrize("dtype,hd", [(torch.float32, 16), (torch.bfloat16, 64)])
def test_a_row_that_sees_nothing_is_zero(dtype, hd):
    keys, values = cache_views(1, 8, 8, hd, dtype, seed=3)
    mask = torch.zeros(2, 8, dtype=torch.bool)
    mask[1, :3] = True
    out = kernel_ops.attend_rows(torch.randn(2, 2, hd).to(dtype), keys, values, mask)
    assert torch.equal(out[:, 0], torch.zeros(2, hd, dtype=dtype)) and out[:, 1].abs().sum() > 0


def test_bad_shapes_are_refused_with_a_message():
    keys, values = cache_views(1, 8, 8, 16, torch.float32, seed=3)
    with pytest.raises(RuntimeError, match="mask must be"):
        kernel_ops.attend_rows(torch.randn(2, 3, 16), keys, values, torch.ones(2, 8, dtype=torch.bool))


def test_the_library_is_installed_beside_a_package_and_loads_from_there(tmp_path):
    package = tmp_path / "verifier.pt2"
    kernel_library.install_beside(package)
    assert (tmp_path / kernel_ops.LIBRARY).read_bytes() == kernel_library.build().read_bytes()
    kernel_ops.load_beside(package)  # already registered in this process: a no-op, not a second registration
    assert kernel_ops.registered()
