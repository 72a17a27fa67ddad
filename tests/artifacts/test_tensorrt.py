"""The TensorRT backend: its cache-as-inputs calling convention is checked on CPU (Inductor compiles
the same export); TensorRT itself needs CUDA and torch-tensorrt (skipped here)."""
import pytest
import torch
from checkpoints import write_checkpoint
from yggc.graphs import load_model
from yggc.passes.lower_tensorrt import export_cache_as_inputs

from yggc.artifacts.aoti_package import Package
from yggc.artifacts.buckets import CompiledModel
from yggc.artifacts.cache_inputs import CacheInputBucket
from yggc.artifacts.cache_layout import CacheLayout
from yggc.cli.main import main
from yggc.runtime.autoregressive import AutoregressiveDecoder
from yggc.tree.sampling import SamplingParams


def greedy(model, layout, prompt, n):
    dec = AutoregressiveDecoder(model, layout)
    return [t for chunk in dec.stream(prompt, n, SamplingParams()) for t in chunk]


def test_cache_input_bucket_shares_the_models_cache(tmp_path):
    layout = CacheLayout(64)
    graph = load_model(write_checkpoint(tmp_path / "v", "llama_gqa", seed=5), layout.n_slots)
    program, _ = export_cache_as_inputs(graph, 1, layout.max_seq, "cpu")
    package = torch._inductor.aoti_compile_and_package(program, package_path=str(tmp_path / "w1.pt2"))
    model = CompiledModel(graph, {})
    model.runners = {1: CacheInputBucket(Package(package), graph)}
    prompt = [7, 3, 99, 12, 5]
    # prefill runs eagerly on the cache buffers; every decode step runs the package on the same tensors
    assert greedy(model, layout, prompt, 24) == greedy(graph, layout, prompt, 24)


def test_tensorrt_backend_needs_cuda(capsys):
    assert main(["compile", "--backend", "tensorrt", "-o", "/nonexistent/b"]) == 2
    assert "add --device cuda" in capsys.readouterr().err
    assert main(["compile", "--backend", "tensorrt", "--device", "cuda", "--opt", "O2", "-o", "/nonexistent/b"]) == 2
    assert "use it with --opt O1" in capsys.readouterr().err


@pytest.mark.cuda
def test_tensorrt_bundle_is_lossless(tmp_path):
    pytest.importorskip("torch_tensorrt")
    from yggc.passes.pipeline import CompileJob, compile_bundle

    from yggc.plan.shape import TreeShape
    from yggc.runtime import Runtime

    v = write_checkpoint(tmp_path / "v", "llama_gqa", seed=11)
    d = write_checkpoint(tmp_path / "d", "llama_gqa", seed=12, base=v, noise=0.03)
    compile_bundle(CompileJob(v, d, tmp_path / "b", TreeShape(3, 2, 5), max_seq=128, device="cuda",
                              profile_repeats=3, backend="tensorrt"), log=lambda m: None)
    rt = Runtime.load(tmp_path / "b")
    prompt = [5, 17, 33, 2, 99]
    ref = greedy(rt.verifier.graph, rt.verifier.layout, prompt, 40)
    assert rt.generate(prompt, 40).tokens == ref
    assert rt.generate(prompt, 40, decoder=rt.decoder(speculative=False)).tokens == ref
