"""`yggc serve` as its own process (serve_demo.py: the real CLI over the shipped demo pair): the shipped chat
template answers chat, no key is asked without YGGC_API_KEY and an empty one is refused, and SIGTERM answers the queue 503 at once, stops
the decoding request after the grace with a clean end of stream, and exits 0 without a traceback."""
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from yggc.serve.server import GRACE_S

SCRIPT = Path(__file__).with_name("serve_demo.py")
PROMPT = "def fibonacci(n):"  # greedy, the demo pair writes hundreds of tokens before an end of text


class Served:
    """A serve_demo.py process; its stderr is read by a thread (lines kept in self.err)."""

    def __init__(self, tmp_path: Path, step_s: float, *flags: str, env: dict | None = None):
        bundle = tmp_path / "demo.bundle"
        bundle.mkdir()
        (bundle / "manifest.json").write_text("{}")
        self.proc = subprocess.Popen([sys.executable, str(SCRIPT), str(bundle), str(step_s), *flags],
                                     stderr=subprocess.PIPE, text=True, cwd=SCRIPT.parent,
                                     env={**{k: v for k, v in os.environ.items() if k != "YGGC_API_KEY"},
                                          "OMP_NUM_THREADS": "1", **(env or {})})
        self.err: list[str] = []
        self.ready = threading.Event()
        threading.Thread(target=self.read_stderr, daemon=True).start()
        assert self.ready.wait(120) and self.proc.poll() is None, "".join(self.err)
        port = re.search(r"yggc: serving .* at http://127\.0\.0\.1:(\d+)/v1", "".join(self.err))[1]
        self.url = f"http://127.0.0.1:{port}"

    def read_stderr(self) -> None:
        for line in self.proc.stderr:
            self.err.append(line)
            if line.startswith("yggc: serving"):
                self.ready.set()
        self.ready.set()  # it ended before serving

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture(scope="module")
def keyless(tmp_path_factory):
    """Started without YGGC_API_KEY and --api-key (an empty key is refused: tests/cli/test_serve.py)."""
    served = Served(tmp_path_factory.mktemp("keyless"), 0.0)
    yield served
    served.stop()


def test_without_a_key_none_is_asked(keyless):
    serving = [line for line in keyless.err if line.startswith("yggc: serving")]
    assert len(serving) == 1 and "API key" not in serving[0]
    r = httpx.get(f"{keyless.url}/v1/models", timeout=30)
    assert r.status_code == 200 and r.json()["data"][0]["id"] == "demo.bundle"


def test_an_empty_api_key_is_refused_at_startup(tmp_path):
    """YGGC_API_KEY= would have turned authentication off without a word (issue 82): one line, exit 2."""
    (tmp_path / "manifest.json").write_text("{}")
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), "0"], capture_output=True, text=True,
                          cwd=SCRIPT.parent, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1", "YGGC_API_KEY": ""})
    assert done.returncode == 2 and done.stdout == "", done.stderr
    lines = [line for line in done.stderr.splitlines() if not line.startswith("yggc: warning:")]
    assert len(lines) == 1 and lines[0].startswith("yggc: error: the API key is empty"), done.stderr


def test_the_shipped_demo_pair_answers_chat(keyless):
    r = httpx.post(f"{keyless.url}/v1/chat/completions", timeout=60,
                   json={"model": "demo.bundle", "messages": [{"role": "user", "content": "def add(a, b):"}],
                         "max_tokens": 8, "temperature": 0})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 8 and r.json()["choices"][0]["message"]["content"]


def ask(url: str, body: dict, out: dict) -> None:
    """POST and keep the status, the JSON or the stream's data lines, and when the answer ended."""
    with httpx.stream("POST", url, json=body, timeout=60) as r:
        out["status"] = r.status_code
        if body.get("stream") and r.status_code == 200:
            out["lines"] = []
            for line in r.iter_lines():
                if line:
                    out["lines"].append(line)
                    out.setdefault("first_at", time.perf_counter())
        else:
            out["json"] = json.loads(r.read())
    out["ended_at"] = time.perf_counter()


def test_sigterm_answers_the_queue_503_and_ends_the_running_stream(tmp_path):
    # 50 ms an iteration: 400 tokens take far past the grace with the tree alone (suffix branches accept whole
    # repeats of the prompt per iteration and may finish inside it)
    served = Served(tmp_path, 0.05, "--queue", "4", "--no-suffix")
    try:
        running, waiting, waiting_stream = {}, {}, {}
        url = f"{served.url}/v1/completions"
        body = {"model": "demo.bundle", "prompt": PROMPT, "max_tokens": 400, "temperature": 0}
        threads = [threading.Thread(target=ask, args=(url, {**body, "stream": True}, running))]
        threads[0].start()
        wait_for(lambda: "first_at" in running)
        for out, stream in ((waiting, False), (waiting_stream, True)):
            threads.append(threading.Thread(target=ask, args=(url, {**body, "stream": stream}, out)))
            threads[-1].start()
        wait_for(lambda: httpx.get(f"{served.url}/health").json()["queue_depth"] == 2)
        sent = time.perf_counter()
        served.proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(30)
        for out in (waiting, waiting_stream):  # answered at once, not after the grace
            assert out["status"] == 503 and out["json"]["error"]["code"] == "shutting_down", out
            assert out["ended_at"] - sent < GRACE_S
        assert running["status"] == 200 and running["lines"][-1] == "data: [DONE]"
        last = json.loads(running["lines"][-2].removeprefix("data: "))
        assert last["error"]["code"] == "shutting_down" and "stopped after" in last["error"]["message"]
        assert GRACE_S - 0.5 < running["ended_at"] - sent < GRACE_S + 5
        assert served.proc.wait(30) == 0
        err = "".join(served.err)
        assert "Traceback" not in err and "ERROR" not in err, err
    finally:
        served.stop()


def wait_for(condition, timeout: float = 60.0) -> None:
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, "timed out"
        time.sleep(0.02)
