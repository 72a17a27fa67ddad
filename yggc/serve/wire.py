"""OpenAI response objects: chat.completion(.chunk) and text_completion, Server-Sent Events framing.

Beside OpenAI's `usage`, every final response (and the finishing chunk of a stream) carries a
"yggc" object with the request's speculative stats (worker.request_stats).
"""
from __future__ import annotations

import json
import uuid

from .jobs import Finished
from .params import CompletionRequest

DONE = "data: [DONE]\n\n"


def new_id(chat: bool) -> str:
    return f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"


def sse(obj: dict) -> str:
    """One Server-Sent Event carrying a JSON object."""
    return f"data: {json.dumps(obj, ensure_ascii=False, separators=(',', ':'))}\n\n"


def head(req: CompletionRequest, rid: str, created: int, chunk: bool) -> dict:
    kind = ("chat.completion.chunk" if chunk else "chat.completion") if req.chat else "text_completion"
    return {"id": rid, "object": kind, "created": created, "model": req.model, "system_fingerprint": None}


def choice(req: CompletionRequest, text: str | None, finish: str | None, chunk: bool, first: bool = False) -> dict:
    if not req.chat:
        return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
    if chunk:
        delta = {"role": "assistant", "content": ""} if first else ({"content": text} if text else {})
        return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    return {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None, "finish_reason": finish}


def completion(req: CompletionRequest, rid: str, created: int, text: str, end: Finished) -> dict:
    """The whole answer of a request with stream: false."""
    return {**head(req, rid, created, False), "choices": [choice(req, text, end.finish_reason, False)],
            "usage": end.usage.as_dict(), "yggc": end.stats}


def chunk(req: CompletionRequest, rid: str, created: int, text: str | None = None, first: bool = False) -> dict:
    """A streamed piece of text (first=True: the chat stream's opening role chunk)."""
    return {**head(req, rid, created, True), "choices": [choice(req, text, None, True, first)]}


def last_chunks(req: CompletionRequest, rid: str, created: int, end: Finished) -> list[dict]:
    """The finishing chunk (finish_reason, stats) and, with stream_options.include_usage, the usage chunk."""
    out = [{**head(req, rid, created, True), "choices": [choice(req, None, end.finish_reason, True)], "yggc": end.stats}]
    if req.include_usage:
        out.append({**head(req, rid, created, True), "choices": [], "usage": end.usage.as_dict()})
    return out


def model_card(model_id: str, created: int) -> dict:
    return {"id": model_id, "object": "model", "created": created, "owned_by": "yggc"}
