import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))  # tests/checkpoints.py helpers

from checkpoints import CONFIGS, write_checkpoint  # noqa: E402

torch.set_num_threads(1)  # tiny models gain nothing from more; avoids oversubscription
try:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
except ImportError:
    pass


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def ckpt_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("ckpts")


@pytest.fixture(scope="session")
def checkpoint(ckpt_root):
    """checkpoint(name) -> path of a tiny random checkpoint of that config (written once)."""

    def get(name: str) -> Path:
        path = ckpt_root / name
        if not path.exists():
            write_checkpoint(path, name, seed=sorted(CONFIGS).index(name))
        return path

    return get
