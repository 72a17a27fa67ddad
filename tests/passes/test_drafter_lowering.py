"""The compile half of the drafter kinds (passes/drafter_lowering.py): one lowering per runtime kind, by its name,
and the compile-only questions answered there rather than by the runtime's kinds."""
from pathlib import Path

import pytest
from yggc.passes.drafter_lowering import LOWERINGS, Eagle3Lowering, StandaloneLowering, lowering_of_folder

from yggc.errors import YggcError
from yggc.runtime import drafters
from yggc.runtime.loading import demo_pair_dirs

EAGLE3_DIR = Path(drafters.__file__).parents[2] / "smollm2_eagle3"  # the shipped head's config.json


def test_every_runtime_kind_has_one_lowering_by_its_name():
    assert set(LOWERINGS) == {kind.name for kind in drafters.KINDS}
    assert all(LOWERINGS[name].name == name for name in LOWERINGS)


def test_the_runtime_kinds_keep_no_compile_only_member():
    """check_target and tensor_parallel moved beside the passes; the runtime's kinds keep load and decode."""
    for kind in drafters.KINDS:
        assert not hasattr(kind, "check_target") and not hasattr(kind, "tensor_parallel")


def test_a_folder_gets_its_kinds_lowering():
    assert isinstance(lowering_of_folder(demo_pair_dirs()[1]), StandaloneLowering)
    assert isinstance(lowering_of_folder(EAGLE3_DIR), Eagle3Lowering)


def test_only_a_cpu_inductor_compile_takes_a_head():
    head, standalone = LOWERINGS["eagle3"], LOWERINGS["llama"]
    head.check_target(EAGLE3_DIR, "cpu", "inductor")
    for device, backend in (("cuda", "inductor"), ("cpu", "tensorrt")):
        with pytest.raises(YggcError, match="bundles with heads are CPU-only for now"):
            head.check_target(EAGLE3_DIR, device, backend)
        standalone.check_target("d", device, backend)  # any target builds a standalone drafter
    assert standalone.tensor_parallel and not head.tensor_parallel
    assert head.probe_widths == (1, 4, 8) and standalone.probe_widths == ()
