"""A package's constants beside it: bound in place from the mapped file, aligned, the same outputs as the module;
a damaged file is one clear error. (The frozen O2 packages, whose packed weights share one original name, are
covered end to end by tests/runtime/test_o2.py.)"""
import pytest
import torch
from yggc.passes import external_constants

from yggc.artifacts.aoti_package import load_package
from yggc.artifacts.constants_map import ALIGN, LAYOUT_KEY, constants_path, read_constants
from yggc.errors import YggcError


class Affine(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(48, 64))
        self.register_buffer("b", torch.randn(48))

    def forward(self, x):
        return x @ self.w.t() + self.b


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    module, x = Affine().eval(), torch.randn(5, 64)
    path = tmp_path_factory.mktemp("pc") / "affine.pt2"
    with torch.no_grad():
        external_constants.compile_beside(torch.export.export(module, (x,)), path, {})
    return path, module, x


def mapped_ranges(path) -> list[tuple[int, int]]:
    ranges = []
    with open("/proc/self/maps") as f:
        for line in f:
            if line.rstrip().endswith(str(path)):
                start, end = (int(a, 16) for a in line.split()[0].split("-"))
                ranges.append((start, end))
    return ranges


@torch.no_grad()
def test_constants_are_bound_in_place_aligned_and_give_the_modules_outputs(package):
    path, module, x = package
    runner = load_package(path)
    assert torch.allclose(runner(x), module(x), atol=1e-5)
    ranges = mapped_ranges(constants_path(path))
    assert ranges, "the constants file is not mapped"
    for name, t in runner.bound.items():
        ptr = t.untyped_storage().data_ptr()
        assert ptr % ALIGN == 0, name
        assert any(start <= ptr < end for start, end in ranges), f"{name} was copied, not mapped"


def test_strided_and_offset_constants_come_back_laid_out_as_written(tmp_path):
    """Each constant is stored as its whole storage with its layout, so views come back as the same views (what
    Inductor hands over is contiguous today; the format does not rely on it)."""
    base = torch.randn(3, 48)
    written = {"transposed": base.t(), "row": base[1], "bf16": torch.randn(7, 5).bfloat16(), "empty": torch.zeros(0)}
    back = read_constants(external_constants.write_constants(tmp_path / "x.pt2", written))
    for name, t in written.items():
        got = back[name]
        assert (got.dtype, got.shape, got.stride(), got.storage_offset()) == (t.dtype, t.shape, t.stride(),
                                                                             t.storage_offset()), name
        assert torch.equal(got, t), name
        assert got.untyped_storage().data_ptr() % ALIGN == 0, name


def test_constants_with_equal_bytes_are_stored_once_and_share_their_pages(tmp_path):
    """A weight Inductor packed once per GEMM reading it comes back as views of one stored copy."""
    packed = torch.randn(64, 32).bfloat16()
    written = {"step_1": packed, "step_2": packed.clone(), "other": torch.randn(64, 32).bfloat16(),
               "step_2_t": packed.clone().t()}  # the same bytes under another layout
    path = external_constants.write_constants(tmp_path / "x.pt2", written)
    assert path.stat().st_size < 3 * packed.numel() * 2  # two distinct storages, not four
    back = read_constants(path)
    for name, t in written.items():
        assert torch.equal(back[name], t) and back[name].stride() == t.stride(), name
    ptr = {name: t.untyped_storage().data_ptr() for name, t in back.items()}
    assert ptr["step_1"] == ptr["step_2"] == ptr["step_2_t"] != ptr["other"]


def test_a_damaged_constants_file_is_one_clear_error(package, tmp_path):
    path = package[0]
    copy = tmp_path / path.name
    copy.write_bytes(path.read_bytes())
    constants_path(copy).write_bytes(constants_path(path).read_bytes()[:100])  # cut short
    with pytest.raises(YggcError, match=r"^compiled constants affine.constants.safetensors cannot be read \(.*\); "
                                        r"re-run `yggc compile`$"):
        load_package(copy)
    constants_path(copy).write_bytes(constants_path(path).read_bytes().replace(LAYOUT_KEY.encode(), b"yggc_xxxxxx"))
    with pytest.raises(YggcError, match="compiled constants affine.constants.safetensors cannot be read"):
        load_package(copy)


@torch.no_grad()
def test_opaque_onednn_weights_stay_inside_the_library(tmp_path):
    """An ATen GEMM on float32 takes oneDNN-packed weights, whose layout is opaque: the package is compiled again
    with its constants inside, and loads and computes as any other."""
    from yggc.passes.lower import inductor_config

    module = torch.nn.Linear(96, 64).eval()
    x = torch.randn(8, 96)
    program = torch.export.export(module, (x,))
    path = tmp_path / "onednn.pt2"
    config = dict(inductor_config("O2", "cpu"), max_autotune_gemm_backends="ATEN")  # no C++ template to pick
    assert not external_constants.compile_beside(program, path, config)
    assert not constants_path(path).exists()
    assert torch.allclose(load_package(path)(x), module(x), atol=1e-5)
