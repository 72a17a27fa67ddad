import sys
from pathlib import Path

import pytest
from eager_bundle import write_eager_bundle

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))  # the tools/ scripts the tests here import


@pytest.fixture(scope="session")
def eager_bundle(tmp_path_factory):
    """A bundle of a tiny random pair without compiled packages (tests/eager_bundle.py): plan D2 W2 V3, calibrated
    best unpruned tree D2 W2 V4, a profile; its verifier has a chat template."""
    return write_eager_bundle(tmp_path_factory.mktemp("eager"))
