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

--oversize N (N > 0) measures how oversize requests disturb a stream, after the warm-up and before the
soak loop (which then runs as usual; --minutes 0 skips it):

    python tools/soak_serve.py --bundle demo.bundle --clients 1 --minutes 0 --oversize 8

One greedy streaming /v1/chat/completions request (the first prompt, --max-tokens new tokens) is measured
twice: alone (the baseline), then while N concurrent requests with a ~1 MB text prompt, far beyond any
context, go to /v1/completions (sent 0.3 s after its first token, from a process of their own; each must get
a 4xx, quickly). The client-side arrival time of every streamed chunk with text gives one line per run: the
chunks, the median and largest gap between chunks, their ratio, and the oversize requests' statuses and total
time (from the first sent to the last answered). A last line gives the CPU time the N requests cost with no
stream running, in the server and in the sending process. Exit 1 also if an oversize request got no 4xx or a
measured stream failed.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
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
OVERSIZE_AFTER_S = 0.3       # the oversize requests go this long after the measured stream's first text
OVERSIZE_CHARS = 1_000_000   # each one's prompt (plain ASCII: the JSON body stays under the server's 1 MiB limit)


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


@dataclass
class StreamProbe:
    """One measured stream and the oversize requests sent while it streamed."""
    oversize: int                                           # how many were sent
    arrivals: list[float] = field(default_factory=list)     # perf_counter of each chunk with text
    text: str = ""
    error: str = ""                                         # why the measured stream failed ("" if it did not)
    statuses: list[int | str] = field(default_factory=list)  # each oversize request's status (or exception)
    oversize_sent: float | None = None                      # perf_counter when the first was sent
    oversize_s: float | None = None                         # from the first sent to the last answered

    def gaps_ms(self) -> list[float]:
        return [1000 * (b - a) for a, b in zip(self.arrivals, self.arrivals[1:])]

    def summary(self) -> dict:
        gaps = self.gaps_ms()
        median, largest = percentile(gaps, 0.5), max(gaps, default=float("nan"))
        first, last = (self.arrivals[0], self.arrivals[-1]) if self.arrivals else (0.0, 0.0)
        return {"oversize": self.oversize, "chunks": len(self.arrivals), "gap_ms_median": round(median, 2),
                "gap_ms_max": round(largest, 2), "gap_max_over_median": round(largest / median, 2) if median else None,
                "oversize_statuses": self.statuses,
                "oversize_total_ms": round(1000 * self.oversize_s, 1) if self.oversize_s is not None else None,
                "oversize_sent_ms_after_first": (round(1000 * (self.oversize_sent - first), 1)
                                                 if self.oversize_sent is not None else None),
                "stream_ms_first_to_last": round(1000 * (last - first), 1), "error": self.error}

    def line(self, baseline: StreamProbe | None) -> str:
        s = self.summary()
        out = (f"oversize {self.oversize:2d}: {s['chunks']} chunks, gap median {s['gap_ms_median']:.1f} ms, "
               f"max {s['gap_ms_max']:.1f} ms, max/median {s['gap_max_over_median']}")
        if self.oversize:
            counts = {k: self.statuses.count(k) for k in dict.fromkeys(self.statuses)}
            out += (f"; oversize statuses {', '.join(f'{k} x{n}' for k, n in counts.items())} in "
                    f"{s['oversize_total_ms']} ms (sent {s['oversize_sent_ms_after_first']} ms after the first chunk; "
                    f"the stream ran {s['stream_ms_first_to_last']} ms)")
        else:
            out += f"; the stream ran {s['stream_ms_first_to_last']} ms"
        if baseline is not None:
            out += f"; text {'same as' if self.text == baseline.text else 'DIFFERS from'} the baseline"
        return out + (f"; FAILED: {self.error}" if self.error else "")


def oversize_body(model: str, prompts: list[str]) -> bytes:
    """A /v1/completions body whose prompt is ~1 MB of the prompts' text (ASCII, nothing JSON must escape)."""
    words = " ".join(" ".join(prompts).split()).encode("ascii", "ignore").decode().replace('"', "").replace("\\", "")
    prompt = (words + " ") * (OVERSIZE_CHARS // (len(words) + 1) + 1)
    return json.dumps({"model": model, "prompt": prompt[:OVERSIZE_CHARS], "max_tokens": 1}).encode()


def send_oversize(base_url: str, body: bytes, n: int, go, results) -> None:
    """In a process of its own (so its threads never hold the GIL of the one that times the stream): n concurrent
    oversize requests through one httpx.Client made up front, sent when `go` is set; puts "ready" on `results`,
    then (statuses, seconds from the first sent to the last answered, this process's CPU seconds meanwhile)."""
    import httpx

    client = httpx.Client(timeout=120, limits=httpx.Limits(max_connections=n))
    statuses: list[int | str] = [""] * n

    def one(i: int) -> None:
        go.wait()
        try:
            statuses[i] = client.post(f"{base_url}/completions", content=body,
                                      headers={"content-type": "application/json"}).status_code
        except httpx.HTTPError as e:
            statuses[i] = type(e).__name__

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    results.put("ready")
    go.wait()
    sent, cpu = time.perf_counter(), time.process_time()
    for t in threads:
        t.join()
    results.put((statuses, time.perf_counter() - sent, time.process_time() - cpu))
    client.close()


class OversizeSender:
    """The oversize requests' process, started before the measured stream and fired during it."""

    def __init__(self, base_url: str, body: bytes, n: int):
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        self.go, self.results = ctx.Event(), ctx.Queue()
        self.proc = ctx.Process(target=send_oversize, args=(base_url, body, n, self.go, self.results), daemon=True)
        self.proc.start()
        assert self.results.get(timeout=60) == "ready"
        self.fired: float | None = None

    def fire(self) -> None:
        self.fired = time.perf_counter()
        self.go.set()

    def finish(self) -> tuple[list[int | str], float, float]:
        """(each request's status, seconds from the first sent to the last answered, the sending process's CPU
        seconds meanwhile), once every request is answered."""
        if self.fired is None:
            self.go.set()
        statuses, seconds, cpu_s = self.results.get(timeout=180)
        self.proc.join(10)
        return statuses, seconds, cpu_s


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc, in clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def burst_cpu(base_url: str, body: bytes, n: int, server_pid: int, repeats: int = 5) -> str:
    """The CPU the oversize requests cost with no stream running (median of `repeats` bursts): the server's and the
    sending process's, against the burst's wall time."""
    rows = []
    for _ in range(repeats):
        sender = OversizeSender(base_url, body, n)
        before = cpu_seconds(server_pid)
        sender.fire()
        _, seconds, client_s = sender.finish()
        time.sleep(0.2)  # the server's last replies and closes
        rows.append((seconds, cpu_seconds(server_pid) - before, client_s))
    wall, server, client = (1000 * statistics.median(col) for col in zip(*rows))
    return (f"oversize {n:2d} alone: {wall:.0f} ms wall, CPU {server:.0f} ms in the server and {client:.0f} ms in the "
            f"sending process (medians of {repeats}; /proc counts in {1000 // os.sysconf('SC_CLK_TCK')} ms ticks)")


def probe_stream(base_url: str, model: str, prompt: str, max_tokens: int, oversize: int, body: bytes) -> StreamProbe:
    """One greedy streaming chat completion, timing each chunk's arrival; with oversize > 0, that many oversize
    requests go OVERSIZE_AFTER_S after its first text."""
    import httpx

    probe, pieces, launcher = StreamProbe(oversize), [], None
    sender = OversizeSender(base_url, body, oversize) if oversize else None
    request = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
               "temperature": 0, "stream": True}
    try:
        with httpx.stream("POST", f"{base_url}/chat/completions", json=request, timeout=120) as r:
            if r.status_code != 200:
                probe.error = f"status {r.status_code}: {r.read()[:200]!r}"
                return probe
            for line in r.iter_lines():
                now = time.perf_counter()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                obj = json.loads(line[6:])
                if "error" in obj:
                    probe.error = f"error in the stream: {line[6:206]}"
                for choice in obj.get("choices", []):
                    piece = (choice.get("delta") or {}).get("content")
                    if piece:
                        probe.arrivals.append(now)
                        pieces.append(piece)
                        if sender is not None and launcher is None:
                            launcher = threading.Timer(OVERSIZE_AFTER_S, sender.fire)
                            launcher.start()
    except httpx.HTTPError as e:
        probe.error = f"{type(e).__name__}: {e}"
    finally:
        if launcher is not None:
            launcher.join()
        if sender is not None:
            probe.statuses, probe.oversize_s, _ = sender.finish()
            probe.oversize_sent = sender.fired
    probe.text = "".join(pieces)
    if oversize and not (probe.statuses and all(isinstance(c, int) and 400 <= c < 500 for c in probe.statuses)):
        probe.error = probe.error or f"an oversize request got no 4xx: {probe.statuses}"
    return probe


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
    ap.add_argument("--oversize", type=int, default=0, metavar="N",
                    help="after the warm-up, measure one chat stream alone and then under N concurrent ~1 MB "
                    "oversize requests (default 0: off)")
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
        probes = []
        if args.oversize > 0:  # the baseline stream, then the same stream under N oversize requests
            body = oversize_body(model, prompts)
            print(f"soak: measuring a chat stream alone, then with {args.oversize} oversize requests of "
                  f"{len(body) / 1e6:.2f} MB each", file=sys.stderr)
            for n in (0, args.oversize):
                probes.append(probe_stream(url, model, prompts[0], args.max_tokens, n, body))
                print(probes[-1].line(probes[0] if n else None), flush=True)
            burst = burst_cpu(url, body, args.oversize, proc.pid)
            print(burst, flush=True)
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
    for probe in probes:  # again, beside the report
        print(probe.line(probes[0] if probe.oversize else None))
    if probes:
        print(burst)
    if probes:
        out["oversize_probes"] = [p.summary() for p in probes]
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 1 if out["wrong"] or out["lost"] or any(p.error for p in probes) else 0


if __name__ == "__main__":
    raise SystemExit(main())
