"""O2 on a CPU forks threads for a pointwise or norm kernel only above passes.lower.CPU_MIN_CHUNK elements a thread
(at the tune width): a small block's norm and SiLU run on one thread, its GEMMs on all, with the bits of Inductor's
default, which forks for every kernel."""
import zipfile

import pytest
import torch
from torch.export import Dim
from yggc.passes import lower


class _Block(torch.nn.Module):
    """RMSNorm -> gate/up GEMM -> SiLU * up -> down GEMM, SmolLM2's widths; weights [in, out] as O2 freezes them."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.up = torch.nn.Parameter(torch.randn(576, 3072, generator=g).bfloat16() / 24, requires_grad=False)
        self.down = torch.nn.Parameter(torch.randn(1536, 576, generator=g).bfloat16() / 40, requires_grad=False)

    def forward(self, x):  # x [M, 576] -> [M, 576]
        h = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype)
        gate, up = (h @ self.up).split(1536, -1)
        return (torch.nn.functional.silu(gate) * up) @ self.down


def compiled(tmp_path, name: str, config: dict):
    x = torch.zeros(lower.O2_TUNE_WIDTH, 576).bfloat16()
    program = torch.export.export(_Block().eval(), (x,), dynamic_shapes=({0: Dim("M", min=1, max=64)},))
    path = torch._inductor.aoti_compile_and_package(program, package_path=str(tmp_path / f"{name}.pt2"),
                                                    inductor_configs=config)
    with zipfile.ZipFile(path) as z:
        source = "".join(z.read(n).decode() for n in z.namelist() if n.endswith(".cpp"))
    return torch._inductor.aoti_load_package(path), source.count("#pragma omp parallel")


@pytest.fixture
def two_threads():
    """Inductor writes fork-join regions for the process's thread count (the suite runs on one: one_torch_thread
    puts the next test back on it)."""
    torch.set_num_threads(2)


@torch.inference_mode()
def test_small_pointwise_kernels_run_on_one_thread_with_the_same_bits(tmp_path, two_threads):
    config = lower.inductor_config("O2", "cpu")
    assert config["cpp.min_chunk_size"] == lower.CPU_MIN_CHUNK
    ours, forks = compiled(tmp_path, "ours", config)
    default, default_forks = compiled(tmp_path, "default", dict(config, **{"cpp.min_chunk_size": 512}))
    assert forks == 2 < default_forks  # the two GEMMs only
    x = torch.randn(64, 576, generator=torch.Generator().manual_seed(1)).bfloat16()
    for rows in (1, 4, 9, 64):
        assert torch.equal(ours(x[:rows].clone()), default(x[:rows].clone()))
