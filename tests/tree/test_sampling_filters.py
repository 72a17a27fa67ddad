"""target_probs: temperature, top-k, top-p and min-p each keep exactly the tokens they promise."""
import pytest
import torch

from yggc.errors import YggcError
from yggc.tree.sampling import SamplingParams, row_argmax, target_probs

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
