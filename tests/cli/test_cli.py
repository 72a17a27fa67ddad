"""`yggc run`: streaming, --json, and one clear line + exit code 2 for every bad input."""
import json
import shutil
import subprocess
import sys

import pytest
from checkpoints import make_tokenizer, write_checkpoint

from yggc.cli.main import main


def run(capsys, *argv):
    capsys.readouterr()  # drop what fixtures printed
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_json_output_has_tokens_and_stats(capsys, checkpoint):
    code, out, _ = run(capsys, "run", "-m", str(checkpoint("llama_gqa")), "--prompt-ids", "5,6,7", "-n", "8", "--json")
    assert code == 0
    res = json.loads(out)
    assert len(res["tokens"]) == res["n_generated"] == 8
    assert res["n_prompt"] == 3 and res["tpot_ms"] > 0 and res["tokens_per_s"] > 0
    assert isinstance(res["text"], str)


def test_text_streams_and_stats_go_to_stderr(capsys, checkpoint):
    path = checkpoint("llama_gqa")
    code, out, err = run(capsys, "run", "-m", str(path), "-p", "def add(a, b):", "-n", "12", "--seed", "1")
    assert code == 0
    assert "tokens per second" in err and "stopped: max tokens" in err
    code, js, _ = run(capsys, "run", "-m", str(path), "-p", "def add(a, b):", "-n", "12", "--json")
    assert out.rstrip("\n") == json.loads(js)["text"]


def test_sampling_is_seeded(capsys, checkpoint):
    args = ["run", "-m", str(checkpoint("llama_gqa")), "--prompt-ids", "1,2", "-n", "16", "--temp", "1", "--json"]
    a = json.loads(run(capsys, *args, "--seed", "3")[1])["tokens"]
    b = json.loads(run(capsys, *args, "--seed", "3")[1])["tokens"]
    c = json.loads(run(capsys, *args, "--seed", "4")[1])["tokens"]
    assert a == b and a != c


def test_stops_at_kv_capacity(capsys, checkpoint):
    code, out, _ = run(capsys, "run", "-m", str(checkpoint("llama_gqa")), "--prompt-ids", "1,2,3", "-n", "50",
                       "--max-seq", "10", "--json")
    res = json.loads(out)
    assert code == 0 and res["n_generated"] == 8 and "kv cache full" in res["stop_reason"]


def expect_error(capsys, argv, *needles):
    code, out, err = run(capsys, *argv)
    assert code == 2, err
    lines = [line for line in err.strip().splitlines() if line]
    assert len(lines) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_missing_model_dir(capsys, tmp_path):
    expect_error(capsys, ["run", "-m", str(tmp_path / "nope"), "-p", "x"], "does not exist")


def test_missing_config(capsys, tmp_path):
    expect_error(capsys, ["run", "-m", str(tmp_path), "-p", "x"], "config.json is missing")


def test_unsupported_model_type(capsys, tmp_path, checkpoint):
    shutil.copytree(checkpoint("llama_gqa"), tmp_path / "m")
    cfg = json.loads((tmp_path / "m/config.json").read_text())
    cfg["model_type"] = "gpt2"
    (tmp_path / "m/config.json").write_text(json.dumps(cfg))
    expect_error(capsys, ["run", "-m", str(tmp_path / "m"), "-p", "x"], "model_type 'gpt2' is not supported")


def test_corrupt_weights(capsys, tmp_path, checkpoint):
    shutil.copytree(checkpoint("llama_gqa"), tmp_path / "m")
    (tmp_path / "m/model.safetensors").write_bytes(b"\x00garbage" * 10)
    expect_error(capsys, ["run", "-m", str(tmp_path / "m"), "-p", "x"], "cannot be read as safetensors")


def test_prompt_longer_than_context(capsys, checkpoint):
    ids = ",".join(["5"] * 40)
    expect_error(capsys, ["run", "-m", str(checkpoint("llama_gqa")), "--prompt-ids", ids, "--max-seq", "32"],
                 "40 tokens", "--max-seq")


def test_prompt_id_outside_vocab(capsys, checkpoint):
    expect_error(capsys, ["run", "-m", str(checkpoint("llama_gqa")), "--prompt-ids", "5,99999"], "99999")


def test_tokenizer_mismatch_names_first_differing_token(capsys, tmp_path, checkpoint):
    drafter = write_checkpoint(tmp_path / "d", "llama_gqa", seed=9, tokenizer=False)
    tok = make_tokenizer()
    vocab = tok.get_vocab()
    swapped = sorted(vocab, key=vocab.get)[100]
    data = json.loads(tok.to_str())
    data["model"]["vocab"][swapped + "_x"] = data["model"]["vocab"].pop(swapped)
    (drafter / "tokenizer.json").write_text(json.dumps(data))
    expect_error(capsys, ["run", "-m", str(checkpoint("llama_gqa")), "-md", str(drafter), "-p", "x"],
                 "token id 100", repr(swapped))


def test_bad_flag_value_exits_2():
    proc = subprocess.run([sys.executable, "-m", "yggc.cli", "run", "--prompt-ids", "1,a"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "expected comma-separated token ids" in proc.stderr


@pytest.mark.parametrize("flag", [["--temp", "-1"], ["--top-p", "0"]])
def test_bad_sampling_values(capsys, checkpoint, flag):
    expect_error(capsys, ["run", "-m", str(checkpoint("llama_gqa")), "--prompt-ids", "1", *flag], flag[0][2:].replace("temp", "temperature"))


def test_bad_calibration_input_fails_before_compiling(capsys, tmp_path):
    text = tmp_path / "calib.txt"
    text.write_text("def f(x):\n    return x\n")
    out = tmp_path / "b"
    expect_error(capsys, ["compile", "-o", str(out), "--calib", str(tmp_path / "nope.txt")], "does not exist")
    expect_error(capsys, ["compile", "-o", str(out), "--calib", str(text), "--depth", "2", "--width", "2",
                          "--verify", "5"], "--verify must be in 1..depth*width = 4")
    expect_error(capsys, ["compile", "-o", str(out), "--calib", str(text), "--calib-tokens", "8"],
                 "--calib-tokens must exceed the deepest calibrated tree (8)")
    expect_error(capsys, ["compile", "-o", str(out), "--temp", "0.8", "--depth", "2"], "give --calib FILES too")
    expect_error(capsys, ["compile", "-o", str(out), "--calib", str(text), "--temp", "-1"], "--temp must be >= 0")
    assert not out.exists() and not list(tmp_path.glob(".b.partial-*"))


def test_demo_compile_calibrates_unless_a_shape_is_given():
    from yggc.cli.compile import compile_pair
    from yggc.cli.main import build_parser
    from yggc.runtime.loading import DEMO_CALIB, demo_pair_dirs

    args = build_parser().parse_args(["compile", "-o", "b"])
    assert compile_pair(args) == demo_pair_dirs() and args.calib == [str(DEMO_CALIB)] and DEMO_CALIB.is_file()
    args = build_parser().parse_args(["compile", "-o", "b", "--depth", "3"])
    assert compile_pair(args) == demo_pair_dirs() and args.calib is None


def test_calibrated_compile_prices_sampling_at_t1_unless_told(tmp_path):
    """--calib prices a second plan at T = 1 (what OpenAI clients and yggc serve sample at unless told); --temp T
    moves it, --temp 0 keeps the greedy plan alone."""
    from yggc.cli.compile import calibration_spec
    from yggc.cli.main import build_parser

    text = tmp_path / "calib.txt"
    text.write_text("def f(x):\n    return x\n")
    temps = [calibration_spec(build_parser().parse_args(["compile", "-o", "b", "--calib", str(text), *flags])).temperature
             for flags in ([], ["--temp", "0.7"], ["--temp", "0"])]
    assert temps == [1.0, 0.7, 0.0]
    assert calibration_spec(build_parser().parse_args(["compile", "-o", "b"])) is None  # no text: a fixed tree


def test_cli_silences_known_third_party_noise_only():
    import warnings

    from yggc.cli.noise import silence_third_party_noise

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        silence_third_party_noise()
        warnings.warn("`isinstance(treespec, LeafSpec)` is deprecated, use TreeSpec.is_leaf()", FutureWarning, stacklevel=1)
        warnings.warn("a real warning", FutureWarning, stacklevel=1)
    assert [str(w.message) for w in seen] == ["a real warning"]


def test_ctrl_c_stops_run_with_one_line_and_130():
    import signal

    def default_sigint() -> None:  # in the child: whatever the test worker left ignored or blocked (see below)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

    # Under full xdist runs (never alone) the child can decode all 1000 tokens and exit 0 after the SIGINT, as a
    # child does when it inherits an ignored or blocked SIGINT; what in the worker causes it is unknown.
    proc = subprocess.Popen([sys.executable, "-m", "yggc.cli", "run", "-p", "def fibonacci(n):", "-n", "1000", "-t", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    first = proc.stdout.read(4)  # decoding has started
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert first and proc.returncode == 130, err
    assert err.strip().splitlines() == ["yggc: interrupted"] and out.endswith("\n")


@pytest.fixture(scope="module")
def eagle3_head(ckpt_root, checkpoint):
    import torch
    from yggc.graphs.eagle3_checkpoint import head_base_config, new_eagle3, save_eagle3

    v = checkpoint("llama_gqa")
    head = new_eagle3(v, torch.arange(0, 301, 2), 2, init_std=0.3)
    return v, save_eagle3(head, head_base_config(v), ckpt_root / "cli_eagle3_head")


def test_run_with_an_eagle3_head_equals_the_verifier_alone(capsys, eagle3_head):
    v, head = eagle3_head
    args = ["run", "-m", str(v), "--prompt-ids", "5,6,7,8", "-n", "24", "--json"]
    alone = json.loads(run(capsys, *args)[1])
    code, out, _ = run(capsys, *args, "-md", str(head), "--depth", "3", "--width", "2")
    assert code == 0 and json.loads(out)["tokens"] == alone["tokens"]


def test_run_with_suffix_drafts_equals_the_verifier_alone(capsys, checkpoint):
    v = str(checkpoint("qwen2_bias"))  # greedy, it falls into a loop the suffix drafts then follow
    args = ["run", "-m", v, "--prompt-ids", "5,6,7", "-n", "60", "--json"]
    alone = json.loads(run(capsys, *args)[1])
    code, out, _ = run(capsys, *args, "--suffix", "--depth", "4")
    got = json.loads(out)
    assert code == 0 and got["tokens"] == alone["tokens"] and got["n_accept"] > 0
    expect_error(capsys, [*args, "--suffix", "-md", v], "--suffix drafts from the text, with no drafter")


def test_run_with_suffix_branches_equals_the_verifier_alone(capsys, eagle3_head):
    v, head = eagle3_head
    args = ["run", "-m", str(v), "--prompt-ids", "5,6,7,8,5,6,7,8,5,6", "-n", "32", "--json"]
    alone = json.loads(run(capsys, *args)[1])
    code, out, _ = run(capsys, *args, "-md", str(head), "--depth", "1", "--width", "2", "--with-suffix")
    assert code == 0 and json.loads(out)["tokens"] == alone["tokens"]
    expect_error(capsys, [*args, "--with-suffix"], "--with-suffix adds branches to a drafter's tree, and this run has none")
    expect_error(capsys, [*args, "--suffix", "--with-suffix"], "--suffix drafts from the text alone", "drop --with-suffix")
    expect_error(capsys, [*args, "--suffix", "--no-suffix"], "--suffix drafts from the text alone", "drop --no-suffix")


def test_a_bundles_greedy_runs_add_suffix_branches_unless_told(capsys, eager_bundle):
    """Greedy: the drafter's tree with the text's suffix branches by default, without them under --no-suffix; at
    T > 0 only with --with-suffix. Every greedy run says the verifier alone's tokens."""
    bundle = str(eager_bundle)
    args = ["run", bundle, "--prompt-ids", "5,6,7,8,5,6,7,8,5,6", "-n", "24", "--json"]
    alone = json.loads(run(capsys, *args, "--no-spec")[1])
    assert not alone["suffix_branches"]
    for flags, branches in (((), True), (("--no-suffix",), False), (("--with-suffix",), True)):
        out = json.loads(run(capsys, *args, *flags)[1])
        assert out["suffix_branches"] == branches and out["tokens"] == alone["tokens"] and out["n_iterations"] > 0
    sampled = [*args, "--temp", "1", "--seed", "3"]
    assert not json.loads(run(capsys, *sampled)[1])["suffix_branches"]
    assert json.loads(run(capsys, *sampled, "--with-suffix")[1])["suffix_branches"]


def test_eagle3_head_errors_are_one_line(capsys, tmp_path, checkpoint, eagle3_head):
    _, head = eagle3_head
    other = str(checkpoint("mistral_headdim"))
    expect_error(capsys, ["run", "-m", other, "-md", str(head), "--prompt-ids", "1,2"], "was made for a verifier")
    expect_error(capsys, ["compile", "-m", other, "-md", str(head), "-o", str(tmp_path / "b"),
                          "--depth", "2", "--width", "1", "--verify", "2"], "was made for a verifier")
    assert not (tmp_path / "b").exists()


def test_run_follows_a_grammar_file_and_a_json_schema(capsys, tmp_path):
    """The demo pair under a GBNF grammar and a JSON schema: text in the language, tree equal to --no-spec."""
    import re

    pytest.importorskip("llguidance")
    gbnf = tmp_path / "answer.gbnf"
    gbnf.write_text('root ::= ("yes" | "no") " " [0-9] [0-9]?\n')
    schema = tmp_path / "n.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
                                  "additionalProperties": False}))
    for flag, path, pattern in (("--grammar", gbnf, r"(yes|no) [0-9]{1,2}"), ("--json-schema", schema, r'\{"n": -?\d+\}')):
        outs = []
        for mode in ((), ("--no-spec",)):
            code, out, _ = run(capsys, "run", "--chat", "Is 7 prime?", "-n", "24", flag, str(path), "--json", *mode)
            assert code == 0
            outs.append(json.loads(out))
        assert outs[0]["tokens"] == outs[1]["tokens"]
        if outs[0]["stop_reason"] == "eos":
            assert re.fullmatch(pattern, outs[0]["text"]), outs[0]["text"]
        else:
            assert outs[0]["text"].startswith(("yes", "no", '{"n": '))
    bad = tmp_path / "bad.gbnf"
    bad.write_text('root ::= "a" b\n')
    expect_error(capsys, ["run", "-p", "x", "--grammar", str(bad)], "the gbnf is not a grammar yggc can follow")
    expect_error(capsys, ["run", "-p", "x", "--json-schema", str(tmp_path / "none.json")], "is not a file")


def test_a_plan_newer_than_this_yggc_is_one_line_and_exit_2(capsys, tmp_path, checkpoint):
    """A bundle's plan.json from a newer yggc: `yggc inspect` (a plan.json edited after the compile) and `yggc run`
    (one written with the newer version) name the version and the fix."""
    from yggc.passes.write_bundle import BundleWriter

    from yggc.plan.bundle_plan import PLAN_VERSION, BundlePlan
    from yggc.plan.shape import TreeShape

    def write(out, plan):
        with BundleWriter(out) as w:
            for name in ("verifier", "drafter"):
                w.copy_model_dir(checkpoint("llama_gqa"), name)
            w.write_json("plan.json", plan)
            w.finish({"device": "cpu", "dtype": "float32", "max_seq": 64})
        return out

    plan = BundlePlan(TreeShape(2, 2, 3)).to_json()
    newer = {**plan, "schema_version": PLAN_VERSION + 1}
    edited = write(tmp_path / "edited", plan)
    assert run(capsys, "inspect", str(edited))[0] == 0
    (edited / "plan.json").write_text(json.dumps(newer))
    needles = (f"plan.json has schema_version {PLAN_VERSION + 1}, newer than this yggc reads ({PLAN_VERSION})",
               "re-run `yggc compile` with this yggc, or upgrade yggc")
    expect_error(capsys, ["inspect", str(edited)], *needles)
    expect_error(capsys, ["run", str(write(tmp_path / "newer", newer)), "--prompt-ids", "1,2", "-n", "2"], *needles)


def test_inspect_names_a_missing_sampling_plan(capsys, eager_bundle):
    """A bundle without a sampling plan: `yggc inspect` says what requests at T > 0 decode with."""
    code, out, _ = run(capsys, "inspect", str(eager_bundle))
    assert code == 0 and ("  sampling plan: none; requests at T > 0 draft the greedy plan's tree, unpriced at any "
                          "temperature (`yggc compile --calib` prices one at T = 1)\n") in out
