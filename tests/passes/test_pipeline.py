"""The compile as a list of passes: which passes a job runs, that each reads only what an earlier pass wrote, and
that the progress total is the number of passes run (no model is loaded here; test_o2 checks a real compile's log)."""
from pathlib import Path

import pytest
from yggc.passes.calibrate import CalibrationSpec
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
    written = {"job"} | ({"shape"} if job.shape is not None else set())
    for p in (p for p in PASSES if p.runs_for(job)):
        assert set(p.reads) <= written, f"{p.run.__name__} reads {set(p.reads) - written} before any pass writes it"
        written |= set(p.writes)
