"""The compile as a list of passes: which passes a job runs, that each reads only what an earlier pass wrote, and
that the progress total is the number of passes run (no model is loaded here; test_o2 checks a real compile's log)."""
from dataclasses import fields
from pathlib import Path

import pytest
from yggc.passes.calibrate import CalibrationSpec
from yggc.passes.compile_state import FIELD, CompileState
from yggc.passes.pipeline import PASSES, CompileJob

from yggc.plan.shape import TreeShape

CALIB = CalibrationSpec((Path("calib.txt"),))
JOBS = {
    "O2 calibrated": CompileJob(Path("v"), Path("d"), Path("b"), None, opt="O2", calib=CALIB),
    "O2 fixed": CompileJob(Path("v"), Path("d"), Path("b"), TreeShape(3, 2, 5), opt="O2"),
    "O1 calibrated": CompileJob(Path("v"), Path("d"), Path("b"), None, opt="O1", calib=CALIB),
    "O1 fixed": CompileJob(Path("v"), Path("d"), Path("b"), TreeShape(3, 2, 5), opt="O1"),
}


def names(job: CompileJob) -> list[str]:
    return [p.run.__name__.removesuffix("_pass") for p in PASSES if p.runs_for(job)]


@pytest.mark.parametrize("job, expected", [
    ("O2 calibrated", ["load", "copy", "lower", "calibrate", "predictor", "plan_buckets", "frozen_phase", "profile",
                       "decode_check", "stage_plan", "write"]),
    ("O2 fixed", ["load", "copy", "lower", "frozen_phase", "profile", "stage_plan", "write"]),
    ("O1 calibrated", ["load", "copy", "lower", "calibrate", "predictor", "plan_buckets", "phases", "profile",
                       "decode_check", "stage_plan", "write"]),
    ("O1 fixed", ["load", "copy", "lower", "phases", "profile", "stage_plan", "write"]),
])
def test_the_passes_a_job_runs(job, expected):
    assert names(JOBS[job]) == expected


@pytest.mark.parametrize("job", JOBS)
def test_every_pass_reads_only_what_an_earlier_pass_wrote(job):
    job = JOBS[job]
    written = {FIELD.job} | ({FIELD.shape} if job.shape is not None else set())
    for p in (p for p in PASSES if p.runs_for(job)):
        unwritten = {f.name for f in set(p.reads) - written}
        assert not unwritten, f"{p.run.__name__} reads {unwritten} before any pass writes it"
        written |= set(p.writes)


def test_passes_declare_fields_of_the_compile_state():
    """Reads and writes are CompileState's own dataclass fields (FIELD.x), not names that could drift from it."""
    state_fields = {id(f) for f in fields(CompileState)}
    for p in PASSES:
        assert all(id(f) in state_fields for f in (*p.reads, *p.writes)), p.run.__name__
    assert FIELD.profile.type == "Profile | None" and FIELD.loaded.type == "LoadedPair | None"


def test_the_compile_state_holds_no_dict():
    """No field is a dict or a list of dicts: the pair, its widths and compiled models, the buckets and the profile
    are typed objects."""
    for f in fields(CompileState):
        assert not f.type.startswith(("dict", "list[dict")), f.name
    assert FIELD.widths.type == "Widths | None" and FIELD.compiled.type == "CompiledPair | None"
    assert FIELD.buckets.type == "list[BucketSpec]"


def test_a_pair_reads_its_models_by_the_names_buckets_carry():
    from yggc.passes.compile_state import Widths
    widths = Widths([1, 8], [])
    assert [name for name, _ in widths.items()] == ["verifier", "drafter"]
    assert widths["verifier"] == [1, 8] and widths["drafter"] == []
    with pytest.raises(KeyError):
        widths["head"]
