"""Packages through torch's C++ loader: outputs as the exported module returns them, one clear error otherwise;
through the kernel library's runner class, other Python threads run while the model does."""
import threading
import time

import pytest
import torch
from yggc.passes.kernels import kernel_library

from yggc.artifacts import kernel_ops
from yggc.artifacts.aoti_package import BoundLoader, load_package
from yggc.errors import YggcError


class OneOutput(torch.nn.Module):
    def forward(self, x, y):
        return torch.relu(x) @ y


class Slow(torch.nn.Module):
    def forward(self, x, w):  # 24 dependent GEMMs, 3 GFLOP: 0.1-1 s on one core; two outputs
        for _ in range(24):
            x = torch.tanh(x @ w)
        return x, x.sum(-1)


MODULES = {"tensor": (OneOutput(), (4, 4)), "tuple": (Slow(), (256, 512))}  # "tuple" is slow: 3 GFLOP


@pytest.fixture(scope="module")
def packages(tmp_path_factory) -> dict:
    """Each module of MODULES compiled once: name -> (module, its inputs, the package's path)."""
    root, out = tmp_path_factory.mktemp("packages"), {}
    for name, (module, shape) in MODULES.items():
        args = (torch.randn(*shape), torch.randn(shape[1], shape[1]) / 16)
        path = root / f"{name}.pt2"
        torch._inductor.aoti_compile_and_package(torch.export.export(module, args), package_path=str(path))
        out[name] = module, args, path
    return out


@pytest.fixture(params=["runner", "bound loader"])
def loader_kind(request, monkeypatch):
    """Each test twice: through the kernel library's runner class, and through torch's own binding."""
    if request.param == "runner":
        kernel_library.build()  # registers torch.classes.yggc.PackageRunnerV2 (and V1) in this process
        assert kernel_ops.package_runner() is not None
    else:
        monkeypatch.setattr(kernel_ops, "package_runner", lambda: None)
    return request.param


@pytest.mark.parametrize("name", ["tuple", "tensor"])
def test_package_returns_what_the_module_returns(name, packages, loader_kind):
    module, (x, y), path = packages[name]
    loaded = load_package(path)
    assert isinstance(loaded.loader, BoundLoader) == (loader_kind == "bound loader")
    got, want = loaded(x, y), module(x, y)
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        assert all(torch.allclose(g, w, atol=1e-4, rtol=1e-4) for g, w in zip(got, want))  # sums: compiled order
    else:
        assert isinstance(got, torch.Tensor) and torch.allclose(got, want), path


def test_a_file_that_is_no_package_is_one_clear_error(tmp_path):
    (tmp_path / "bad.pt2").write_bytes(b"not a zip archive")
    with pytest.raises(YggcError, match="compiled bucket bad.pt2 cannot be loaded .*re-run `yggc compile`"):
        load_package(tmp_path / "bad.pt2")


def python_runs_during(call) -> int:
    """How many times another Python thread ran in the middle half of `call()` (0 if the call held the GIL)."""
    stamps, done = [], threading.Event()

    def tick():
        while not done.is_set():
            stamps.append(time.perf_counter())
            time.sleep(0.0005)

    ticker = threading.Thread(target=tick)
    ticker.start()
    time.sleep(0.01)
    start = time.perf_counter()
    call()
    end = time.perf_counter()
    done.set()
    ticker.join()
    quarter = (end - start) / 4
    return sum(start + quarter < t < end - quarter for t in stamps)


def test_the_runner_lets_other_threads_run_while_the_model_does(packages, loader_kind):
    """The property `yggc serve` needs: its event loop runs while the decode thread is inside a package. torch's
    own binding holds the GIL for the whole call, so the other thread stops (the switch interval, 5 ms, lets it
    in only at the call's edges, never in its middle half)."""
    module, (x, w), path = packages["tuple"]
    loaded = load_package(path)
    torch.testing.assert_close(loaded(x, w), module(x, w), atol=1e-4, rtol=1e-4)
    with torch.inference_mode():
        runs = python_runs_during(lambda: loaded(x, w))
    assert (runs > 10) if loader_kind == "runner" else (runs == 0), runs
