"""tools/gpu/gpu_smoke.py on CPU: the no-CUDA path, imports from the source tree, the report writer, the random
SmolLM2-shaped checkpoint; its cheap GPU sections where CUDA exists."""
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / "tools" / "gpu"
sys.path.insert(0, str(TOOLS))

import gpu_smoke  # noqa: E402
import gpu_smoke_measure  # noqa: E402
import gpu_smoke_report as report  # noqa: E402
from gpu_smoke_report import DecodeRun, Results, Row  # noqa: E402


def smoke_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OUT", "PYTHONPATH")}
    return {**env, **extra}


# -- the no-CUDA path --------------------------------------------------------------------------------
def test_without_cuda_prints_one_line_and_exits_77(tmp_path):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    proc = subprocess.run([sys.executable, str(TOOLS / "gpu_smoke.py")], cwd=tmp_path, capture_output=True, text=True,
                          env=smoke_env(CUDA_VISIBLE_DEVICES="", OUT=str(out_dir)), timeout=120)
    assert proc.returncode == report.EXIT_NO_CUDA == 77
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 and proc.stderr == ""
    assert "skipped" in lines[0] and "CUDA" in lines[0] and torch.__version__ in lines[0]
    assert list(out_dir.iterdir()) == []  # nothing is written when nothing ran


def test_help_documents_the_exit_codes(capsys):
    with pytest.raises(SystemExit) as exit_info:
        gpu_smoke.parse_args(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert "Exit codes: 0" in text and "77 no CUDA device" in text
    for name in gpu_smoke.SECTIONS:
        assert name in text


def test_arguments_are_checked():
    args = gpu_smoke.parse_args(["--sections", "device,smollm2", "--widths", "8,1,8"])
    assert args.sections == ["device", "smollm2"] and args.widths == (1, 8)
    assert gpu_smoke.parse_args([]).sections == [s for s in gpu_smoke.SECTIONS if s not in ("aoti-load-pageout", "aoti-variants")]
    with pytest.raises(SystemExit):
        gpu_smoke.parse_args(["--sections", "device,nope"])


# -- yggc, yggc.graphs and yggc.passes from the source tree -------------------------------------------
CHILD = """
import importlib.util, json, sys
sys.path.insert(0, sys.argv[1])
installed = importlib.util.find_spec("yggc") is not None
import gpu_smoke
gpu_smoke.use_source_tree()
import yggc, yggc.graphs, yggc.passes.pipeline
from yggc.bundle.machine import passes_dirs, passes_hash
print(json.dumps({"installed": installed, "yggc": yggc.__file__, "graphs": yggc.graphs.__file__,
                  "passes_dirs": [str(p) for p in passes_dirs()], "hash": passes_hash(),
                  "same": yggc.graphs is sys.modules["yggc.graphs"] and yggc.passes is sys.modules["yggc.passes"]}))
"""


def test_source_tree_imports_without_install(tmp_path):
    """-S drops site processing, so the editable install's finder is gone: the script alone must make
    yggc, yggc.graphs and yggc.passes importable, and find_spec("yggc.passes") must find ./passes."""
    site_packages = sysconfig.get_paths()["purelib"]
    proc = subprocess.run([sys.executable, "-S", "-c", CHILD, str(TOOLS)], cwd=tmp_path, capture_output=True,
                          text=True, env=smoke_env(PYTHONPATH=site_packages), timeout=300)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["installed"] is False
    assert Path(got["yggc"]) == ROOT / "yggc" / "__init__.py"
    assert Path(got["graphs"]) == ROOT / "graphs" / "__init__.py"
    assert [Path(p) for p in got["passes_dirs"]] == [ROOT / "passes", ROOT / "graphs"] and got["same"]
    from yggc.bundle.machine import passes_hash

    assert got["hash"] == passes_hash() != ""  # the same sources hash the same as the installed package


def test_source_tree_setup_leaves_an_installed_yggc_alone():
    import yggc.graphs
    import yggc.passes

    before = (yggc.graphs, yggc.passes, yggc.passes.__spec__.origin, list(sys.path))
    gpu_smoke.use_source_tree()
    assert (yggc.graphs, yggc.passes, yggc.passes.__spec__.origin, list(sys.path)) == before


# -- table, JSON, exit code -----------------------------------------------------------------------------
def sample_results() -> Results:
    return Results({"gpu": "NVIDIA H100 80GB HBM3", "torch": "2.11.0+cu130"}, [
        Row("device", "CudaGraphRunner replay == direct call", "equal", "PASS", check=True),
        Row("demo-bf16", "yggc-full: TPOT median ms, mean accepted length", "0.812 (3.10x vs ar-eager), 3.51"),
        Row("demo-bf16", "yggc-full tokens == ar-eager", "differs: prompt 1, first at token 17", "FAIL", check=True),
        Row("tensorrt", "torch-tensorrt", "not installed (ModuleNotFoundError: x|y)", "SKIP"),
    ])


def test_table_has_every_row_and_value():
    text = report.table(sample_results())
    lines = text.splitlines()
    assert "gpu: NVIDIA H100 80GB HBM3  " in lines and "| section | item | value | status |" in lines
    assert "| demo-bf16 | yggc-full tokens == ar-eager | differs: prompt 1, first at token 17 | FAIL (check) |" in lines
    assert "| demo-bf16 | yggc-full: TPOT median ms, mean accepted length | 0.812 (3.10x vs ar-eager), 3.51 | INFO |" in lines
    assert r"not installed (ModuleNotFoundError: x\|y)" in text  # a | in a value cannot break the table
    assert sum(line.startswith("| ") for line in lines) == 1 + 4
    assert lines[-1] == "1/2 equality checks passed; failed sections: demo-bf16; exit code 1"


def test_json_round_trips_and_honours_out(tmp_path):
    res = sample_results()
    out = tmp_path / "out"
    paths = report.json_paths(str(tmp_path / "flag.json"), {"OUT": str(out)})
    assert paths == [tmp_path / "flag.json", out / "gpu_smoke.json"]
    assert report.json_paths(None, {}) == [] and report.json_paths(None, {"OUT": ""}) == []
    assert report.write_json(res, paths) == paths
    for p in paths:
        data = json.loads(p.read_text())
        assert data["schema"] == report.SCHEMA and data["exit_code"] == 1
        assert Results.from_dict(data) == res
    with pytest.raises(ValueError, match="schema"):
        Results.from_dict({"schema": "other", "meta": {}, "rows": []})


def test_exit_code_needs_every_check_to_pass():
    ok = [Row("device", "replay", "equal", "PASS", check=True), Row("tensorrt", "t", "not installed", "SKIP")]
    assert report.exit_code(ok) == 0
    assert report.exit_code([*ok, Row("smollm2", "tokens", "differs", "INFO")]) == 0  # not a check
    assert report.exit_code([*ok, Row("demo-fp32", "not run", "time budget", "SKIP", check=True)]) == 1
    assert report.exit_code([*ok, Row("cuda-python", "peak", "missing", "FAIL")]) == 1
    with pytest.raises(ValueError, match="status"):
        Row("x", "y", "z", "OK")


def test_child_rows_survive_a_cut_line_and_a_dead_child(tmp_path):
    path = tmp_path / "rows.jsonl"
    report.append_row(path, Row("demo-bf16", "compile_bundle", "41.0 s"))
    with open(path, "a") as f:
        f.write('{"section": "demo-bf16", "item": "Runtime.lo')  # killed mid-write
    assert report.read_rows(path) == [Row("demo-bf16", "compile_bundle", "41.0 s")]
    assert report.read_rows(tmp_path / "missing.jsonl") == []
    died = report.child_failure_row("demo-bf16", -11, True, 30)
    assert died.status == "FAIL" and died.check and "SIGSEGV" in died.value
    killed = report.child_failure_row("smollm2", None, False, 30)
    assert killed.status == "SKIP" and not killed.check and "time budget" in killed.value


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a child that finds no CUDA")
def test_a_child_that_does_not_finish_its_section_is_a_failed_check(tmp_path):
    """Here the child exits 77 (no CUDA); on the GPU machine a crash lands in the same row."""
    ctx = gpu_smoke.Context(tmp_path, deadline=gpu_smoke.T0 + 10**6)
    rows = gpu_smoke.run_child("device", ctx, [])
    assert len(rows) == 1
    assert (rows[0].section, rows[0].status, rows[0].check) == ("device", "FAIL", True)
    assert rows[0].value.startswith("exited with code 77")
    assert report.exit_code(rows) == 1


def test_decode_rows_report_speed_and_the_first_divergence():
    ref, fast = DecodeRun([2.0, 2.0], [1.0, 1.0]), DecodeRun([0.5, 0.5], [3.5, 3.5])
    fast.compare(0, [1, 2, 3], [1, 2, 3])
    fast.compare(1, [1, 9, 3], [1, 2, 3])
    fast.compare(2, [7], [1, 2, 3])  # only the first divergence is kept
    rows = list(report.decode_rows("demo-bf16", {"ar-eager": ref, "yggc-full": fast}, 3, 3, check=True))
    assert rows[1].value == "0.500 (4.00x vs ar-eager), 3.50"
    assert (rows[2].status, rows[2].check) == ("PASS", True)
    assert rows[3].value == "differs: prompt 1, first at token 1" and rows[3].status == "FAIL"
    info = list(report.decode_rows("smollm2", {"ar-eager": ref, "ar-compiled": fast}, 3, 3, check=False))
    assert info[3].status == "INFO" and not info[3].check
    assert report.first_divergence([1, 2], [1, 2, 3]) == 2 and report.first_divergence([4], [4]) is None


# -- the random SmolLM2-shaped checkpoint ----------------------------------------------------------------
def test_smollm2_config_has_smollm2_135m_shapes():
    from yggc.graphs import ModelConfig

    cfg = json.loads(gpu_smoke.SMOLLM2_CONFIG.read_text())
    mc = ModelConfig.from_hf(cfg)
    assert (mc.hidden_size, mc.n_layers, mc.n_heads, mc.n_kv_heads, mc.head_dim) == (576, 30, 9, 3, 64)
    assert (mc.intermediate_size, mc.vocab_size, mc.rope.theta, mc.rms_norm_eps) == (1536, 49152, 1e5, 1e-5)
    assert mc.tie_word_embeddings and mc.max_position_embeddings == 8192
    n = sum(torch.Size(s).numel() for s in gpu_smoke_measure.hf_shapes(cfg).values())
    assert n == 134_515_008  # SmolLM2-135M's parameter count


def test_random_checkpoint_loads_into_the_graph(tmp_path):
    from yggc.graphs import load_model

    cfg = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 2, "intermediate_size": 96, "vocab_size": 300, "rope_theta": 100000,
           "rms_norm_eps": 1e-5, "tie_word_embeddings": True, "max_position_embeddings": 512, "hidden_act": "silu"}
    path = gpu_smoke_measure.write_random_llama(cfg, tmp_path / "rand", seed=3)
    model = load_model(path, 33, torch.bfloat16)
    assert sum(p.numel() for p in model.parameters()) == sum(torch.Size(s).numel()
                                                             for s in gpu_smoke_measure.hf_shapes(cfg).values())
    assert model.lm_head.weight is model.embed.weight and torch.equal(model.norm.weight, torch.ones(64, dtype=torch.bfloat16))
    assert 0.015 < model.layers[1].mlp.w2.weight.float().std().item() < 0.025
    ids = torch.arange(4)
    logits = model(ids, ids, ids, torch.arange(8)[None, :] <= ids[:, None])
    assert logits.shape == (4, 300) and torch.isfinite(logits).all()
    again = gpu_smoke_measure.write_random_llama(cfg, tmp_path / "again", seed=3)
    assert (again / "model.safetensors").read_bytes() == (path / "model.safetensors").read_bytes()


# -- on a GPU: the cheap sections end to end -------------------------------------------------------------
@pytest.mark.cuda
def test_device_and_cuda_python_sections_pass(tmp_path):
    out = tmp_path / "smoke.json"
    code = gpu_smoke.main(["--sections", "device,cuda-python", "--json", str(out), "--work", str(tmp_path / "w")])
    res = Results.from_dict(json.loads(out.read_text()))
    assert code == report.exit_code(res.rows) == 0, report.table(res)
    checks = [r for r in res.rows if r.check]
    assert [r.status for r in checks] == ["PASS"] and {r.section for r in res.rows} == {"device", "cuda-python"}


@pytest.mark.slow
def test_aoti_load_section_on_cpu_loads_calls_and_matches_eager(tmp_path):
    import gpu_smoke_load

    rows = list(gpu_smoke_load.sec_aoti_load(gpu_smoke_measure.Context(tmp_path), pageout_all=False, device="cpu"))
    assert [r.item for r in rows] == [
        "lowered tiny Llama W=1,2 (cpu)", "load package W=1, bind the weights", "call W=1 == eager",
        "load package W=2 (no capture in between)", "CompiledModel over both packages == eager"]
    assert [r.status for r in rows if r.check] == ["PASS", "PASS"]



# -- aoti-variants: each package loaded in a process of its own, a crash reported with native frames --------
import gpu_smoke_variants  # noqa: E402

needs_cc = pytest.mark.skipif(gpu_smoke_variants.shutil.which("cc") is None and
                              gpu_smoke_variants.shutil.which("gcc") is None, reason="no C compiler")


@needs_cc
def test_backtrace_helper_reports_a_segfault_with_native_frames(tmp_path):
    preload = gpu_smoke_variants.backtrace_library(tmp_path)
    crash = subprocess.run([sys.executable, "-c", "import ctypes; ctypes.string_at(0)"], capture_output=True,
                           text=True, env=smoke_env(LD_PRELOAD=str(preload)), timeout=60)
    assert crash.returncode == -11
    frames = gpu_smoke_variants.native_frames(crash.stderr)
    assert frames.startswith("signal SIGSEGV at address 0x0000000000000000 | ")
    assert "_ctypes" in frames and "segv_backtrace" not in frames


def test_native_frames_is_empty_without_a_report():
    assert gpu_smoke_variants.native_frames("Fatal Python error: Segmentation fault\n") == ""


@needs_cc
def test_a_crashing_load_is_one_fail_row_naming_the_constructor(tmp_path, monkeypatch):
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "package.pt2").write_bytes(b"")  # no package: the child exits with an error before constructing
    monkeypatch.setattr(gpu_smoke_variants, "LOAD_TIMEOUT_S", 120)
    row = gpu_smoke_variants.run_loader(folder, "cpu", gpu_smoke_variants.backtrace_library(tmp_path))
    assert row.status == "FAIL" and row.item == "broken: load + call"
    assert row.value.startswith("exit 1 in the loader's constructor; no native frames")


@pytest.mark.slow
def test_aoti_variants_on_cpu_load_in_a_child_and_match_eager(tmp_path):
    """yggc's O1 bucket through the variant machinery (the Linear variants share its loading child)."""
    rows = list(gpu_smoke_variants.sec_aoti_variants(gpu_smoke_measure.Context(tmp_path), "cpu", ("llama-o1",)))
    assert [r.item for r in rows] == ["llama-o1: lowered", "llama-o1: load + call == eager"]
    assert rows[1].status == "PASS"


def test_the_toolchain_row_names_a_fallback_compiler_and_hands_it_to_the_sections(monkeypatch):
    from yggc.passes import toolchain

    from yggc.errors import YggcError

    monkeypatch.setenv("CXX", "unchanged")
    monkeypatch.setattr(toolchain, "configured_compiler", lambda: "/opt/gcc/bin/g++")
    monkeypatch.setattr(toolchain, "loadable_compiler", lambda device, log: "/usr/bin/g++")
    row = gpu_smoke.toolchain_row()
    assert (row.status, row.value) == ("PASS", "/usr/bin/g++ (packages built by CXX=/opt/gcc/bin/g++ do not load)")
    assert os.environ["CXX"] == "/usr/bin/g++"  # what the section children build with

    def none_loads(device, log):
        raise YggcError("no C++ compiler here builds packages torch 2.11.0 can load on cuda (g++: SIGSEGV)")

    monkeypatch.setattr(toolchain, "loadable_compiler", none_loads)
    row = gpu_smoke.toolchain_row()
    assert row.status == "FAIL" and row.value.startswith("no C++ compiler here builds packages")
