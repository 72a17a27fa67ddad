"""Compiled bundles: lossless like eager, loaded without compiling, atomic to write, strict to load."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from checkpoints import TEXT, write_checkpoint
from yggc.passes.calibrate import CalibrationSpec
from yggc.passes.decode_check import MIN_SPEEDUP
from yggc.passes.pipeline import CompileJob, compile_bundle

from yggc.cli.main import main
from yggc.errors import YggcError
from yggc.plan.shape import TreeShape
from yggc.runtime import Runtime
from yggc.runtime.autoregressive import AutoregressiveDecoder
from yggc.tree.sampling import SamplingParams

pytestmark = pytest.mark.slow  # compiles bundles: scheduled first (tests/conftest.py)

SHAPE = TreeShape(3, 2, 5)
CHAT = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}[assistant] {% endif %}"


@pytest.fixture(scope="module")
def pair_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("cpair")
    v = write_checkpoint(root / "v", "llama_gqa", seed=11)
    (v / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|endoftext|>", "chat_template": CHAT}))
    return v, write_checkpoint(root / "d", "llama_gqa", seed=12, base=v, noise=0.03)


@pytest.fixture(scope="module")
def bundle(pair_dirs, tmp_path_factory):
    """Compiled through the calibrate and choose-shape passes; the pinned depth and verify width leave
    SHAPE as the only candidate, so the tests below know the plan."""
    root = tmp_path_factory.mktemp("b")
    (root / "calib.txt").write_text("".join(TEXT) * 3)
    lines = []
    compile_bundle(calibrated_job(pair_dirs, root, root / "bundle"), log=lines.append)
    (root / "compile.log").write_text("\n".join(lines))
    return root / "bundle"


def calibrated_job(pair_dirs, root: Path, out: Path) -> CompileJob:
    calib = CalibrationSpec((root / "calib.txt",), n_prompts=2, prompt_tokens=16, new_tokens=24,
                            max_depth=SHAPE.depth, widths=(1, 2), pin_depth=SHAPE.depth, pin_verify=SHAPE.verify,
                            temperature=0.8, probe=False)  # no probe widths: four O1 packages fewer to compile
    return CompileJob(*pair_dirs, out, None, max_seq=128, profile_repeats=3, calib=calib)


def test_compiling_again_takes_every_package_from_the_cache(pair_dirs, bundle, tmp_path, monkeypatch):
    """The fixture's compile kept its packages (passes/package_cache.py) and took the drafter's forward buckets from
    the verifier's (one architecture; O1 packages hold no weights); the same job again lowers nothing and writes
    the same packages, which decode as the verifier alone does."""
    first = (bundle.parent / "compile.log").read_text().splitlines()[-1]
    assert int(first.split(" (")[1].split()[0]) >= 2 and "packages from" in first  # the drafter's W=1 and W=32

    def lowering(*args, **kwargs):
        raise AssertionError("lowered a package the cache holds")

    monkeypatch.setattr(torch._inductor, "aoti_compile_and_package", lowering)
    lines = []
    again = compile_bundle(calibrated_job(pair_dirs, bundle.parent, tmp_path / "again"), log=lines.append)
    packages = sorted((bundle / "artifacts").glob("*.pt2"))
    assert f"({len(packages)} packages from " in lines[-1]
    assert all((again / "artifacts" / p.name).read_bytes() == p.read_bytes() for p in packages)
    rt = Runtime.load(again)
    prompt = [5, 17, 240, 3, 99]
    assert rt.generate(prompt, 32).tokens == eager_ar(rt, prompt, 32)


def eager_ar(rt, prompt, n):
    dec = AutoregressiveDecoder(rt.verifier.graph, rt.verifier.layout)
    return [t for c in dec.stream(prompt, n, SamplingParams()) for t in c]


def test_compiled_decoding_is_lossless(bundle):
    import yggc

    rt = yggc.Runtime.load(bundle)
    assert set(rt.compiled["verifier"].runners) == {1, 32, SHAPE.verify + 1}
    assert set(rt.draft_runners) == {(SHAPE.depth, SHAPE.width)}  # the fused phases are used
    assert set(rt.verify_runners) == {(SHAPE.depth, SHAPE.width, SHAPE.verify)}
    for seed in range(3):
        prompt = torch.randint(1, 301, (5 + 9 * seed,), generator=torch.Generator().manual_seed(seed)).tolist()
        ref = eager_ar(rt, prompt, 48)
        assert rt.generate(prompt, 48).tokens == ref  # the plan's tree through compiled buckets
        assert rt.generate(prompt, 48, decoder=rt.decoder(speculative=False)).tokens == ref
        for shape in (TreeShape(4, 1, 4), TreeShape(2, 2, 4)):  # compiled drafter widths, other verify widths
            assert rt.generate(prompt, 48, decoder=rt.decoder(shape=shape)).tokens == ref
    assert rt.last_stats.n_iterations > 0


def test_suffix_branches_beside_the_fused_draft_phase_are_lossless(bundle):
    """The O1 draft phase drafts, suffix branches join its tree, the verifier scores the merged tree (its packages
    where it has the width): the output is AR's, and paths through the branches are caught up by the drafter."""
    rt = Runtime.load(bundle)
    phrase = torch.randint(1, 301, (7,), generator=torch.Generator().manual_seed(3)).tolist()
    prompt = phrase + [1] + phrase + [2] + phrase
    ref = eager_ar(rt, prompt, 48)
    dec = rt.decoder(speculative=True, suffix_branches=True, adaptive=False)
    assert rt.generate(prompt, 48, decoder=dec).tokens == ref
    assert dec.proposer.model.phases.run is rt.draft_runners[(SHAPE.depth, SHAPE.width)] and rt.iteration_ms is not None
    assert dec.stats.n_accept > 0


def test_runtime_takes_chat_messages(bundle):
    import yggc

    rt = yggc.Runtime.load(bundle)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "def add(a, b):"}]
    assert rt.verifier.chat.render(messages) == "[system] Be brief.\n[user] def add(a, b):\n[assistant] "
    chat = rt.generate(messages=messages, max_new_tokens=24)
    assert chat.tokens == rt.generate(rt.verifier.chat.render(messages), 24).tokens
    assert "".join(rt.stream(messages=messages, max_new_tokens=24)) == chat.text
    with pytest.raises(YggcError, match="not both"):
        rt.generate("def", messages=messages)
    with pytest.raises(YggcError, match="role"):
        rt.generate(messages=[{"role": "robot", "content": "hi"}])


def test_plan_and_calibration_are_recorded(bundle):
    plan = json.loads((bundle / "plan.json").read_text())
    calib = json.loads((bundle / "calibration.json").read_text())
    assert (plan["depth"], plan["width"], plan["verify"], plan["source"]) == (3, 2, 5, "calibration")
    assert [(c["depth"], c["width"], c["verify"]) for c in plan["candidates"]] == [(3, 2, 5)]
    best = plan["objective"]
    assert 1.0 <= best["tokens_per_iter"] <= 1 + SHAPE.depth and best["speedup"] > 0
    assert best["ms_per_token"] == pytest.approx(best["iteration_ms"] / best["tokens_per_iter"], rel=1e-3)
    assert calib["files"][0]["name"] == "calib.txt" and calib["n_prompts"] == 2
    assert set(calib["n_trees"]) == {"1", "2"} and min(calib["n_trees"].values()) > 0
    assert all(0.0 <= p <= 1.0 for rates in calib["acceptance_by_depth"].values() for p in rates)


def test_sampling_plan_is_recorded_and_serves_requests_at_temperature(bundle):
    """--temp: a second calibration by sampling prices the shapes for T > 0 requests; those use its plan."""
    plan = json.loads((bundle / "plan.json").read_text())["sampling"]
    calib = json.loads((bundle / "calibration.json").read_text())["sampling"]
    assert plan["temperature"] == calib["temperature"] == 0.8
    assert (plan["depth"], plan["width"], plan["verify"]) == (3, 2, 5)  # the pinned flags bind it too
    assert 1.0 <= plan["objective"]["tokens_per_iter"] <= 1 + SHAPE.depth and isinstance(plan["speculate"], bool)
    assert set(plan["host_ms_per_step"]) == set(calib["iteration_ms"]) == {"1", "2"}  # chains were decoded too
    assert min(calib["n_trees"].values()) > 0
    rt = Runtime.load(bundle)
    assert rt.sampling_plan == (SHAPE, plan["speculate"])
    assert plan["speculate"] == (plan["decoded"]["speedup"] > MIN_SPEEDUP) and plan["decoded"]["tokens"] > 0
    rt.sampling_plan = (TreeShape(2, 2, 4), True)  # a plan whose shape differs from the greedy one
    assert rt.decoder(sampling=True).shape == TreeShape(2, 2, 4) and rt.decoder(speculative=True).shape == SHAPE
    prompt = [5, 17, 33, 2, 9]
    got = rt.generate(prompt, 24, temperature=0.8, seed=3).tokens
    assert got == rt.generate(prompt, 24, temperature=0.8, seed=3, decoder=rt.decoder(shape=TreeShape(2, 2, 4))).tokens


def test_compiled_logits_match_eager(bundle):
    rt = Runtime.load(bundle)
    slots = torch.arange(6)
    mask = torch.arange(128)[None, :] <= slots[:, None]
    ids = torch.tensor([3, 1, 4, 1, 5, 9])
    runner = rt.compiled["verifier"].runners[SHAPE.verify + 1]
    got = runner(ids, slots.clone(), slots.clone(), mask)
    want = rt.verifier.graph(ids, slots.clone(), slots.clone(), mask)
    assert got.shape == want.shape and (got - want).abs().max().item() < 1e-4


def test_load_in_fresh_process_does_not_compile(bundle):
    code = (
        "import json, sys\n"
        "from torch._dynamo.utils import counters\n"
        "from yggc.runtime import Runtime\n"
        "import time; t = time.perf_counter()\n"
        f"rt = Runtime.load({str(bundle)!r})\n"
        "out = rt.generate([5, 6, 7], 16)\n"
        "print(json.dumps({'inductor': dict(counters['inductor']), 'aot': dict(counters['aot_autograd']),"
        " 'n': len(out.tokens), 'first_token_s': time.perf_counter() - t}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["n"] == 16 and res["inductor"] == {} and res["aot"] == {}


def test_cli_run_and_inspect(bundle, capsys):
    tree = ["--depth", "3", "--width", "2", "--verify", "5"]  # forces the tree whatever the plan's verdict
    assert main(["run", str(bundle), "--prompt-ids", "5,6,7", "-n", "12", "--json", *tree]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["n_generated"] == 12 and res["mean_accepted_length"] >= 1.0
    assert main(["inspect", str(bundle)]) == 0
    out = capsys.readouterr().out
    assert "verifier_w6" in out and "cost curve" in out and "plan: depth 3, width 2, verify 5" in out
    assert "draft phase (one call)" in out and "verify phase (one call)" in out
    assert "measured: " in out and "decoded calibration text: " in out and "speculation" in out
    assert "stage plan: sequential on shared cores, D=3 W=2 V=5" in out
    assert "sampling plan (T=0.8, used by requests at T > 0): D=" in out
    assert "estimate / measured draft+verify phases" in out
    for stage in ("head", "draft1", "draft2", "prune", "verify", "accept", "compact"):
        assert f"cores   {stage}\n" in out
    png = bundle.parent / "timeline.png"
    assert main(["inspect", str(bundle), "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_run_trace_times_iterations_beside_the_plan(bundle, tmp_path, capsys):
    out = tmp_path / "trace.json"
    tree = ["--depth", "3", "--width", "2", "--verify", "5", "--no-suffix"]  # suffix branches vary the verify width
    assert main(["run", str(bundle), "--prompt-ids", "5,6,7", "-n", "12", "--json", "--trace", str(out), *tree]) == 0
    res = json.loads(capsys.readouterr().out)
    events = json.loads(out.read_text())["traceEvents"]
    iterations = [e for e in events if e["name"] == "iteration"]
    assert len(iterations) == res["n_iterations"] == res["trace"]["iterations"]
    calls = {e["name"] for e in events if e.get("tid") == 3 and e["pid"] == 1}
    assert {"draft phase", "verify phase"} <= calls  # O1: each phase is one compiled call
    planned = [e["name"] for e in events if e["pid"] == 2 and e["ph"] == "X"]
    assert planned[:7] == ["head", "draft1", "draft2", "prune", "verify", "accept", "compact"]
    t = res["trace"]
    assert 0 < t["model_ms"] <= t["iteration_ms"] and t["host_bubble_ms"] >= 0
    # O1: a phase's host time is what builds its package's inputs and reads its outputs, around the one call
    assert 0 <= t["draft_host_ms"] < t["draft_ms"] and 0 <= t["verify_host_ms"] < t["verify_ms"]
    assert main(["run", str(bundle), "--prompt-ids", "5,6,7", "--no-spec", "--trace", str(out)]) == 2
    assert "--trace times speculative iterations" in capsys.readouterr().err


def test_tampered_bundle_is_refused(bundle, tmp_path, capsys):
    import shutil

    copy = tmp_path / "b"
    shutil.copytree(bundle, copy)
    with open(copy / "artifacts" / "drafter_w2.pt2", "r+b") as f:
        f.seek(100)
        f.write(b"\x00\x01\x02")
    with pytest.raises(YggcError, match="drafter_w2.pt2 is corrupted"):
        Runtime.load(copy)
    assert main(["run", str(copy), "-p", "x"]) == 2
    assert "re-run `yggc compile`" in capsys.readouterr().err


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killed_compile_leaves_no_bundle(pair_dirs, tmp_path, sig):
    out = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "yggc.cli", "compile", "-m", str(pair_dirs[0]), "-md",
                             str(pair_dirs[1]), "-o", str(out), "--max-seq", "64", "--depth", "2", "--width", "3",
                             "--opt", "O1"],  # O1: its first package is written sooner than O2's
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", "YGGC_PACKAGE_CACHE": "off"})  # lowers all
    # SIGTERM once a package is written (mid-compile, where Inductor once swallowed the signal's exception);
    # SIGKILL as soon as the checkpoint copies are in the partial directory
    written = "artifacts/*.pt2" if sig == signal.SIGTERM else "verifier/config.json"
    deadline = time.time() + 120
    while time.time() < deadline and not any(tmp_path.glob(f".killed.partial-*/{written}")):
        time.sleep(0.2)
    proc.send_signal(sig)
    proc.wait()
    assert not out.exists()
    if sig == signal.SIGTERM:  # a catchable signal: the writer removed its own partial directory
        assert list(tmp_path.iterdir()) == []
    from yggc.passes.write_bundle import clean_stale_partials

    clean_stale_partials(out)
    assert list(tmp_path.iterdir()) == []


def test_profile_follows_schema(bundle):
    profile = json.loads((bundle / "profile.json").read_text())
    schema = json.loads((Path(__file__).parents[2] / "profiles" / "schema.json").read_text())
    assert profile["schema"] == schema["properties"]["schema"]["const"]
    assert set(schema["required"]) <= set(profile)
    for name in ("verifier", "drafter"):
        entry = profile["models"][name]
        curve_schema = schema["properties"]["models"]["additionalProperties"]["properties"]["cost_curve"]
        assert set(entry["cost_curve"]) == set(curve_schema["properties"])
        assert entry["cost_curve"]["n_experts"] == entry["cost_curve"]["top_k"] == 0  # a dense pair
        widths = {int(w) for w in entry["bucket_ms"]}
        assert widths == {b["width"] for b in json.loads((bundle / "manifest.json").read_text())["buckets"]
                          if b["model"] == name and b["kind"] == "forward"}
    context = profile["context_ms"]
    verifier_widths = sorted(int(w) for w in profile["models"]["verifier"]["bucket_ms"])
    max_seq = json.loads((bundle / "manifest.json").read_text())["max_seq"]
    assert context["contexts"] == [profile["context"], max_seq - 1]
    assert set(context["ms"]) == set(context["attention_share"]) == {str(verifier_widths[0]), str(verifier_widths[-1])}
    assert all(0 <= v <= 1 for v in context["attention_share"].values())
    assert set(profile["host_ms"]) == {"prune", "tree_mask", "accept_greedy", "compact_kv"}
    assert set(profile["phase_ms"]) == {"draft", "verify"}
    plan = json.loads((bundle / "plan.json").read_text())  # the calls timed in turn with the phases:
    assert {model: set(ms) for model, ms in profile["phase_calls_ms"].items()} == {
        "verifier": {"1", str(plan["verify"] + 1)}, "drafter": {"2", str(plan["width"])}}


def test_profile_command_plots(bundle, tmp_path, capsys):
    out = tmp_path / "curves.png"
    assert main(["profile", str(bundle), "--plot", str(out)]) == 0
    assert "verifier cost curve" in capsys.readouterr().out
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("shape", [SHAPE, TreeShape(3, 1, 3)])
def test_compiled_sampling_follows_eager_sampling(bundle, shape):
    """Same seed, same tokens: the compiled sampling path is the eager one (whose distribution is tested)."""
    from yggc.runtime.drafters import speculative_decoder

    rt = Runtime.load(bundle)
    eager = speculative_decoder(rt.verifier.graph, rt.drafter.graph, rt.verifier.layout, shape)
    for seed in range(3):
        kw = {"temperature": 1.0, "seed": seed}
        got = rt.generate([5, 6, 7], 24, decoder=rt.decoder(shape=shape), **kw).tokens
        assert got == rt.generate([5, 6, 7], 24, decoder=eager, **kw).tokens


def test_plan_verdict_picks_the_default_decoder(bundle):
    """A plan whose tree lost to plain decoding makes the default decoder autoregressive; an explicit
    shape or speculative=True still runs the tree."""
    from yggc.runtime.speculative import SpeculativeDecoder

    rt = Runtime.load(bundle)
    plan = json.loads((bundle / "plan.json").read_text())
    decoded = plan["decoded"]
    assert rt.speculate == plan["speculate"] == (decoded["speedup"] > MIN_SPEEDUP)
    assert decoded["speedup"] == pytest.approx(decoded["ar_tpot_ms"] / decoded["tree_tpot_ms"], rel=2e-3)
    assert decoded["tokens"] > 0
    rt.speculate = False
    assert isinstance(rt.decoder(), AutoregressiveDecoder)
    assert isinstance(rt.decoder(shape=SHAPE), SpeculativeDecoder)
    assert isinstance(rt.decoder(speculative=True), SpeculativeDecoder)
    rt.speculate = True
    assert isinstance(rt.decoder(), SpeculativeDecoder)
    assert isinstance(rt.decoder(speculative=False, shape=SHAPE), AutoregressiveDecoder)


@pytest.mark.parametrize("speculative", [True, False])
def test_a_follow_up_turn_reuses_the_caches_and_equals_a_cold_start(bundle, speculative):
    from test_prompt_cache import follow_up_equals_cold

    rt = Runtime.load(bundle)
    prompt, extra = (torch.randint(1, 301, (k,), generator=torch.Generator().manual_seed(k)).tolist() for k in (21, 5))
    assert follow_up_equals_cold(rt, prompt, extra, speculative) >= len(prompt)


def test_logprobs_through_the_compiled_phases(bundle):
    """The O1 bundle's verify phase is one compiled call; a request for logprobs verifies through the same phase
    run eagerly around the compiled verifier, with the same tokens."""
    from test_logprobs import recomputed

    rt = Runtime.load(bundle)
    prompt = torch.randint(1, 301, (9,), generator=torch.Generator().manual_seed(9)).tolist()
    tree = rt.decoder(speculative=True)
    plain = rt.generate(prompt, 32, decoder=tree)
    scored = rt.generate(prompt, 32, decoder=tree, logprobs=2)
    assert scored.tokens == plain.tokens and plain.logprobs is None and scored.stats.n_accept > 0
    ref = recomputed(rt.verifier.graph, rt.verifier.layout, prompt, scored.tokens)
    assert [lp.token for lp in scored.logprobs] == scored.tokens
    torch.testing.assert_close(torch.tensor([lp.logprob for lp in scored.logprobs]),
                               ref.gather(1, torch.tensor(scored.tokens)[:, None])[:, 0], atol=1e-3, rtol=0)
