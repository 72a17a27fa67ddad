"""`yggc serve`: an OpenAI-compatible HTTP server over one Runtime, for one user at the lowest latency.

Layered like llama.cpp's server: HTTP (app.py, on FastAPI + uvicorn, the optional `serve` extra; the
bounds on a request's head in protocol.py; what a request must pass first in guards.py), the bounded FIFO queue and its one decoding thread (worker.py), and
the request as a task (params.py, prompt_ids.py, jobs.py, stop.py), over `Runtime.stream_tokens`. Responses follow the OpenAI wire format (wire.py).

May import yggc.runtime, yggc.bundle and yggc.errors; nothing but yggc.cli imports it, and importing
this package imports neither FastAPI nor torch.
"""
