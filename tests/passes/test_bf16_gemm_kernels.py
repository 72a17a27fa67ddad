"""yggc's bf16 micro-kernels in O2's C++ GEMM template (passes/kernels/avx512_bf16_gemm.py, passes/kernels/avx2_bf16_gemm.py):
each is ranked first exactly where its ISA applies; compiled, their fp32 sums of bf16 products are right,
and rows are bit-identical whatever the row count (the AVX-512 kernel's passes over a block in chunks of k pairs
included). The AVX2 kernel runs on every x86 CPU with AVX2 (Inductor
compiles for AVX2 at simdlen 256), and its sums are exactly the sequential fp32 sums."""

import zipfile

import pytest
import torch
from yggc.passes.kernels import avx2_bf16_gemm, avx512_bf16_gemm

pytestmark = pytest.mark.skipif(not (avx512_bf16_gemm.register() and avx2_bf16_gemm.register()),
                                reason="this torch's Inductor has another API")
from torch._inductor.codegen import cpp_micro_gemm as mg  # noqa: E402 (register imports Inductor in order)
from torch._inductor.cpu_vec_isa import VecAVX2, VecAVX512  # noqa: E402
from torch._inductor.virtualized import V  # noqa: E402

HAS_AVX512_KERNEL = torch.cpu._is_avx512_bf16_supported() and not torch.cpu._is_amx_tile_supported()
HAS_AVX2 = torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")


class _Sizes:
    @staticmethod
    def optimization_hint(m, fallback=1):
        return m


class _Graph:
    sizevars = _Sizes()


class _Isa(VecAVX512):
    def __init__(self, bf16: bool):
        super().__init__()
        self.bf16 = bf16

    def is_avx512_bf16_supported(self) -> bool:
        return self.bf16


def chosen(monkeypatch, isa, amx: bool, m: int, n: int, k: int, dtype=torch.bfloat16):
    monkeypatch.setattr(mg, "pick_vec_isa", lambda: isa)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    with V.set_graph_handler(_Graph()):
        return type(mg.create_micro_gemm("k", m, n, k, dtype, dtype, torch.float, num_threads=2)).__name__


@pytest.mark.parametrize("m,n,k", [(1, 3072, 576), (4, 576, 1536), (9, 49152, 576), (4, 256, 768), (3, 960, 576)])
def test_each_kernel_ranks_first_only_where_its_isa_applies(monkeypatch, m, n, k):
    assert chosen(monkeypatch, _Isa(True), False, m, n, k) == "CppMicroGemmAVX512BF16"
    assert chosen(monkeypatch, _Isa(False), False, m, n, k) == "CppMicroGemmFP32Vec"
    assert chosen(monkeypatch, _Isa(True), True, m, n, k) != "CppMicroGemmAVX512BF16"
    assert chosen(monkeypatch, VecAVX2(), False, m, n, k) == "CppMicroGemmAVX2BF16"
    for isa in (_Isa(True), VecAVX2()):
        assert chosen(monkeypatch, isa, False, m, n, k, torch.float32) == "CppMicroGemmFP32Vec"
        assert chosen(monkeypatch, isa, False, m, n, k + 1) == "CppMicroGemmFP32Vec"  # K must hold pairs


class _Mlp(torch.nn.Module):
    """Weights stored [in, out], as O2's frozen export registers them, so the template reads the constants."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        # N = 672 and 200: a whole number of 32- and 48-column blocks, and a padded tail; K = 672: 336 k pairs, more
        # than one chunk of the AVX-512 kernel's passes (CHUNK_PAIRS)
        self.w1 = torch.nn.Parameter(torch.randn(96, 672, generator=g).bfloat16(), requires_grad=False)
        self.w2 = torch.nn.Parameter(torch.randn(672, 200, generator=g).bfloat16() / 16, requires_grad=False)

    def forward(self, x):  # x [M, 96] -> ([M, 672], [M, 200])
        h = x @ self.w1
        return h, h @ self.w2


def compile_mlp(tmp_path, markers: tuple[str, ...], simdlen: int | None = None):
    """The MLP at a dynamic row count through O2's Inductor config -> (module, compiled); its C++ holds `markers`."""
    from torch.export import Dim
    from yggc.passes.lower import inductor_config

    mlp = _Mlp().eval()
    x = torch.zeros(19, 96).bfloat16()
    program = torch.export.export(mlp, (x,), dynamic_shapes=({0: Dim("M", min=1, max=32)},))
    config = dict(inductor_config("O2", "cpu"), **({"cpp.simdlen": simdlen} if simdlen else {}))
    path = torch._inductor.aoti_compile_and_package(program, package_path=str(tmp_path / "mlp.pt2"),
                                                    inductor_configs=config)
    with zipfile.ZipFile(path) as z:
        source = "".join(z.read(n).decode() for n in z.namelist() if n.endswith(".cpp"))
    assert all(marker in source for marker in markers)
    return mlp, torch._inductor.aoti_load_package(path)


def sequential_sums(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x [M, K] @ w [K, N], each sum in fp32 over k in order (bf16 products are exact in fp32) -> [M, N] fp32."""
    acc = torch.zeros(x.shape[0], w.shape[1])
    for k in range(x.shape[1]):
        acc = acc + x[:, k:k + 1].float() * w[k].float()
    return acc


def assert_rows_invariant(compiled, x, outputs) -> None:
    for m in (1, 2, 3, 5, 8, 9, 11, 16):
        for out_m, out in zip(compiled(x[:m].clone()), outputs):
            assert torch.equal(out_m, out[:m]), f"{m} rows changed a row's result"


@pytest.mark.skipif(not HAS_AVX512_KERNEL, reason="needs a CPU with AVX512-BF16 and without AMX")
@torch.inference_mode()
def test_avx512_kernel_sums_right_and_keeps_rows_invariant(tmp_path):
    assert 336 > avx512_bf16_gemm.CHUNK_PAIRS
    # the next call's weights prefetched; at 11-20 rows, two passes over a column block in chunks of k pairs
    markers = ("_mm512_dpbf16_ps", "_mm_prefetch(next + ", f"step = 2 * {avx512_bf16_gemm.CHUNK_PAIRS}")
    mlp, compiled = compile_mlp(tmp_path, markers)
    x = torch.randn(19, 96, generator=torch.Generator().manual_seed(1)).bfloat16()
    h, y = compiled(x)
    # bf16 x bf16 products are exact in fp32; only the fp32 sums' order and the bf16 outputs round
    assert torch.allclose(h.double(), x.double() @ mlp.w1.double(), rtol=1e-2, atol=1e-2)
    assert torch.allclose(y.double(), h.double() @ mlp.w2.double(), rtol=1e-2, atol=1e-2)
    assert_rows_invariant(compiled, x, (h, y))


@pytest.mark.skipif(not HAS_AVX2, reason="needs an x86 CPU with AVX2")
@torch.inference_mode()
def test_avx2_kernel_makes_the_sequential_sums_and_keeps_rows_invariant(tmp_path):
    mlp, compiled = compile_mlp(tmp_path, ("_mm256_slli_epi32(b, 16)",), simdlen=256)
    x = torch.randn(19, 96, generator=torch.Generator().manual_seed(1)).bfloat16()
    h, y = compiled(x)
    assert torch.equal(h, sequential_sums(x, mlp.w1).bfloat16())
    assert torch.equal(y, sequential_sums(h, mlp.w2).bfloat16())
    assert_rows_invariant(compiled, x, (h, y))
