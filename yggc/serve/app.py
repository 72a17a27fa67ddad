"""The HTTP layer: OpenAI's routes on FastAPI, each request checked, queued, then answered whole or
as Server-Sent Events.

Every refusal is an ApiError rendered as OpenAI's error JSON with its 4xx: a foreign Host header or a
body that is not JSON (guards.py), a body too large or nested too deep, bad or unsupported parameters,
an unknown model, a prompt longer than the context, a full queue, a wrong API key, an unknown route.
Parsing, templating and tokenizing run in a worker thread, so the event loop keeps streaming while a
long prompt is read; the decode thread's model calls let go of the GIL (artifacts/aoti_package.py), so the loop
runs while the model does. A stream's 200 goes out when its job starts decoding: a request refused while it
waits (503 at shutdown) gets its status. A client that disconnects cancels its job (see worker.py).
"""
from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException

from ..errors import YggcError
from ..runtime.constraint import Constraint
from ..runtime.runtime import Runtime
from . import wire
from .api_errors import ApiError, bad_param
from .guards import allowed_hosts, check_auth, check_host, check_json_type, parse_json, read_body
from .jobs import Delta, Event, Failed, Finished, Job, Started
from .metrics import Metrics
from .params import TEXT_DEFAULT_MAX_TOKENS, CompletionRequest, parse_request
from .prompt_ids import prompt_ids
from .settings import ServeSettings
from .worker import DecodeWorker

POLL_S = 0.1  # while waiting for the decoder, how often to look for a client that went away


def error_response(e: ApiError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status, headers=e.headers)


def prepare(runtime: Runtime, settings: ServeSettings, body: bytes,
            chat: bool) -> tuple[CompletionRequest, list[int], Constraint | None]:
    """The checked request, its prompt's token ids and its grammar's state (in a worker thread: JSON, template,
    tokenizer, grammar)."""
    req = parse_request(parse_json(body), chat)
    if req.model != settings.model_id:
        raise ApiError(404, f"the model {req.model[:80]!r} does not exist; this server serves "
                       f"{settings.model_id!r}", param="model", code="model_not_found")
    try:  # compiled and probed a few tokens in (constraint.py): a grammar too large is refused here, not mid-answer
        constraint = runtime.constraint(req.grammar) if req.grammar is not None else None
    except YggcError as e:
        raise bad_param(req.grammar_param, str(e)) from None
    return req, prompt_ids(runtime, req), constraint


async def events(job: Job, request: Request) -> AsyncIterator[Event]:
    """The job's events until Finished or Failed; a client that went away cancels the job."""
    checked = time.perf_counter()
    try:
        while True:
            try:
                event = await asyncio.wait_for(job.events.get(), POLL_S)
            except asyncio.TimeoutError:
                event = None
            if time.perf_counter() - checked >= POLL_S:  # also while text flows (nothing is sent without stream)
                if await request.is_disconnected():
                    return
                checked = time.perf_counter()
            if event is None:
                continue
            yield event
            if isinstance(event, Finished | Failed):
                return
    finally:
        job.cancel()  # a no-op once the job has finished


async def stream_body(job: Job, feed: AsyncIterator[Event], req: CompletionRequest, rid: str,
                      created: int) -> AsyncIterator[str]:
    try:
        if req.chat:
            yield wire.sse(wire.chunk(req, rid, created, first=True))
        offset = 0  # text streamed so far (a completion's text_offset)
        async for event in feed:
            if isinstance(event, Delta):
                yield wire.sse(wire.chunk(req, rid, created, event.text, entries=event.logprobs, offset=offset))
                offset += len(event.text)
            elif isinstance(event, Finished):
                for obj in wire.last_chunks(req, rid, created, event):
                    yield wire.sse(obj)
            elif isinstance(event, Failed):
                yield wire.sse(event.error.body())
        yield wire.DONE
    finally:  # also when the server could not send (the client went away): stop decoding for nobody
        job.cancel()


async def whole_body(feed: AsyncIterator[Event], req: CompletionRequest, rid: str, created: int) -> Response:
    pieces, entries = [], []
    async for event in feed:
        if isinstance(event, Delta):
            pieces.append(event.text)
            entries += event.logprobs
        elif isinstance(event, Finished):
            return JSONResponse(wire.completion(req, rid, created, "".join(pieces), event, entries))
        elif isinstance(event, Failed):
            return error_response(event.error)
    return Response(status_code=499)  # the client went away; nobody reads this


async def answer(job: Job, request: Request, req: CompletionRequest) -> Response:
    """Wait in the queue for the job to start (or fail), then answer it whole or as a stream."""
    feed = events(job, request)
    first = await anext(feed, None)
    if not isinstance(first, Started):
        return error_response(first.error) if isinstance(first, Failed) else Response(status_code=499)
    rid, created = wire.new_id(req.chat), int(time.time())
    if req.stream:
        return StreamingResponse(stream_body(job, feed, req, rid, created), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    return await whole_body(feed, req, rid, created)


def create_app(runtime: Runtime, settings: ServeSettings) -> FastAPI:
    """The ASGI app over one Runtime; its lifespan starts and stops the decoding thread."""
    metrics = Metrics(max_accepted=runtime.shape.depth + 1)
    worker = DecodeWorker(runtime, metrics, settings)
    max_seq = runtime.verifier.layout.max_seq

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        worker.start()
        yield
        await asyncio.to_thread(worker.stop)

    hosts = allowed_hosts(settings)

    async def host_guard(request: Request) -> None:
        check_host(request, hosts)

    app = FastAPI(title="yggc", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None, redirect_slashes=False,
                  dependencies=[Depends(host_guard)])
    app.state.worker, app.state.metrics = worker, metrics

    @app.exception_handler(ApiError)
    async def api_error(request: Request, e: ApiError) -> JSONResponse:
        return error_response(e)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, e: HTTPException) -> JSONResponse:
        what = "not_found" if e.status_code == 404 else "method_not_allowed" if e.status_code == 405 else None
        return error_response(ApiError(e.status_code, f"{request.method} {request.url.path}: {e.detail}", code=what))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, e: RequestValidationError) -> JSONResponse:
        return error_response(ApiError(400, f"invalid request: {e.errors()}"))

    @app.exception_handler(Exception)
    async def internal_error(request: Request, e: Exception) -> JSONResponse:  # a bug: uvicorn logs it
        return error_response(ApiError(500, f"internal error: {type(e).__name__}", type="server_error"))

    async def complete(request: Request, chat: bool) -> Response:
        check_auth(request, settings.api_key)
        check_json_type(request)
        body = await read_body(request, settings.max_body_bytes(max_seq), settings.limits.body_timeout_s)
        req, ids, constraint = await asyncio.to_thread(prepare, runtime, settings, body, chat)
        default = max_seq - len(ids) if chat else TEXT_DEFAULT_MAX_TOKENS
        sampling = dataclasses.replace(req.sampling, max_tokens=req.sampling.max_tokens or default)
        job = Job(tuple(ids), sampling, asyncio.get_running_loop(), req.logprobs, req.cache_prompt, constraint,
                  req.grammar_param)
        worker.submit(job)
        return await answer(job, request, req)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await complete(request, chat=True)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await complete(request, chat=False)

    @app.get("/v1/models")
    async def models(request: Request) -> dict:
        check_auth(request, settings.api_key)
        return {"object": "list", "data": [wire.model_card(settings.model_id, settings.created)]}

    @app.get("/v1/models/{model:path}")
    async def model(model: str, request: Request) -> dict:
        check_auth(request, settings.api_key)
        if model != settings.model_id:
            raise ApiError(404, f"the model {model!r} does not exist; this server serves {settings.model_id!r}",
                           param="model", code="model_not_found")
        return wire.model_card(settings.model_id, settings.created)

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok", "queue_depth": worker.depth}

    @app.get("/metrics")
    async def prometheus() -> PlainTextResponse:
        return PlainTextResponse(metrics.render(worker.depth, worker.current is not None),
                                 media_type="text/plain; version=0.0.4")

    return app
