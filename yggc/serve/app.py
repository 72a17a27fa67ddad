"""The HTTP layer: OpenAI's routes on FastAPI, each request checked, queued, then answered whole or
as Server-Sent Events.

Every refusal is an ApiError rendered as OpenAI's error JSON with its 4xx: malformed JSON, bad or
unsupported parameters, an unknown model, a prompt longer than the context, a full queue, a wrong
API key, an unknown route. A client that disconnects cancels its job (see worker.py).
"""
from __future__ import annotations

import asyncio
import dataclasses
import hmac
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException

from ..errors import YggcError
from ..runtime.runtime import Runtime
from . import wire
from .api_errors import ApiError, bad_param
from .jobs import Delta, Event, Failed, Finished, Job
from .metrics import Metrics
from .params import TEXT_DEFAULT_MAX_TOKENS, CompletionRequest, parse_request
from .settings import ServeSettings
from .worker import DecodeWorker

POLL_S = 0.1  # while waiting for the decoder, how often to look for a client that went away


def error_response(e: ApiError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status)


def check_auth(request: Request, key: str | None) -> None:
    if key is None:
        return
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), key.encode()):
        raise ApiError(401, "incorrect API key: send it as the header 'Authorization: Bearer KEY'",
                       code="invalid_api_key")


async def read_json(request: Request, limit: int) -> object:
    """The body as JSON: 413 past `limit` bytes, 400 if it does not parse."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"the request body has {declared} bytes; this server takes at most {limit}",
                       code="request_too_large")
    body = await request.body()
    if len(body) > limit:
        raise ApiError(413, f"the request body has {len(body)} bytes; this server takes at most {limit}",
                       code="request_too_large")
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ApiError(400, f"the request body is not valid JSON ({e})", code="invalid_json") from None


def prompt_ids(runtime: Runtime, req: CompletionRequest) -> list[int]:
    """Token ids of the prompt (through the bundle's chat template for chat), checked against the context."""
    param = "messages" if req.chat else "prompt"
    if req.chat and runtime.verifier.chat is None:
        raise bad_param("messages", "this model has no chat template (tokenizer_config.json chat_template); "
                        "send a plain prompt to /v1/completions", code="no_chat_template")
    try:
        ids = runtime.encode(messages=req.messages_as_dicts()) if req.chat else runtime.encode(
            list(req.prompt) if isinstance(req.prompt, tuple) else req.prompt)
    except YggcError as e:
        raise bad_param(param, str(e)) from None
    max_seq, vocab = runtime.verifier.layout.max_seq, runtime.verifier.graph.cfg.vocab_size
    if len(ids) >= max_seq:
        raise bad_param(param, f"this model's maximum context length is {max_seq} tokens, but the prompt has "
                        f"{len(ids)} tokens (and needs room for one new token); shorten the prompt",
                        code="context_length_exceeded")
    bad = [t for t in ids if t >= vocab]
    if bad:
        raise bad_param(param, f"prompt token id {bad[0]} is outside the vocabulary (0..{vocab - 1})")
    return ids


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


async def stream_body(job: Job, request: Request, req: CompletionRequest, rid: str, created: int) -> AsyncIterator[str]:
    try:
        if req.chat:
            yield wire.sse(wire.chunk(req, rid, created, first=True))
        async for event in events(job, request):
            if isinstance(event, Delta):
                yield wire.sse(wire.chunk(req, rid, created, event.text))
            elif isinstance(event, Finished):
                for obj in wire.last_chunks(req, rid, created, event):
                    yield wire.sse(obj)
            else:
                yield wire.sse(event.error.body())
        yield wire.DONE
    finally:  # also when the server could not send (the client went away): stop decoding for nobody
        job.cancel()


async def whole_body(job: Job, request: Request, req: CompletionRequest, rid: str, created: int) -> Response:
    pieces = []
    async for event in events(job, request):
        if isinstance(event, Delta):
            pieces.append(event.text)
        elif isinstance(event, Finished):
            return JSONResponse(wire.completion(req, rid, created, "".join(pieces), event))
        else:
            return error_response(event.error)
    return Response(status_code=499)  # the client went away; nobody reads this


def create_app(runtime: Runtime, settings: ServeSettings) -> FastAPI:
    """The ASGI app over one Runtime; its lifespan starts and stops the decoding thread."""
    metrics = Metrics(max_accepted=runtime.shape.depth + 1)
    worker = DecodeWorker(runtime, metrics, settings.queue_size)
    max_seq = runtime.verifier.layout.max_seq

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        worker.start()
        yield
        await asyncio.to_thread(worker.stop)

    app = FastAPI(title="yggc", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
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

    async def complete(request: Request, chat: bool) -> Response:
        check_auth(request, settings.api_key)
        req = parse_request(await read_json(request, settings.max_body_bytes(max_seq)), chat)
        if req.model != settings.model_id:
            raise ApiError(404, f"the model {req.model!r} does not exist; this server serves {settings.model_id!r}",
                           param="model", code="model_not_found")
        ids = prompt_ids(runtime, req)
        default = max_seq - len(ids) if chat else TEXT_DEFAULT_MAX_TOKENS
        sampling = dataclasses.replace(req.sampling, max_tokens=req.sampling.max_tokens or default)
        job = Job(tuple(ids), sampling, asyncio.get_running_loop())
        worker.submit(job)
        rid, created = wire.new_id(chat), int(time.time())
        if req.stream:
            return StreamingResponse(stream_body(job, request, req, rid, created), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        return await whole_body(job, request, req, rid, created)

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
