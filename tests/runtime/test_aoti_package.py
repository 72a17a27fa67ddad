"""Packages through torch's C++ loader: outputs as the exported module returns them, one clear error otherwise."""
import pytest
import torch

from yggc.errors import YggcError
from yggc.runtime.aoti_package import load_package


class TwoOutputs(torch.nn.Module):
    def forward(self, x, y):
        return x * 2 + y, (x - y).sum(-1)


class OneOutput(torch.nn.Module):
    def forward(self, x, y):
        return torch.relu(x) @ y


@pytest.mark.parametrize("module", [TwoOutputs(), OneOutput()], ids=["tuple", "tensor"])
def test_package_returns_what_the_module_returns(module, tmp_path):
    x, y = torch.randn(4, 4), torch.randn(4, 4)
    path = torch._inductor.aoti_compile_and_package(torch.export.export(module, (x, y)),
                                                    package_path=str(tmp_path / "m.pt2"))
    got, want = load_package(tmp_path / "m.pt2")(x, y), module(x, y)
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        assert all(torch.allclose(g, w) for g, w in zip(got, want))
    else:
        assert isinstance(got, torch.Tensor) and torch.allclose(got, want), path


def test_a_file_that_is_no_package_is_one_clear_error(tmp_path):
    (tmp_path / "bad.pt2").write_bytes(b"not a zip archive")
    with pytest.raises(YggcError, match="compiled bucket bad.pt2 cannot be loaded .*re-run `yggc compile`"):
        load_package(tmp_path / "bad.pt2")
