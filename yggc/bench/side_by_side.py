"""`yggc bench --shapes`: forced tree shapes through one bundle's compiled packages beside its own plan and its
compiled AR, greedy, interleaved per prompt (a warm-up round first); every row must produce the first row's tokens.
`decode_rows` is the measurement `--ablation` shares."""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from ..plan.shape import TreeShape
from ..runtime.runtime import Runtime
from ..tree.sampling import SamplingParams


@dataclass
class DecodedRow:
    tpot_ms: list[float] = field(default_factory=list)  # per measured decode
    accepted: list[float] = field(default_factory=list)  # mean accepted length per measured decode (AR: 1)
    iterations: list[dict] = field(default_factory=list)  # traced iterations (StageTrace.per_iteration)
    equal: bool = True  # every decode produced the first row's tokens

    def median(self, key: str) -> float | None:
        values = [it[key] for it in self.iterations]
        return statistics.median(values) if values else None


def decode_rows(decoders: dict, prompts: list[list[int]], n: int, repeats: int, trace: bool = False,
                eos_ids: tuple[int, ...] = ()) -> dict[str, DecodedRow]:
    """Each prompt decoded by every decoder in turn, `repeats` measured rounds after one warm-up round (up to n
    tokens, or to the first of eos_ids). trace: time the speculative decoders' iterations (`yggc run --trace`)."""
    rows = {name: DecodedRow() for name in decoders}
    for prompt in prompts:
        ref = None
        for rep in range(repeats + 1):
            for name, dec in decoders.items():
                tracer = dec.enable_trace() if trace and hasattr(dec, "enable_trace") else None
                out = [t for chunk in dec.stream(prompt, n, SamplingParams(), eos_ids) for t in chunk]
                ref = out if ref is None else ref
                row = rows[name]
                row.equal &= out == ref
                if rep:
                    row.tpot_ms.append(dec.stats.tpot_ms)
                    row.accepted.append(dec.stats.summary().get("mean_accepted_length", 1.0))
                    row.iterations += tracer.per_iteration() if tracer else []
    return rows


def shape_decoders(rt: Runtime, shapes: list[TreeShape]) -> dict:
    """Compiled AR, the bundle's plan (with its depth predictor, if any) and each forced shape; a shape whose draft
    phase the bundle compiled (O2, an EAGLE-3 head) also drafted eagerly around the head's package."""
    plan = f"plan {rt.shape.short}{' + depth predictor' if rt.policy else ''}"
    rows = {"compiled AR": rt.decoder(speculative=False), plan: rt.decoder()}
    for s in shapes:
        rows[s.short] = rt.decoder(shape=s)
        if rt.manifest.opt == "O2" and (s.depth, s.width) in rt.draft_runners:
            rows[f"{s.short} eager draft phase"] = rt.decoder(shape=s, compiled_draft=False)
    return rows


def bubble_cells(row: DecodedRow) -> str:
    """The median host bubble and the draft and verify phases' host time, as two table cells."""
    ms = row.median("host_bubble_ms")
    if ms is None:
        return " - | - |"
    return f" {ms:.2f} | {row.median('draft_host_ms'):.2f} / {row.median('verify_host_ms'):.2f} |"


def shapes_table(rows: dict[str, DecodedRow], bubble: bool = False) -> str:
    """Mean accepted length, median TPOT and equality of each row against the first; bubble: the median host bubble
    per traced iteration (time outside compiled model calls) and its draft and verify phases' shares."""
    first = next(iter(rows))
    base = statistics.median(rows[first].tpot_ms)
    extra = (" host bubble ms | draft / verify host ms |", "---|---|") if bubble else ("", "")
    lines = [f"| decoding | mean accepted | TPOT median ms | vs {first} | equal to {first} |{extra[0]}",
             f"|---|---|---|---|---|{extra[1]}"]
    for name, row in rows.items():
        med = statistics.median(row.tpot_ms)
        cell = bubble_cells(row) if bubble else ""
        lines.append(f"| {name} | {statistics.mean(row.accepted):.2f} | {med:.3f} | {base / med:.2f}x | "
                     f"{'yes' if row.equal else 'NO'} |{cell}")
    return "\n".join(lines)
