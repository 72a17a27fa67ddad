"""OpenAI response objects: chat.completion(.chunk) and text_completion, Server-Sent Events framing.

Beside OpenAI's `usage`, every final response (and the finishing chunk of a stream) carries a
"yggc" object with the request's speculative stats (worker.request_stats). Logprobs are the chat
format's entries ({"token", "logprob", "bytes", "top_logprobs"}); a completion lists the same values in
the legacy format (tokens, token_logprobs, top_logprobs, text_offset).
"""
from __future__ import annotations

import json
import uuid
from collections.abc import Sequence

from tokenizers import Tokenizer

from ..runtime.logprobs import TokenLogprob
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


def token_text(tokenizer: Tokenizer | None, token: int) -> str:
    """A token as text (special tokens spelled out); token_id:N where the model has no tokenizer."""
    return tokenizer.decode([token], skip_special_tokens=False) if tokenizer else f"token_id:{token}"


def content_logprobs(lps: Sequence[TokenLogprob], tokenizer: Tokenizer | None) -> tuple[dict, ...]:
    """The chat format's logprobs.content entries of `lps`."""
    def entry(token: int, logprob: float) -> dict:
        text = token_text(tokenizer, token)
        return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}

    return tuple({**entry(lp.token, lp.logprob), "top_logprobs": [entry(t, v) for t, v in lp.top]} for lp in lps)


def legacy_logprobs(entries: Sequence[dict], offset: int) -> dict:
    """Chat-format entries -> a completion's logprobs object; `offset`: the text's length before the first."""
    offsets = []
    for e in entries:
        offsets.append(offset)
        offset += len(e["token"])
    return {"tokens": [e["token"] for e in entries], "token_logprobs": [e["logprob"] for e in entries],
            "top_logprobs": [{t["token"]: t["logprob"] for t in e["top_logprobs"]} for e in entries],
            "text_offset": offsets}


def choice_logprobs(req: CompletionRequest, entries: Sequence[dict], offset: int) -> dict | None:
    if req.logprobs is None:
        return None
    return {"content": list(entries)} if req.chat else legacy_logprobs(entries, offset)


def choice(req: CompletionRequest, text: str | None, finish: str | None, chunk: bool, first: bool = False,
           logprobs: dict | None = None) -> dict:
    if not req.chat:
        return {"index": 0, "text": text or "", "logprobs": logprobs, "finish_reason": finish}
    if chunk:
        delta = {"role": "assistant", "content": ""} if first else ({"content": text} if text else {})
        return {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
    return {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": logprobs,
            "finish_reason": finish}


def completion(req: CompletionRequest, rid: str, created: int, text: str, end: Finished,
               entries: Sequence[dict] = ()) -> dict:
    """The whole answer of a request with stream: false (entries: its tokens' logprobs)."""
    scores = choice_logprobs(req, entries, 0)
    return {**head(req, rid, created, False), "choices": [choice(req, text, end.finish_reason, False, logprobs=scores)],
            "usage": end.usage.as_dict(), "yggc": end.stats}


def chunk(req: CompletionRequest, rid: str, created: int, text: str | None = None, first: bool = False,
          entries: Sequence[dict] = (), offset: int = 0) -> dict:
    """A streamed piece of text (first=True: the chat stream's opening role chunk) with its tokens' logprobs
    (offset: the streamed text's length before this piece)."""
    scores = None if first else choice_logprobs(req, entries, offset)
    return {**head(req, rid, created, True), "choices": [choice(req, text, None, True, first, scores)]}


def last_chunks(req: CompletionRequest, rid: str, created: int, end: Finished) -> list[dict]:
    """The finishing chunk (finish_reason, stats) and, with stream_options.include_usage, the usage chunk."""
    out = [{**head(req, rid, created, True), "choices": [choice(req, None, end.finish_reason, True)], "yggc": end.stats}]
    if req.include_usage:
        out.append({**head(req, rid, created, True), "choices": [], "usage": end.usage.as_dict()})
    return out


def model_card(model_id: str, created: int) -> dict:
    return {"id": model_id, "object": "model", "created": created, "owned_by": "yggc"}
