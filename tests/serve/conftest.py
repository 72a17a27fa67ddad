"""A live `yggc serve` app over the demo runtime: uvicorn in a background thread on a free port."""
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("openai")

from live_server import MODEL, start  # noqa: E402


@pytest.fixture(scope="session")
def live(demo_runtime):
    from yggc.serve.settings import ServeSettings

    server, stop = start(demo_runtime, ServeSettings(MODEL, queue_size=4))
    yield server
    stop()
