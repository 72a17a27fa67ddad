"""The openvino rows of `yggc bench` without OpenVINO: the error when it is missing, that other rows never import
it, the IR export (command, cache, missing exporter) and the conversion of OpenVINO's results and settings.

tests/bench/test_openvino_export.py runs the rows for real where openvino-genai and optimum-cli are installed.
"""
import builtins
import importlib.util
import stat
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from yggc.bench.harness import skip_reason
from yggc.bench.openvino import device_config, encoded_result, generation_kwargs, inference_precision
from yggc.bench.openvino_ir import cached_ir, export_command, weight_format
from yggc.bench.suite import DEFAULT_ROWS, LLAMA_CPP_ROWS, OPENVINO_ROWS, BenchConfig
from yggc.cli import main
from yggc.errors import YggcError
from yggc.tree.sampling import SamplingParams

ROOT = Path(__file__).resolve().parents[2]


def test_missing_openvino_genai_is_one_error_line(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "openvino_genai", None)  # `import openvino_genai` raises ImportError
    assert main(["bench", "--quick", "--rows", "yggc-ar-eager,openvino"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["yggc: error: the openvino rows need openvino-genai: pip install 'yggc[openvino]', "
                   "or leave openvino,openvino-spec out of --rows"]


def test_rows_not_requested_never_import_openvino_or_llama_cpp(monkeypatch, capsys):
    real_import, tried = builtins.__import__, []

    def guarded(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0 and name.split(".")[0] in ("openvino", "openvino_genai", "llama_cpp"):
            tried.append(name)
            raise ImportError(f"{name} is blocked in this test")
        return real_import(name, globals, locals, fromlist, level)

    monkeypatch.setattr(builtins, "__import__", guarded)
    assert main(["bench", "--quick", "--rows", "yggc-ar-eager", "-n", "8", "--prompts", "1"]) == 0
    assert tried == []
    assert "| yggc-ar-eager |" in capsys.readouterr().out
    assert not (OPENVINO_ROWS | LLAMA_CPP_ROWS).intersection(DEFAULT_ROWS)  # the default rows need no extra


def test_openvino_spec_needs_a_drafter_or_its_ir(tmp_path):
    cfg = BenchConfig(verifier=tmp_path, drafter=None, rows=("openvino-spec",))
    assert skip_reason("openvino-spec", cfg) == "needs a drafter (-md)"
    cfg.openvino_draft_ir = tmp_path / "draft-ir"
    assert skip_reason("openvino-spec", cfg) is None
    assert skip_reason("openvino", cfg) is None


def test_export_command():
    assert export_command(Path("/m/v"), Path("/ir/out"), "fp16", "/venv/bin/optimum-cli") == [
        "/venv/bin/optimum-cli", "export", "openvino", "--model", "/m/v", "--task", "text-generation-with-past",
        "--weight-format", "fp16", "/ir/out"]
    with pytest.raises(YggcError, match="--weight-format must be one of fp16, fp32"):
        export_command(Path("v"), Path("o"), "int4")
    assert weight_format("float32") == "fp32" and weight_format("bfloat16") == "fp16"


def fake_checkpoint(path: Path, weights: bytes) -> Path:
    path.mkdir()
    (path / "config.json").write_text("{}")
    (path / "model.safetensors").write_bytes(weights)
    return path


def fake_optimum_cli(tmp_path: Path) -> Path:
    """Records each call's arguments and writes an IR's two files into the folder named last."""
    script = tmp_path / "optimum-cli"
    log = tmp_path / "calls.txt"
    script.write_text(f'#!/bin/sh\necho "$@" >> {log}\nfor out; do :; done\nmkdir -p "$out"\n'
                      'touch "$out/openvino_model.xml" "$out/openvino_model.bin"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_the_bench_exports_each_model_and_format_once(tmp_path, capsys):
    cli = fake_optimum_cli(tmp_path)
    a, b = fake_checkpoint(tmp_path / "a", b"one"), fake_checkpoint(tmp_path / "b", b"two")
    cache = tmp_path / "openvino"
    ir = cached_ir(a, cache, "fp16", cli)
    assert ir.parent == cache and ir.name.endswith("-fp16") and (ir / "openvino_model.xml").is_file()
    assert "exporting" in capsys.readouterr().err
    assert cached_ir(a, cache, "fp16", cli) == ir  # cached: not exported again
    assert cached_ir(a, cache, "fp32", cli) != ir
    assert cached_ir(b, cache, "fp16", cli) != ir
    calls = (tmp_path / "calls.txt").read_text().splitlines()
    assert len(calls) == 3
    assert calls[0] == f"export openvino --model {a} --task text-generation-with-past --weight-format fp16 {ir}.part"
    assert not list(cache.glob("*.part"))


def load_tool():
    spec = importlib.util.spec_from_file_location("export_openvino", ROOT / "tools" / "export_openvino.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_export_tool_without_optimum_cli_says_how_to_install_it(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("YGGC_OPTIMUM_CLI", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    tool = load_tool()
    assert tool.main([str(tmp_path), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "optimum-cli is not installed" in err[0]
    assert "pip install 'optimum-intel[openvino]'" in err[0]
    assert tool.main([str(tmp_path), str(tmp_path / "out"), "--optimum-cli", str(tmp_path / "nope")]) == 2
    assert f"{tmp_path / 'nope'} is not an executable" in capsys.readouterr().err


def test_export_tool_runs_the_exporter(tmp_path, capsys):
    cli = fake_optimum_cli(tmp_path)
    tool = load_tool()
    out = tmp_path / "ir"
    assert tool.main([str(tmp_path / "model"), str(out), "--weight-format", "fp32", "--optimum-cli", str(cli)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert (tmp_path / "calls.txt").read_text().split()[-3:] == ["--weight-format", "fp32", str(out)]


def fake_encoded_results(tokens: list[int], tpot: float, batch_sizes: list[int]):
    metrics = SimpleNamespace(get_tpot=lambda: SimpleNamespace(mean=tpot, std=0.5),
                              raw_metrics=SimpleNamespace(m_batch_sizes=batch_sizes))
    return SimpleNamespace(tokens=[tokens], perf_metrics=metrics)


def test_result_from_openvino_perf_metrics():
    ar = encoded_result(fake_encoded_results([5, 6, 7, 8], 12.5, [1, 1, 1, 1]))
    assert (ar.tokens, ar.tpot_ms, ar.per_iter) == ([5, 6, 7, 8], 12.5, [1, 1, 1])
    # speculative: the first step is the prompt's token, then accepted + 1 per verify step
    spec = encoded_result(fake_encoded_results(list(range(10)), 20.0, [1, 3, 1, 5]))
    assert spec.per_iter == [3, 1, 5] and sum(spec.per_iter) + 1 == len(spec.tokens)


def test_generation_settings():
    assert generation_kwargs(32, SamplingParams()) == {"max_new_tokens": 32, "ignore_eos": True, "do_sample": False}
    sampled = generation_kwargs(16, SamplingParams(temperature=0.7, seed=3), assistant_tokens=5)
    assert sampled == {"max_new_tokens": 16, "ignore_eos": True, "do_sample": True, "temperature": 0.7, "top_k": 0,
                       "top_p": 1.0, "rng_seed": 3, "num_assistant_tokens": 5}
    assert device_config("float32", 2, ["FP32"]) == {
        "INFERENCE_NUM_THREADS": 2, "INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
    assert device_config("bfloat16", 1, ["FP32", "INT8"])["KV_CACHE_PRECISION"] == "f16"
    assert device_config("bfloat16", 1, ["FP32", "BF16"])["KV_CACHE_PRECISION"] == "bf16"
    assert device_config("bfloat16", 1, ["FP32"])["INFERENCE_PRECISION_HINT"] == "bf16"
    assert inference_precision("bfloat16", ["FP32", "INT8"]) == "f32"
    assert inference_precision("bfloat16", ["FP32", "BF16"]) == "bf16"
    assert inference_precision("float32", ["FP32", "BF16"]) == "f32"
