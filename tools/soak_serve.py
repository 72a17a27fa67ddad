"""Load and soak test of `yggc serve`: N concurrent openai clients for M minutes on loopback.

    python tools/soak_serve.py --bundle demo.bundle --clients 3 --minutes 2

1. Reference: the bundle's own autoregressive greedy output for every prompt (Runtime.generate with
   speculation off, in this process), so each answer is checked against plain decoding (no drift).
2. Starts `yggc serve BUNDLE --port 0` as a child process and warms it up (each prompt once).
3. N client threads loop until the deadline: greedy streaming /v1/completions, prompts round-robin.
   An answer is wrong if its text differs from the reference, lost if the request failed or the
   stream ended without finish_reason and [DONE].
4. Reports requests served, p50/p99 time to first token and TPOT (client-side, from the stream),
   tokens per client sequence, wrong and lost answers, and the server's RSS at warm-up, during the
   run and at the end (growth after warm-up should be ~0). Exit 1 if any answer was wrong or lost.
"""
from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROMPTS = REPO / "yggc" / "demo_pair" / "prompts.json"
READY = re.compile(r"yggc: serving '(.+?)' .* at (http://\S+/v1)")


@dataclass
class Outcome:
    ok: bool
    wrong: bool = False
    ttft_s: float = 0.0
    tpot_s: float | None = None
    tokens: int = 0
    error: str = ""


@dataclass
class ClientLog:
    outcomes: list[Outcome] = field(default_factory=list)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def rss_mib(pid: int) -> float:
    """Resident set size of a process (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def references(bundle: str, prompts: list[str], max_tokens: int, threads: int) -> list[str]:
    """Autoregressive greedy text of each prompt, straight from the Runtime (no server)."""
    import torch

    from yggc.runtime import Runtime

    torch.set_num_threads(threads)
    rt = Runtime.load(bundle)
    plain = [rt.generate(p, max_tokens, decoder=rt.decoder(speculative=False)).text for p in prompts]
    assert [rt.generate(p, max_tokens).text for p in prompts[:2]] == plain[:2], "the plan's decoder drifts from AR"
    return plain


def start_server(bundle: str, queue: int, threads: int, log_path: Path) -> tuple[subprocess.Popen, str, str]:
    """`yggc serve` on a free port; returns (process, model id, base url) once it listens."""
    cmd = [sys.executable, "-m", "yggc.cli", "serve", bundle, "--port", "0", "--queue", str(queue), "-t", str(threads)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    log = log_path.open("w")

    def copy_rest() -> None:  # keep draining the server's stderr so it never blocks on a full pipe
        for rest in proc.stderr:
            log.write(rest)
            log.flush()

    for line in proc.stderr:
        log.write(line)
        log.flush()
        m = READY.search(line)
        if m:
            threading.Thread(target=copy_rest, daemon=True).start()
            return proc, m.group(1), m.group(2)
    raise SystemExit(f"soak: the server exited before listening; see {log_path}")


def ask(client, model: str, prompt: str, max_tokens: int, reference: str | None) -> Outcome:
    """One greedy streaming completion, timed from the request to its first and last text."""
    t0 = time.perf_counter()
    first = last = None
    pieces, finish, usage = [], None, None
    try:
        stream = client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens, temperature=0,
                                           stream=True, stream_options={"include_usage": True})
        for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for c in chunk.choices:
                if c.text:
                    last = time.perf_counter()
                    first = first or last
                    pieces.append(c.text)
                finish = c.finish_reason or finish
    except Exception as e:  # noqa: BLE001 - every failure is a lost answer, reported by type
        return Outcome(False, error=f"{type(e).__name__}: {e}")
    if finish is None or usage is None:
        return Outcome(False, error="stream ended without finish_reason/usage")
    text, n = "".join(pieces), usage.completion_tokens
    tpot = (last - first) / (n - 1) if first and n > 1 else None
    return Outcome(True, reference is not None and text != reference, (first or last or t0) - t0, tpot, n)


def client_loop(base_url: str, model: str, prompts: list[str], refs: list[str], max_tokens: int, offset: int,
                deadline: float, log: ClientLog) -> None:
    import openai

    client = openai.OpenAI(base_url=base_url, api_key="none", max_retries=0, timeout=120)
    i = offset
    while time.time() < deadline:
        k = i % len(prompts)
        log.outcomes.append(ask(client, model, prompts[k], max_tokens, refs[k]))
        i += 1


def report(logs: list[ClientLog], rss: dict[str, float], seconds: float, args: argparse.Namespace,
           server_metrics: str) -> dict:
    done = [o for log in logs for o in log.outcomes]
    ok = [o for o in done if o.ok]
    mean_len = re.search(r"yggc_accepted_length_sum (\S+)\nyggc_accepted_length_count (\S+)", server_metrics)
    accepted = float(mean_len.group(1)) / float(mean_len.group(2)) if mean_len and float(mean_len.group(2)) else None
    return {
        "command": " ".join([sys.executable.rsplit("/", 1)[-1], *sys.argv]),
        "clients": args.clients, "minutes": args.minutes, "max_tokens": args.max_tokens, "server_threads": args.threads,
        "requests_served": len(ok), "wrong": sum(o.wrong for o in ok), "lost": len(done) - len(ok),
        "lost_errors": sorted({o.error for o in done if not o.ok})[:5],
        "ttft_ms_p50": 1000 * percentile([o.ttft_s for o in ok], 0.5),
        "ttft_ms_p99": 1000 * percentile([o.ttft_s for o in ok], 0.99),
        "tpot_ms_p50": 1000 * percentile([o.tpot_s for o in ok if o.tpot_s], 0.5),
        "tpot_ms_p99": 1000 * percentile([o.tpot_s for o in ok if o.tpot_s], 0.99),
        "tokens_total": sum(o.tokens for o in ok),
        "tokens_per_client": [sum(o.tokens for o in log.outcomes if o.ok) for log in logs],
        "tokens_per_s": sum(o.tokens for o in ok) / seconds,
        "server_mean_accepted_length": accepted,
        **{f"rss_mib_{k}": round(v, 1) for k, v in rss.items()},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bundle", required=True, help="a bundle written by `yggc compile`")
    ap.add_argument("--clients", type=int, default=3, help="concurrent clients (default 3)")
    ap.add_argument("--minutes", type=float, default=2.0, help="length of the load phase (default 2)")
    ap.add_argument("--max-tokens", type=int, default=128, help="new tokens per request (default 128)")
    ap.add_argument("--prompts", type=int, default=8, help="distinct prompts from the demo prompt set (default 8)")
    ap.add_argument("--threads", type=int, default=1, help="the server's torch threads (default 1)")
    ap.add_argument("--json", metavar="OUT", help="also write the report as JSON (the server's log goes to "
                    "$TMPDIR/yggc-soak-server.log)")
    args = ap.parse_args()

    prompts = [p["text"] for p in json.loads(PROMPTS.read_text())["prompts"][: args.prompts]]
    print(f"soak: references: {len(prompts)} prompts x {args.max_tokens} tokens, autoregressive", file=sys.stderr)
    refs = references(args.bundle, prompts, args.max_tokens, args.threads)
    log_path = Path(tempfile.gettempdir()) / "yggc-soak-server.log"
    proc, model, url = start_server(args.bundle, 2 * args.clients, args.threads, log_path)
    try:
        import openai

        warm = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=120)
        warm_wrong = sum(ask(warm, model, p, args.max_tokens, r).wrong for p, r in zip(prompts, refs))
        rss = {"warmup": rss_mib(proc.pid)}
        samples = [rss["warmup"]]
        print(f"soak: {url} warm (rss {rss['warmup']:.1f} MiB); {args.clients} clients for {args.minutes} min",
              file=sys.stderr)
        t0 = time.time()
        deadline = t0 + 60 * args.minutes
        logs = [ClientLog() for _ in range(args.clients)]
        threads = [threading.Thread(target=client_loop, args=(url, model, prompts, refs, args.max_tokens,
                                                              i * len(prompts) // args.clients, deadline, logs[i]))
                   for i in range(args.clients)]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            time.sleep(5)
            samples.append(rss_mib(proc.pid))
        seconds = time.time() - t0
        rss.update({"end": rss_mib(proc.pid), "max": max(samples), "growth_after_warmup": samples[-1] - samples[0]})
        import urllib.request

        server_metrics = urllib.request.urlopen(url.removesuffix("/v1") + "/metrics").read().decode()
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    out = report(logs, rss, seconds, args, server_metrics)
    out["wrong"] += warm_wrong
    out["server_exit_code"] = proc.returncode
    for k, v in out.items():
        print(f"{k:28s} = {round(v, 3) if isinstance(v, float) else v}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 1 if out["wrong"] or out["lost"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
