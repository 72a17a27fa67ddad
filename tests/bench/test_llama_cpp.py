"""The llama.cpp rows of `yggc bench`: the error when llama-cpp-python is missing, the GGUF export cache, the
sampler settings, and, where llama-cpp-python is installed (an optional extra, never in CI), the rows for real:
llama.cpp's greedy decoding of the exported F32 demo verifier equals yggc's."""
import argparse
import sys

import pytest
import torch
from gguf_files import write_gguf

from yggc.bench.harness import skip_reason
from yggc.bench.llama_cpp import cached_gguf, gguf_weight_type, llama_cpp_row, row_gguf, sampler_kwargs
from yggc.bench.runners import yggc_runner
from yggc.bench.suite import BenchConfig
from yggc.cli import main
from yggc.errors import YggcError
from yggc.runtime import loading
from yggc.runtime.autoregressive import AutoregressiveDecoder
from yggc.tree.sampling import SamplingParams

DEMO_VERIFIER = loading.demo_pair_dirs()[0]


def test_missing_llama_cpp_is_one_error_line(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # `import llama_cpp` raises ImportError
    assert main(["bench", "--quick", "--rows", "yggc-ar-eager,llama.cpp"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["yggc: error: the llama.cpp rows need llama-cpp-python: pip install 'yggc[llama-cpp]' (it builds "
                   "llama.cpp from source, a few minutes), or leave llama.cpp,llama.cpp-gguf out of --rows"]


def test_llama_cpp_gguf_needs_a_file(tmp_path):
    cfg = BenchConfig(verifier=tmp_path, drafter=None, rows=("llama.cpp", "llama.cpp-gguf"))
    assert skip_reason("llama.cpp-gguf", cfg) == "needs a GGUF file (--gguf FILE, or -m MODEL.gguf)"
    assert skip_reason("llama.cpp", cfg) is None
    cfg.gguf = tmp_path / "m.gguf"
    assert skip_reason("llama.cpp-gguf", cfg) is None
    with pytest.raises(YggcError, match=r"--gguf .*m.gguf is not a file; pass the GGUF file llama.cpp-gguf should"):
        row_gguf("llama.cpp-gguf", cfg)
    cfg.gguf.write_bytes(b"GGUF")
    assert row_gguf("llama.cpp-gguf", cfg) == cfg.gguf


def test_bench_takes_a_gguf_verifier_as_the_llama_cpp_gguf_file(tmp_path, monkeypatch):
    from yggc.cli.bench import add_bench_args, make_config

    monkeypatch.setattr(loading, "GGUF_CACHE", tmp_path / "cache")
    path = write_gguf(DEMO_VERIFIER, tmp_path / "demo.gguf")
    parser = argparse.ArgumentParser()
    add_bench_args(parser)
    cfg = make_config(parser.parse_args(["-m", str(path), "--rows", "llama.cpp-gguf"]))
    assert cfg.gguf == path and cfg.verifier.parent == tmp_path / "cache"  # imported for the other rows
    other = tmp_path / "q.gguf"
    assert make_config(parser.parse_args(["-m", str(path), "--gguf", str(other)])).gguf == other


def test_sampler_settings():
    assert sampler_kwargs(SamplingParams(0.0)) == {"temp": 0.0}
    assert sampler_kwargs(SamplingParams(0.7, seed=3)) == {"temp": 0.7, "top_k": 0, "top_p": 1.0, "min_p": 0.0,
                                                          "typical_p": 1.0}


def test_each_model_and_dtype_is_exported_once(tmp_path, capsys):
    f32 = cached_gguf(DEMO_VERIFIER, tmp_path, "float32")
    bf16 = cached_gguf(DEMO_VERIFIER, tmp_path, "bfloat16")
    assert f32 != bf16 and f32.name.endswith("-F32.gguf") and bf16.name.endswith("-BF16.gguf")
    assert (gguf_weight_type(f32), gguf_weight_type(bf16)) == ("F32", "BF16")
    stamp = f32.stat().st_mtime_ns
    assert cached_gguf(DEMO_VERIFIER, tmp_path, "float32") == f32 and f32.stat().st_mtime_ns == stamp
    assert capsys.readouterr().err.count("exporting") == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f32.name, bf16.name])  # nothing half-written


def test_llama_cpp_greedy_equals_yggc_on_the_f32_export(tmp_path):
    pytest.importorskip("llama_cpp")
    cfg = BenchConfig(verifier=DEMO_VERIFIER, drafter=None, rows=("llama.cpp",), max_seq=256, bundle_cache=tmp_path / "b")
    row = llama_cpp_row("llama.cpp", cfg)
    assert row.runs_as.endswith("F32 GGUF")
    verifier = loading.load(DEMO_VERIFIER, torch.float32, 256)
    ar = yggc_runner(AutoregressiveDecoder(verifier.graph, verifier.layout))
    greedy = SamplingParams(0.0)
    for prompt in ([5, 17, 3, 250, 42], [100, 7, 7, 900, 12, 64, 3]):
        want = ar(prompt, 32, greedy).tokens
        got = row.run(prompt, 32, greedy)
        assert got.tokens == want and got.per_iter == [1] * 31 and got.tpot_ms > 0
    sampled = [row.run([5, 17, 3], 16, SamplingParams(1.0, seed=s)).tokens for s in (1, 1, 2)]
    assert sampled[0] == sampled[1] != sampled[2]  # seeded like the other rows
