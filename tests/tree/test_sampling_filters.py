"""target_probs: temperature, top-k, top-p and min-p each keep exactly the tokens they promise."""
import pytest
import torch

from yggc.errors import YggcError
from yggc.tree import sampling
from yggc.tree.sampling import SamplingParams, row_argmax, target_probs, top_p_drop

LOGITS = torch.log(torch.tensor([0.40, 0.25, 0.15, 0.10, 0.06, 0.04]))


def kept(params: SamplingParams) -> list[int]:
    return torch.nonzero(target_probs(LOGITS, params) > 0).flatten().tolist()


def test_temperature_one_is_the_softmax():
    assert torch.allclose(target_probs(LOGITS, SamplingParams(1.0)), LOGITS.exp(), atol=1e-6)


def test_top_k_keeps_the_k_likeliest():
    assert kept(SamplingParams(1.0, top_k=3)) == [0, 1, 2]


def test_top_p_keeps_the_smallest_prefix_reaching_the_mass():
    assert kept(SamplingParams(1.0, top_p=0.65)) == [0, 1]  # 0.40 + 0.25 reaches 0.65
    assert kept(SamplingParams(1.0, top_p=0.66)) == [0, 1, 2]


def full_sort_drop(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """The plain rule over a full sort: drop a token once the mass before it reaches top_p."""
    sorted_p, order = torch.sort(probs, dim=-1, descending=True)
    drop_sorted = (sorted_p.cumsum(-1) - sorted_p) >= top_p
    return drop_sorted.scatter(-1, order, drop_sorted)


@pytest.mark.parametrize("scale", [0.3, 3.0, 12.0])  # flat (the nucleus outgrows the first k) to peaked
def test_top_p_over_the_top_k_equals_a_full_sort(scale):
    g = torch.Generator().manual_seed(int(scale * 10))
    probs = torch.softmax(scale * torch.randn(6, 4096, generator=g, dtype=torch.float64), -1)  # [rows, V]
    assert all(row.unique().numel() == row.numel() for row in probs)  # no ties: the two rules agree exactly
    for top_p in (0.3, 0.9, 0.99):
        assert torch.equal(top_p_drop(probs, top_p), full_sort_drop(probs, top_p)), top_p


def test_top_p_keeps_ties_together_whatever_the_batch(monkeypatch):
    """Tokens tied at the cut share one verdict, so a row's filter depends neither on the tie order of the
    sort nor on how far other rows made it look (a verifier row must not depend on its batch-mates)."""
    row = torch.tensor([0.30, 0.20, 0.20, 0.20, 0.10])  # 0.30 + 0.20 reaches 0.5 with either 0.20 first
    flat = torch.full((5,), 0.2)
    want = torch.tensor([False, False, False, False, True])
    for first_k in (1, 2, 5):
        monkeypatch.setattr(sampling, "NUCLEUS_FIRST_K", first_k)
        assert torch.equal(top_p_drop(row, 0.5), want)
        assert torch.equal(top_p_drop(torch.stack([row, flat]), 0.5)[0], want)


def test_min_p_keeps_tokens_above_a_fraction_of_the_likeliest():
    assert kept(SamplingParams(1.0, min_p=0.3)) == [0, 1, 2]  # threshold 0.12
    probs = target_probs(LOGITS, SamplingParams(1.0, min_p=0.3))
    assert torch.allclose(probs[:3], torch.tensor([0.40, 0.25, 0.15]) / 0.80, atol=1e-6)


def test_filters_compose_and_renormalise():
    probs = target_probs(LOGITS, SamplingParams(0.5, top_k=4, top_p=0.9, min_p=0.2))
    assert abs(float(probs.sum()) - 1) < 1e-6 and kept(SamplingParams(0.5, top_k=4, top_p=0.9, min_p=0.2)) == [0, 1]


@pytest.mark.parametrize("kw,msg", [({"min_p": 1.5}, "min-p must be in"), ({"top_p": 0.0}, "top-p must be in"),
                                    ({"temperature": -1.0}, "temperature must be")])
def test_bad_values_are_refused(kw, msg):
    with pytest.raises(YggcError, match=msg):
        SamplingParams(**{"temperature": 1.0, **kw})


def test_row_argmax_is_torch_argmax_with_ties_and_nan():
    """The NumPy fast path picks what torch.argmax picks: the first maximum, and the first NaN as the maximum."""
    x = torch.randn(4, 49152, generator=torch.Generator().manual_seed(0))
    x[1, 7] = x[1, 9000] = x[1].max() + 1  # a tie: the first wins
    x[2, 300] = x[2, 100] = float("nan")
    x[3] = 0.0  # all equal
    for logits in (x, x[0], x.bfloat16()):
        got = row_argmax(logits)
        assert got.dtype == torch.long and torch.equal(got, logits.argmax(-1))
