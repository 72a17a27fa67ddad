"""The decoding thread: requests wait in a bounded FIFO queue and decode one at a time on the Runtime.

One Runtime owns one KV cache, so there is exactly one decoding thread. A full queue refuses the
request at once (429) instead of letting latency grow without bound. A cancelled job (its client
went away) stops at the next draft-verify iteration, or is skipped if it had not started. Shutting down,
the waiting jobs are answered 503 at once (refuse_waiting) and the running one may finish until the server
aborts it (abort_current), which ends its answer with a 503 error.
"""
from __future__ import annotations

import logging
import queue
import threading
import time

from ..errors import YggcError
from ..runtime.constraint import GrammarError
from ..runtime.drafters.suffix_branches import has_suffix_branches
from ..runtime.runtime import Runtime
from .api_errors import ApiError
from .jobs import Delta, Failed, Finished, Job, Started, Usage
from .metrics import Metrics
from .settings import ServeSettings
from .stop import TextStream
from .wire import content_logprobs

log = logging.getLogger("yggc.serve")
# a 429's Retry-After: a place frees when the decoding request ends, at no time the server can tell; OpenAI's
# client waits this long, then backs off on its own
RETRY_AFTER_S = 1


def shutting_down(message: str = "the server is shutting down; retry later") -> ApiError:
    return ApiError(503, message, type="server_error", code="shutting_down")


def request_stats(dec, stop_reason: str, ttft_s: float | None, tpot_s: float | None) -> dict:
    """The response's "yggc" field: how this request decoded (DecodeStats conventions)."""
    st = dec.stats
    shape = getattr(dec, "shape", None)
    out = {"speculative": shape is not None, "stop_reason": stop_reason,
           "ttft_ms": round(1000 * ttft_s, 3) if ttft_s is not None else None,
           "tpot_ms": round(1000 * tpot_s, 3) if tpot_s is not None else None,
           "n_iterations": st.n_iterations, "n_drafted": st.n_drafted, "n_accept": st.n_accept}
    if shape is not None:
        out["tree"] = {"depth": shape.depth, "width": shape.width, "verify": shape.verify}
        out["suffix_branches"] = has_suffix_branches(dec)
    if st.n_iterations:
        out["acceptance_rate"] = round(st.n_accept / st.n_drafted, 4) if st.n_drafted else 0.0
        out["mean_accepted_length"] = round((st.n_accept + st.n_iterations) / st.n_iterations, 4)
    return out


class DecodeWorker:
    def __init__(self, runtime: Runtime, metrics: Metrics, settings: ServeSettings):
        self.runtime, self.metrics, self.settings, self.queue_size = runtime, metrics, settings, settings.queue_size
        self.queue: queue.Queue[Job | None] = queue.Queue(maxsize=self.queue_size)
        self.current: Job | None = None
        self.stopping = False
        self.thread = threading.Thread(target=self.loop, name="yggc-decode", daemon=True)

    @property
    def depth(self) -> int:
        """Requests waiting (the one decoding not counted)."""
        return self.queue.qsize()

    def start(self) -> None:
        self.thread.start()

    def submit(self, job: Job) -> None:
        """Queue a job, or raise ApiError 429 (queue full) / 503 (shutting down)."""
        if self.stopping:
            raise shutting_down()
        try:
            self.queue.put_nowait(job)
        except queue.Full:
            self.metrics.reject()
            raise ApiError(429, f"the server's queue is full ({self.queue_size} requests waiting); retry later",
                           type="requests", code="rate_limit_exceeded",
                           headers={"Retry-After": str(RETRY_AFTER_S)}) from None

    def refuse_waiting(self) -> None:
        """Shutting down: take no more jobs and answer every waiting one 503 now."""
        self.stopping = True
        while True:
            try:
                job = self.queue.get_nowait()
            except queue.Empty:
                return
            if job is not None:
                job.emit(Failed(shutting_down()))

    def abort_current(self, message: str = "the server is shutting down; this request was stopped") -> None:
        """Stop the running job at its next iteration; its answer ends with a 503 error."""
        job = self.current
        if job is not None:
            job.abort(shutting_down(message))

    def stop(self, timeout: float = 5.0) -> None:
        """Fail the waiting jobs, abort the running one, end the thread."""
        self.refuse_waiting()
        self.abort_current()
        try:
            self.queue.put(None, timeout=timeout)
        except queue.Full:  # a request slipped in while stopping: the daemon thread ends with the process
            return
        if self.thread.is_alive():
            self.thread.join(timeout)

    def loop(self) -> None:
        while (job := self.queue.get()) is not None:
            if job.cancelled.is_set():
                self.metrics.record("cancelled", 0, 0, None, None, [])
                continue
            self.current = job
            try:
                self.run(job)
            except YggcError as e:  # bad input the HTTP side could not see (it checks what it can)
                self.metrics.record("failed", len(job.prompt_ids), 0, None, None, [])
                param = job.grammar_param if isinstance(e, GrammarError) else None
                job.emit(Failed(ApiError(400, str(e), param=param)))
            except Exception as e:
                log.exception("decoding failed")
                self.metrics.record("failed", len(job.prompt_ids), 0, None, None, [])
                job.emit(Failed(ApiError(500, f"internal error while decoding: {e}", type="server_error")))
            finally:
                self.current = None

    def run(self, job: Job) -> None:
        """Decode one job, emitting text as iterations are accepted; checks for cancel between them."""
        job.emit(Started())
        s, rt = job.sampling, self.runtime
        dec = (rt.suffix_decoder() if self.settings.suffix
               else rt.request_decoder(s.temperature > 0, self.settings.suffix_branches))
        text = TextStream(rt.tokenizer, s.stop)
        n_generated, first_at, last_at, cancelled = 0, None, None, False
        steps = rt.stream_tokens(list(job.prompt_ids), s.max_tokens, s.temperature, s.top_k, s.top_p, s.seed,
                                 decoder=dec, min_p=s.min_p, prompt_cache=job.cache_prompt, logprobs=job.logprobs,
                                 grammar=job.constraint)
        try:
            for tokens in steps:
                last_at = time.perf_counter()
                first_at = first_at or last_at
                n_generated += len(tokens)
                piece = text.push(tokens)
                scores = () if job.logprobs is None else content_logprobs(dec.chunk_logprobs, rt.tokenizer)
                if piece or scores:
                    job.emit(Delta(piece, scores))
                if text.stopped:
                    break
                if job.cancelled.is_set():
                    cancelled = True
                    break
        finally:
            steps.close()
        ttft = first_at - job.submitted if first_at else None
        tpot = (last_at - first_at) / (n_generated - 1) if n_generated > 1 else None
        self.metrics.record("cancelled" if cancelled else "completed", len(job.prompt_ids), n_generated, ttft, tpot,
                            dec.stats.accepted_lengths)
        if cancelled:
            if job.abort_error is not None:
                job.emit(Failed(job.abort_error))
            return
        if text.stopped:
            reason, stop_reason = "stop", "stop string"
        else:
            piece = text.finish()
            if piece:
                job.emit(Delta(piece))
            stop_reason = dec.stats.stop_reason
            reason = "stop" if stop_reason == "eos" else "length"
        usage = Usage(len(job.prompt_ids), n_generated, dec.stats.n_cached)
        job.emit(Finished(reason, usage, request_stats(dec, stop_reason, ttft, tpot)))
