"""A request body checked field by field into frozen dataclasses (OpenAI's names, defaults and ranges).

Every bad field is an ApiError 400 naming the field. OpenAI features yggc does not implement (n > 1,
logprobs, penalties, logit_bias, tools, ...) are refused with a 400 rather than silently ignored;
fields with no effect on decoding (user, metadata, ...) are accepted and ignored, as llama.cpp's
server does.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .api_errors import ApiError, bad_param, unsupported

MAX_STOP = 4                  # OpenAI allows up to 4 stop sequences
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
NEUTRAL = {"frequency_penalty": 0, "presence_penalty": 0, "repetition_penalty": 1}  # accepted: no effect
TEXT_DEFAULT_MAX_TOKENS = 16  # /v1/completions' default; chat defaults to the rest of the context


@dataclass(frozen=True)
class Sampling:
    max_tokens: int | None   # new tokens at most; None: the endpoint's default
    temperature: float       # 0 = greedy; OpenAI's default is 1
    top_p: float             # nucleus mass, (0, 1]
    top_k: int               # 0 = off (an extension, as in vLLM and llama.cpp)
    min_p: float             # 0 = off (an extension, as in vLLM and llama.cpp)
    seed: int | None         # the same seed gives the same text at temperature > 0
    stop: tuple[str, ...]    # the text ends before the first of these


@dataclass(frozen=True)
class ChatMessage:
    role: str     # system, user or assistant (OpenAI's developer role is a system message)
    content: str


@dataclass(frozen=True)
class CompletionRequest:
    chat: bool                                # /v1/chat/completions (messages) or /v1/completions (prompt)
    model: str
    prompt: str | tuple[int, ...] | None      # text or token ids (completions)
    messages: tuple[ChatMessage, ...] | None  # (chat)
    sampling: Sampling
    stream: bool
    include_usage: bool                       # stream_options.include_usage: a last chunk with usage

    def messages_as_dicts(self) -> list[dict[str, str]]:
        return [{"role": m.role, "content": m.content} for m in self.messages or ()]


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def number(body: dict, key: str, default: float, low: float, high: float, low_open: bool = False) -> float:
    v = body.get(key)
    if v is None:
        return default
    if not is_number(v) or not math.isfinite(v) or v > high or v < low or (low_open and v == low):
        bound = "(" if low_open else "["
        raise bad_param(key, f"{key} must be a number in {bound}{low:g}, {high:g}], got {v!r}")
    return float(v)


def whole(body: dict, key: str, low: int, high: int | None = None) -> int | None:
    v = body.get(key)
    if v is None:
        return None
    if not is_int(v) or v < low or (high is not None and v >= high):
        raise bad_param(key, f"{key} must be an integer >= {low}" + (f" and < {high}" if high else "") + f", got {v!r}")
    return v


def stops(body: dict) -> tuple[str, ...]:
    v = body.get("stop")
    if v is None:
        return ()
    items = [v] if isinstance(v, str) else v
    if not isinstance(items, list) or not all(isinstance(s, str) and s for s in items) or len(items) > MAX_STOP:
        raise bad_param("stop", f"stop must be a non-empty string or a list of up to {MAX_STOP} of them, got {v!r}")
    return tuple(items)


def refuse_unsupported(body: dict, chat: bool) -> None:
    """A 400 for every field that would change the answer in a way yggc cannot honour."""
    if body.get("n") not in (None, 1):
        raise unsupported("n", "n > 1 (several choices per request)")
    if body.get("best_of") not in (None, 1):
        raise unsupported("best_of", "best_of > 1")
    for key in ("logprobs", "top_logprobs", "echo", "suffix", "tools", "functions", "tool_choice", "function_call"):
        if body.get(key) not in (None, False, [], ""):
            raise unsupported(key, key)
    for key, neutral in NEUTRAL.items():
        if body.get(key) not in (None, neutral):
            raise unsupported(key, f"{key} other than {neutral}")
    if body.get("logit_bias") not in (None, {}):
        raise unsupported("logit_bias", "logit_bias")
    fmt = body.get("response_format")
    if fmt is not None and fmt != {"type": "text"}:
        raise unsupported("response_format", "response_format other than {'type': 'text'}")
    if not chat and body.get("max_completion_tokens") is not None:
        raise bad_param("max_completion_tokens", "/v1/completions takes max_tokens", code="unknown_parameter")


def sampling(body: dict, chat: bool) -> Sampling:
    top_p = number(body, "top_p", 1.0, 0.0, 1.0, low_open=True)
    max_tokens = whole(body, "max_tokens", 1)
    if chat and body.get("max_completion_tokens") is not None:
        max_tokens = whole(body, "max_completion_tokens", 1)
    return Sampling(max_tokens=max_tokens, temperature=number(body, "temperature", 1.0, 0.0, 2.0), top_p=top_p,
                    top_k=whole(body, "top_k", 0) or 0, min_p=number(body, "min_p", 0.0, 0.0, 1.0),
                    seed=whole(body, "seed", 0, 2**63), stop=stops(body))


def text_of(content: Any, i: int) -> str:
    """A message's content: a string, or OpenAI's list of {"type": "text", "text": ...} parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        if all(p.get("type") == "text" and isinstance(p.get("text"), str) for p in content):
            return "\n".join(p["text"] for p in content)
        raise unsupported(f"messages[{i}].content", "content other than text")
    raise bad_param(f"messages[{i}].content", f"messages[{i}].content must be a string, got {content!r}")


def messages_of(body: dict) -> tuple[ChatMessage, ...]:
    v = body.get("messages")
    if not isinstance(v, list) or not v:
        raise bad_param("messages", "messages must be a non-empty list of {'role': ..., 'content': ...}",
                        code="missing_required_parameter" if v is None else "invalid_value")
    out = []
    for i, m in enumerate(v):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise bad_param(f"messages[{i}]", f"messages[{i}] must have a role of {', '.join(ROLES)}, got {m!r}")
        out.append(ChatMessage(ROLES[m["role"]], text_of(m.get("content"), i)))
    return tuple(out)


def prompt_of(body: dict) -> str | tuple[int, ...]:
    """One prompt: text or token ids, bare or as a one-element list (batches are refused)."""
    v = body.get("prompt")
    if isinstance(v, list) and len(v) == 1 and isinstance(v[0], str | list):
        v = v[0]
    if isinstance(v, str) and v:
        return v
    if isinstance(v, list) and v and all(is_int(t) and t >= 0 for t in v):
        return tuple(v)
    if isinstance(v, list) and len(v) > 1 and all(isinstance(t, str | list) for t in v):
        raise unsupported("prompt", "several prompts in one request")
    raise bad_param("prompt", "prompt must be a non-empty string or a list of token ids",
                    code="missing_required_parameter" if v is None else "invalid_value")


def parse_request(body: Any, chat: bool) -> CompletionRequest:
    """The JSON body of /v1/chat/completions (chat=True) or /v1/completions, checked."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad_param("model", "model must name the served model (GET /v1/models lists it)",
                        code="missing_required_parameter")
    refuse_unsupported(body, chat)
    stream = body.get("stream", False)
    if not isinstance(stream, bool | None):
        raise bad_param("stream", f"stream must be true or false, got {stream!r}")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise bad_param("stream_options", f"stream_options must be an object, got {options!r}")
    return CompletionRequest(chat=chat, model=model, prompt=None if chat else prompt_of(body),
                             messages=messages_of(body) if chat else None, sampling=sampling(body, chat),
                             stream=bool(stream), include_usage=bool(stream and (options or {}).get("include_usage")))
