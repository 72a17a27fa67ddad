"""CUDA paths: CUDA-graph replay, device properties, a compiled bundle on the GPU (skipped without CUDA)."""
import pytest
import torch
from checkpoints import write_checkpoint

from yggc.artifacts.device import resolve_device
from yggc.cli.main import main
from yggc.errors import YggcError


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without CUDA")
def test_cuda_request_without_gpu_is_one_clear_error(capsys):
    with pytest.raises(YggcError, match="torch.cuda.is_available\\(\\) is False"):
        resolve_device("cuda")
    assert main(["compile", "--device", "cuda", "-o", "/nonexistent/b"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


@pytest.mark.cuda
def test_cuda_graph_replay_equals_direct_calls():
    from yggc.artifacts.cuda_graphs import CudaGraphRunner

    w = torch.randn(64, 64, device="cuda")
    runner = CudaGraphRunner(lambda x: torch.relu(x @ w))
    x = torch.randn(8, 64, device="cuda")
    runner.capture((torch.zeros_like(x),))
    for _ in range(3):
        x = torch.randn(8, 64, device="cuda")
        assert torch.equal(runner(x), torch.relu(x @ w))


@pytest.mark.cuda
def test_cuda_properties():
    from yggc.artifacts.device import cuda_properties

    props = cuda_properties()
    assert props["sm_count"] > 0 and props["capability"].startswith("sm_")


@pytest.mark.cuda
def test_cuda_bundle_is_lossless(tmp_path):
    from yggc.passes.pipeline import CompileJob, compile_bundle

    from yggc.plan.shape import TreeShape
    from yggc.runtime import Runtime
    from yggc.runtime.autoregressive import AutoregressiveDecoder
    from yggc.tree.sampling import SamplingParams

    v = write_checkpoint(tmp_path / "v", "llama_gqa", seed=11)
    d = write_checkpoint(tmp_path / "d", "llama_gqa", seed=12, base=v, noise=0.03)
    compile_bundle(CompileJob(v, d, tmp_path / "b", TreeShape(3, 2, 5), max_seq=128, device="cuda",
                              profile_repeats=3), log=lambda m: None)
    rt = Runtime.load(tmp_path / "b")
    prompt = [5, 17, 33, 2, 99]
    ar = AutoregressiveDecoder(rt.verifier.graph, rt.verifier.layout)
    ref = [t for c in ar.stream(prompt, 40, SamplingParams()) for t in c]
    assert rt.generate(prompt, 40).tokens == ref


def test_compile_loads_the_drafter_on_the_jobs_device_too(monkeypatch, tmp_path):
    """A CUDA compile lowered the verifier's buckets on cuda, then died exporting the drafter's when the drafter
    stayed on the CPU (load_drafter's default)."""
    from yggc.passes import pipeline

    from yggc.plan.shape import TreeShape
    from yggc.runtime.loading import demo_pair_dirs

    seen = {}
    monkeypatch.setattr(pipeline, "verifier_loader",
                        lambda tp: lambda path, dtype, max_seq, device: seen.setdefault("verifier", device))
    monkeypatch.setattr(pipeline, "load_drafter",
                        lambda path, verifier, dtype, device="cpu": seen.setdefault("drafter", device))
    job = pipeline.CompileJob(*demo_pair_dirs(), tmp_path / "b", TreeShape(2, 2, 2), device="cuda")
    pipeline.load_checked_pair(job)
    assert seen == {"verifier": "cuda", "drafter": "cuda"}


def test_a_cuda_compile_test_loads_one_package_in_a_child_before_loading_any_in_process(monkeypatch, tmp_path):
    """torch 2.11's loader can kill the compile (SIGSEGV) loading its CUDA packages (packages built by a CXX
    wrapper, passes/toolchain.py). The compile test-loads the first one in a child process, and a crash there ends
    it with one line and no bundle."""
    import dataclasses

    from yggc.passes import pipeline

    from yggc.bundle import BucketSpec
    from yggc.plan.shape import TreeShape
    from yggc.runtime.loading import demo_pair_dirs

    load_on_cpu = pipeline.load_checked_pair
    monkeypatch.setattr(pipeline, "load_checked_pair", lambda job: load_on_cpu(dataclasses.replace(job, device="cpu")))
    monkeypatch.setattr(pipeline, "lower_forward_buckets", lambda w, loaded, widths, job, log: [
        BucketSpec("verifier_w1", "verifier", "forward", 1, "artifacts/verifier_w1.pt2")])
    probed = []

    def crashing_probe(path, device):
        probed.append((path.name, device))
        raise YggcError("loading compiled bucket verifier_w1.pt2 on cuda killed a test process (SIGSEGV)")

    monkeypatch.setattr(pipeline, "probe_load", crashing_probe)
    monkeypatch.setattr(pipeline, "loadable_compiler", lambda device, log: "g++")  # tests/passes/test_toolchain.py
    monkeypatch.setattr(pipeline, "compiled_model", lambda *a, **k: pytest.fail("loaded a package in-process"))
    out = tmp_path / "b"
    with pytest.raises(YggcError, match="killed a test process"):
        pipeline.compile_bundle(pipeline.CompileJob(*demo_pair_dirs(), out, TreeShape(2, 2, 2), device="cuda"),
                                log=lambda *_: None)
    assert probed == [("verifier_w1.pt2", "cuda")]
    assert not out.exists() and list(tmp_path.iterdir()) == []  # nothing half-written
