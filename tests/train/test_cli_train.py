"""`yggc train`: every job's --help parses, and the errors a user can cause are one `yggc: error:` line, exit 2.
(The tiny runs of test_pair.py and test_drafter.py go through the CLI and read the summary --json writes.)"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from checkpoints import write_checkpoint

from yggc.cli.main import main


def one_error_line(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("yggc: error: ") and captured.out == ""
    return lines[0]


@pytest.mark.parametrize("job", ["drafter", "eagle3", "pair", "evaluate"])
def test_every_job_has_help(capsys, job):
    with pytest.raises(SystemExit) as stop:
        main(["train", job, "--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: yggc train {job}") and "--threads" in out
    assert ("--json" in out) and ("--target" in out) == (job in ("drafter", "eagle3"))


def test_train_help_lists_the_jobs_and_pull_examples(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    assert all(job in out for job in ("drafter", "eagle3", "pair", "evaluate")) and "$(yggc pull smollm2)" in out


@pytest.mark.parametrize("job", ["drafter", "eagle3"])
def test_a_missing_target_folder_is_one_line(capsys, tmp_path, job):
    line = one_error_line(capsys, ["train", job, "--target", str(tmp_path / "nowhere"), "--preset", "tiny"])
    assert f"--target {tmp_path / 'nowhere'} is not a folder" in line and "yggc pull smollm2" in line


def test_a_folder_without_a_checkpoint_is_one_line(capsys, tmp_path):
    line = one_error_line(capsys, ["train", "drafter", "--target", str(tmp_path), "--preset", "tiny"])
    assert "has no config.json" in line


@pytest.mark.parametrize("job, extra", [("drafter", ["--target", "."]), ("eagle3", ["--target", "."]), ("pair", [])])
def test_an_unknown_preset_is_one_line(capsys, job, extra):
    line = one_error_line(capsys, ["train", job, "--preset", "huge", *extra])
    assert "unknown --preset 'huge'" in line and "tiny" in line


def test_without_transformers_it_names_the_extra(capsys, monkeypatch, tmp_path):
    target = write_checkpoint(tmp_path / "t", "llama_gqa", seed=1)
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers raises ImportError
    line = one_error_line(capsys, ["train", "drafter", "--target", str(target), "--preset", "tiny"])
    assert line == "yggc: error: yggc train needs the train extra: pip install 'yggc[train]'"


def test_a_json_file_in_a_missing_folder_is_refused_before_training(capsys, tmp_path):
    line = one_error_line(capsys, ["train", "pair", "--preset", "tiny", "--json", str(tmp_path / "no" / "s.json")])
    assert f"no folder {tmp_path / 'no'}" in line


@pytest.mark.parametrize("job, extra", [("drafter", ["--target", "t"]), ("eagle3", ["--target", "t"]),
                                        ("prompts", ["--target", "t"]), ("pair", [])])
def test_every_job_gets_frozen_options_built_from_its_flags(job, extra):
    from dataclasses import FrozenInstanceError

    from yggc.cli.main import build_parser
    from yggc.cli.train import OPTIONS, job_options

    options = job_options(build_parser().parse_args(["train", job, *extra, "--seed", "7", "--stop-after", "3"]))
    assert type(options) is OPTIONS[job] and getattr(options, "target", None) == (Path("t") if extra else None)
    settings = getattr(options, "run", options)  # prompts keeps its seed and limits itself
    assert (settings.seed, settings.stop_after) == (7, 3)
    with pytest.raises(FrozenInstanceError):
        options.out = None


def test_evaluate_gets_frozen_options_built_from_its_flags():
    from yggc.cli.main import build_parser
    from yggc.cli.train import job_options
    from yggc.train.options import EvaluateOptions

    options = job_options(build_parser().parse_args(["train", "evaluate", "--pair", "p", "--ctx", "64"]))
    assert options == EvaluateOptions(pair=Path("p"), corpus_dir=None, threads=None, ctx=64, max_eval_tokens=131072,
                                      prompts=32, prompt_chars=200, new_tokens=128, show_samples=1)


def test_the_run_settings_and_the_pair_budgets_come_from_their_flags():
    from yggc.cli.main import build_parser
    from yggc.cli.train import job_options

    def pair(*argv: str):
        return job_options(build_parser().parse_args(["train", "pair", *argv]))

    options = pair("--no-resume", "--max-minutes", "5", "--drafter-minutes", "2", "--ckpt-every", "9")
    assert not options.run.resume and options.run.ckpt_every == 9
    assert (options.minutes_for("verifier"), options.minutes_for("drafter")) == (5, 2)
    assert pair().run.resume and pair().minutes_for("verifier") is None
    eagle3 = job_options(build_parser().parse_args(["train", "eagle3", "--target", "t"]))
    assert eagle3.command.startswith("yggc") and eagle3.run.threads == 2  # the eagle3 job's default
