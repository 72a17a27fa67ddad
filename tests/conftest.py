import os
import sys
import tempfile
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))  # tests/checkpoints.py helpers
# a user's `touch ~/.cache/yggc/train.pause` (pausing their own training run) must not pause the tests' training jobs
os.environ["YGGC_TRAIN_PAUSE"] = str(Path(tempfile.gettempdir()) / f"yggc-tests-{os.getpid()}-no-pause")

from checkpoints import CONFIGS, write_checkpoint  # noqa: E402
from eager_bundle import write_eager_bundle  # noqa: E402

torch.set_num_threads(1)  # tiny models gain nothing from more; avoids oversubscription
try:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
except ImportError:
    pass


@pytest.fixture(scope="session", autouse=True)
def package_cache_of_the_run(tmp_path_factory):
    """Compiles keep their packages in one folder of this test run (shared by the xdist workers: the parent of
    their base temp folders), never in the user's ~/.cache/yggc/packages."""
    from yggc.passes import package_cache

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    before = os.environ.get(package_cache.ENV)
    os.environ[package_cache.ENV] = str(shared / "packages")  # compile subprocesses inherit it
    yield
    if before is None:
        os.environ.pop(package_cache.ENV)
    else:
        os.environ[package_cache.ENV] = before


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Every test runs on one torch thread and leaves one: a tool or command a test runs in-process may set more
    (the bench tools' --threads defaults to 2), which would leave the worker's next tests and fixtures on them: the
    CLI's busy-machine warning then depends on the load, and a CPU package compiled then is keyed (and split) for
    two threads."""
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    # files marked slow (they compile bundles for minutes) first: the parallel run hands out whole files in
    # this order, so the long ones start at once instead of leaving one worker busy at the end
    items.sort(key=lambda item: "slow" not in item.keywords)  # stable: file order otherwise kept
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(params=["numpy", "torch"])
def tree_code(request, monkeypatch) -> str:
    """Eager CPU tree work in NumPy (yggc/tree/host.py, the default) or in the torch code that the compiled
    phases are made of."""
    if request.param == "torch":
        from yggc.tree import host

        monkeypatch.setattr(host, "eager_cpu", lambda t: False)
    return request.param


@pytest.fixture(scope="session")
def eager_bundle(tmp_path_factory):
    """A bundle of a tiny random pair without compiled packages (tests/eager_bundle.py): plan D2 W2 V3, calibrated
    best unpruned tree D2 W2 V4, a profile, no sampling plan; its verifier has a chat template."""
    return write_eager_bundle(tmp_path_factory.mktemp("eager"))


@pytest.fixture(scope="session")
def ckpt_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("ckpts")


@pytest.fixture(scope="session")
def checkpoint(ckpt_root):
    """checkpoint(name) -> path of a tiny random checkpoint of that config (written once)."""

    def get(name: str) -> Path:
        path = ckpt_root / name
        if not path.exists():
            write_checkpoint(path, name, seed=sorted(CONFIGS).index(name) if name in CONFIGS else 99)
        return path

    return get


@pytest.fixture(scope="session")
def demo_runtime():
    """An eager (uncompiled) yggc.Runtime over the shipped demo pair (its verifier has a chat template), tree
    (3, 2, 5), 512-token context. Compiling the demo bundle takes minutes."""
    from yggc.artifacts.buckets import CompiledModel
    from yggc.plan.shape import TreeShape
    from yggc.runtime import drafters, loading
    from yggc.runtime.runtime import Runtime

    verifier_dir, drafter_dir = loading.demo_pair_dirs()
    verifier, drafter = drafters.load_pair(verifier_dir, drafter_dir, torch.float32, 512)
    compiled = {"verifier": CompiledModel(verifier.graph, {}), "drafter": CompiledModel(drafter.graph, {})}
    return Runtime(verifier_dir, None, verifier, drafter, compiled, TreeShape(3, 2, 5))


@pytest.fixture(scope="module")
def tiny_pair(ckpt_root):
    """A verifier and drafter over an 8-token vocabulary (exact distributions can be checked by counting),
    32-slot caches: (verifier graph, drafter graph, layout). Module scope: sampling tests advance the caches."""
    from yggc.graphs import load_model

    from yggc.artifacts.cache_layout import CacheLayout

    layout = CacheLayout(32)
    v, d = ckpt_root / "tiny_v", ckpt_root / "tiny_d"
    if not d.exists():  # written once per test run; each module loads its own graphs
        write_checkpoint(v, "tiny_vocab", seed=5, tokenizer=False)
        write_checkpoint(d, "tiny_vocab", seed=6, tokenizer=False)
    return load_model(v, layout.n_slots), load_model(d, layout.n_slots), layout


@pytest.fixture(scope="module")
def decoders(ckpt_root):
    """kind ("ar", "llama", "eagle3", "suffix") -> a decoder over tiny random models (tests/decoder_kinds.py)."""
    from decoder_kinds import make_decoders

    return make_decoders(ckpt_root / "kinds")
