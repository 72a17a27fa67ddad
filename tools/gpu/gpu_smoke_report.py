"""Results of tools/gpu/gpu_smoke.py: rows, the table, the JSON file, the exit code, the per-section row
files of its child processes, and the rows that decoding and equality results become. Stdlib only,
so the CPU tests check all of it.

A row is one fact or one check of one section. `check` rows are the equality checks; the smoke exits
0 only if every check row is PASS and no row is FAIL.
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import signal
import statistics
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

SCHEMA = "yggc-gpu-smoke/1"
STATUSES = ("PASS", "FAIL", "INFO", "SKIP")
EXIT_OK, EXIT_FAILED, EXIT_NO_CUDA = 0, 1, 77
JSON_NAME = "gpu_smoke.json"


@dataclass
class Row:
    section: str
    item: str
    value: str
    status: str = "INFO"  # PASS | FAIL | INFO | SKIP
    check: bool = False  # an equality check: the exit code needs it to PASS

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"row status {self.status!r} is not one of {', '.join(STATUSES)}")


@dataclass
class Results:
    meta: dict = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"schema": SCHEMA, "meta": self.meta, "rows": [asdict(r) for r in self.rows],
                "exit_code": exit_code(self.rows)}

    @classmethod
    def from_dict(cls, data: Mapping) -> Results:
        if data.get("schema") != SCHEMA:
            raise ValueError(f"not a {SCHEMA} document (schema {data.get('schema')!r})")
        return cls(dict(data["meta"]), [Row(**r) for r in data["rows"]])


def pass_fail(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def exit_code(rows: Iterable[Row]) -> int:
    """0 if every equality check passed and no row failed, else 1."""
    rows = list(rows)
    ok = all(r.status == "PASS" for r in rows if r.check) and not any(r.status == "FAIL" for r in rows)
    return EXIT_OK if ok else EXIT_FAILED


def summary(rows: list[Row]) -> str:
    checks = [r for r in rows if r.check]
    passed = sum(r.status == "PASS" for r in checks)
    failed = sorted({r.section for r in rows if r.status == "FAIL"})
    return (f"{passed}/{len(checks)} equality checks passed; failed sections: {', '.join(failed) or 'none'}; "
            f"exit code {exit_code(rows)}")


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def table(results: Results) -> str:
    """Markdown: the meta facts, one table of every row, then the summary line."""
    lines = [f"{k}: {_cell(v)}  " for k, v in results.meta.items()]
    lines += ["", "| section | item | value | status |", "|---|---|---|---|"]
    for r in results.rows:
        status = f"{r.status} (check)" if r.check else r.status
        lines.append(f"| {_cell(r.section)} | {_cell(r.item)} | {_cell(r.value)} | {status} |")
    return "\n".join(lines + ["", summary(results.rows)])


def json_paths(json_arg: str | None, env: Mapping[str, str] = os.environ) -> list[Path]:
    """Where the JSON goes: --json PATH and, when the env var OUT is set, $OUT/gpu_smoke.json."""
    paths = [Path(json_arg)] if json_arg else []
    if env.get("OUT"):
        paths.append(Path(env["OUT"]) / JSON_NAME)
    return list(dict.fromkeys(paths))


def write_json(results: Results, paths: Iterable[Path]) -> list[Path]:
    text = json.dumps(results.to_dict(), indent=1)
    written = []
    for p in paths:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text + "\n")
        written.append(p)
    return written


def append_row(path: Path, row: Row) -> None:
    """One JSON line per row, flushed at once: a section killed mid-way keeps the rows it had."""
    with open(path, "a") as f:
        f.write(json.dumps(asdict(row)) + "\n")


def read_rows(path: Path) -> list[Row]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(Row(**json.loads(line)))
        except (ValueError, TypeError):  # a line cut short by a killed process
            continue
    return rows


def child_failure_row(name: str, returncode: int | None, checks: bool, grace_s: float) -> Row:
    """The row for a section whose child process did not exit cleanly (None: killed at the budget)."""
    if returncode is None:
        return Row(name, "child process", f"killed {grace_s:.0f} s past the time budget; rows so far kept", "SKIP",
                   check=checks)
    what = (f"died from signal {signal.Signals(-returncode).name}" if returncode < 0
            else f"exited with code {returncode}")
    return Row(name, "child process", f"{what}; rows so far kept, traceback on stderr", "FAIL", check=checks)


def one_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:300]


def version_of(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def first_divergence(a: list[int], b: list[int]) -> int | None:
    """Index of the first token where a and b differ (a length difference counts), None if equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


@dataclass
class DecodeRun:
    """One decoder's timed runs over the prompts, and where it first left the reference's tokens."""
    tpot_ms: list[float] = field(default_factory=list)
    accepted: list[float] = field(default_factory=list)  # mean accepted length per run (1.0 for AR)
    divergence: tuple[int, int] | None = None  # (prompt, token) of the first difference

    def compare(self, prompt: int, tokens: list[int], ref: list[int]) -> None:
        at = first_divergence(tokens, ref)
        if at is not None and self.divergence is None:
            self.divergence = (prompt, at)


def decode_rows(section: str, runs: dict[str, DecodeRun], n_prompts: int, n: int, check: bool) -> Iterator[Row]:
    """TPOT and acceptance per decoder, then one equality row each against the first decoder (the
    reference; its own row says whether its repeats reproduce its first run)."""
    ref = next(iter(runs))
    base = statistics.median(runs[ref].tpot_ms)
    for name, run in runs.items():
        med = statistics.median(run.tpot_ms)
        yield Row(section, f"{name}: TPOT median ms, mean accepted length",
                  f"{med:.3f} ({base / med:.2f}x vs {ref}), {statistics.mean(run.accepted):.2f}")
    for name, run in runs.items():
        ok = run.divergence is None
        value = (f"equal ({n_prompts} prompts x {n} tokens, every repeat)" if ok
                 else f"differs: prompt {run.divergence[0]}, first at token {run.divergence[1]}")
        yield Row(section, f"{name} tokens == {ref} (first run)", value, pass_fail(ok) if check else "INFO",
                  check=check)
