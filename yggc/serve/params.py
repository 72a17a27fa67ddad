"""A request body checked field by field into frozen dataclasses (OpenAI's names, defaults and ranges).

Every bad field is an ApiError 400 naming the field. Each endpoint has an allow-list of the fields it
implements (CHAT_FIELDS, TEXT_FIELDS); any other field with a value is refused with a 400 naming it,
so that a request for something yggc does not do (guided_json, ignore_eos, min_tokens, tools, ...) never
gets unconstrained text as if it had been honoured. Some allowed fields are OpenAI
features yggc implements only at their neutral value (n: 1, penalties 0, logit_bias {}, ...): any other
value is refused too. null (and an empty list or object) asks for nothing and is accepted anywhere.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from ..runtime.constraint import GrammarSpec
from .api_errors import ApiError, bad_param, unsupported

MAX_STOP = 4                  # OpenAI allows up to 4 stop sequences
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
TEXT_DEFAULT_MAX_TOKENS = 16  # /v1/completions' default; chat defaults to the rest of the context
MAX_TOP_LOGPROBS = 20         # alternatives per token at most (OpenAI's chat limit)
SHOWN = 80                    # a value quoted in an error message is cut to this many characters

# The fields each endpoint implements. `user` is OpenAI's end-user id for abuse reports: purely
# informational, it changes no answer, so it is accepted and ignored. `stream_options` is honoured
# (include_usage); `cache_prompt` (llama-server's name, default true) lets the request reuse the K/V of the
# last request's longest common prefix; the fields of NEUTRAL are accepted at their neutral value only.
COMMON_FIELDS = frozenset({"model", "stream", "stream_options", "max_tokens", "temperature", "top_p", "top_k",
                           "min_p", "seed", "stop", "user", "n", "frequency_penalty", "presence_penalty",
                           "repetition_penalty", "logit_bias", "logprobs", "cache_prompt", "grammar"})
CHAT_FIELDS = COMMON_FIELDS | {"messages", "max_completion_tokens", "response_format", "top_logprobs"}
TEXT_FIELDS = COMMON_FIELDS | {"prompt", "best_of", "echo", "suffix"}
MESSAGE_FIELDS = frozenset({"role", "content"})  # `name` and tool calls are not rendered: refused
PART_FIELDS = frozenset({"type", "text"})
STREAM_OPTIONS = frozenset({"include_usage"})
# field -> the one value yggc honours (what it does anyway); any other value is refused
NEUTRAL = {"n": 1, "best_of": 1, "frequency_penalty": 0, "presence_penalty": 0, "repetition_penalty": 1,
           "logit_bias": {}, "echo": False, "suffix": ""}


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
    logprobs: int | None = None               # alternatives listed per token's logprob; None: no logprobs
    cache_prompt: bool = True                 # reuse the last request's K/V of the common prefix
    grammar: GrammarSpec | None = None        # response_format (json_object, json_schema) or grammar (GBNF)

    @property
    def grammar_param(self) -> str | None:
        """The field the request's grammar came in, which its errors name."""
        if self.grammar is None:
            return None
        return "grammar" if self.grammar.kind == "gbnf" else "response_format"

    def messages_as_dicts(self) -> list[dict[str, str]]:
        return [{"role": m.role, "content": m.content} for m in self.messages or ()]


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def shown(v: Any) -> str:
    """repr(v) for an error message, cut short (a prompt may be a megabyte)."""
    text = repr(v)
    return text if len(text) <= SHOWN else text[:SHOWN - 3] + "..."


def is_empty(v: Any) -> bool:
    """null, [] or {}: a value that asks for nothing."""
    return v is None or (isinstance(v, list | dict) and not v)


def refuse_unknown(obj: dict, allowed: frozenset[str], where: str, endpoint: str) -> None:
    """400 for the first field outside `allowed` that has a value (`where` prefixes its name: "messages[0].")."""
    for key, value in obj.items():
        if key not in allowed and not is_empty(value):
            name = f"{where}{key}"[:SHOWN]
            raise ApiError(400, f"the field '{name}' is not supported by {endpoint} on yggc serve (it is refused, "
                           "not ignored); remove it", param=name, code="unsupported_parameter")


def is_neutral(v: Any, neutral: Any) -> bool:
    """v asks for what yggc does anyway (True is not 1 and 0 is not False here)."""
    if isinstance(v, bool) or isinstance(neutral, bool):
        return v is neutral
    return (type(v) is type(neutral) or (is_number(v) and is_number(neutral))) and v == neutral


def finite(v: int | float) -> bool:
    """A JSON number a float holds (an integer literal of 400 digits does not)."""
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def number(body: dict, key: str, default: float, low: float, high: float, low_open: bool = False) -> float:
    v = body.get(key)
    if v is None:
        return default
    if not is_number(v) or not finite(v) or v > high or v < low or (low_open and v == low):
        bound = "(" if low_open else "["
        raise bad_param(key, f"{key} must be a number in {bound}{low:g}, {high:g}], got {shown(v)}")
    return float(v)


def whole(body: dict, key: str, low: int, high: int | None = None) -> int | None:
    v = body.get(key)
    if v is None:
        return None
    if not is_int(v) or v < low or (high is not None and v >= high):
        raise bad_param(key, f"{key} must be an integer >= {low}" + (f" and < {high}" if high else "") + f", got {shown(v)}")
    return v


def stops(body: dict) -> tuple[str, ...]:
    v = body.get("stop")
    if v is None:
        return ()
    items = [v] if isinstance(v, str) else v
    if not isinstance(items, list) or not all(isinstance(s, str) and s for s in items) or len(items) > MAX_STOP:
        raise bad_param("stop", f"stop must be a non-empty string or a list of up to {MAX_STOP} of them, "
                        f"got {shown(v)}")
    return tuple(items)


def refuse_unsupported(body: dict, chat: bool) -> None:
    """A 400 for every field that would change the answer in a way yggc cannot honour."""
    endpoint = "/v1/chat/completions" if chat else "/v1/completions"
    refuse_unknown(body, CHAT_FIELDS if chat else TEXT_FIELDS, "", endpoint)
    for key, neutral in NEUTRAL.items():
        v = body.get(key)
        if v is not None and not is_neutral(v, neutral):
            raise unsupported(key, f"{key} other than {neutral!r}")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise bad_param("stream_options", f"stream_options must be an object, got {shown(options)}")
    refuse_unknown(options or {}, STREAM_OPTIONS, "stream_options.", endpoint)


def response_format(fmt: Any) -> GrammarSpec | None:
    """{"type": "text"} (what yggc writes anyway), "json_object", or "json_schema" with json_schema.schema."""
    if is_empty(fmt):
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return GrammarSpec("json_object", "")
    spec = fmt.get("json_schema") if kind == "json_schema" else None
    schema = spec.get("schema") if isinstance(spec, dict) else None
    if isinstance(schema, dict):
        return GrammarSpec("json_schema", json.dumps(schema))
    raise bad_param("response_format", "response_format must be {'type': 'text'}, {'type': 'json_object'} or "
                    "{'type': 'json_schema', 'json_schema': {'name': ..., 'schema': {...}}}, got " + shown(fmt))


def grammar_of(body: dict, chat: bool) -> GrammarSpec | None:
    """Chat's response_format, or `grammar` (GBNF, as llama-server takes it) on either endpoint."""
    fmt = response_format(body.get("response_format")) if chat else None
    text = body.get("grammar")
    if text is None:
        return fmt
    if not isinstance(text, str) or not text.strip():
        raise bad_param("grammar", f"grammar must be a GBNF grammar (a non-empty string), got {shown(text)}")
    if fmt is not None:
        raise bad_param("grammar", "give a grammar or a JSON response_format, not both")
    return GrammarSpec("gbnf", text)


def sampling(body: dict, chat: bool) -> Sampling:
    top_p = number(body, "top_p", 1.0, 0.0, 1.0, low_open=True)
    max_tokens = whole(body, "max_tokens", 1)
    if chat and body.get("max_completion_tokens") is not None:
        max_tokens = whole(body, "max_completion_tokens", 1)
    return Sampling(max_tokens=max_tokens, temperature=number(body, "temperature", 1.0, 0.0, 2.0), top_p=top_p,
                    top_k=whole(body, "top_k", 0) or 0, min_p=number(body, "min_p", 0.0, 0.0, 1.0),
                    seed=whole(body, "seed", 0, 2**63), stop=stops(body))


def logprobs_of(body: dict, chat: bool) -> int | None:
    """Chat: logprobs (true/false) and top_logprobs (0..20); completions: logprobs = the alternatives (0..20).
    -> how many alternatives each token lists, or None for no logprobs."""
    if not chat:
        return whole(body, "logprobs", 0, MAX_TOP_LOGPROBS + 1)
    on = body.get("logprobs")
    if not isinstance(on, bool | None):
        raise bad_param("logprobs", f"logprobs must be true or false, got {shown(on)}")
    top = whole(body, "top_logprobs", 0, MAX_TOP_LOGPROBS + 1)
    if top and not on:
        raise bad_param("top_logprobs", "top_logprobs lists alternatives of each token's logprob: set logprobs "
                        "to true as well")
    return (top or 0) if on else None


def flag(body: dict, key: str, default: bool) -> bool:
    v = body.get(key)
    if not isinstance(v, bool | None):
        raise bad_param(key, f"{key} must be true or false, got {shown(v)}")
    return default if v is None else v


def text_of(content: Any, i: int) -> str:
    """A message's content: a string, or OpenAI's list of {"type": "text", "text": ...} parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        for j, part in enumerate(content):
            refuse_unknown(part, PART_FIELDS, f"messages[{i}].content[{j}].", "/v1/chat/completions")
        if all(p.get("type") == "text" and isinstance(p.get("text"), str) for p in content):
            return "\n".join(p["text"] for p in content)
        raise unsupported(f"messages[{i}].content", "content other than text")
    raise bad_param(f"messages[{i}].content", f"messages[{i}].content must be a string, got {shown(content)}")


def messages_of(body: dict) -> tuple[ChatMessage, ...]:
    v = body.get("messages")
    if not isinstance(v, list) or not v:
        raise bad_param("messages", "messages must be a non-empty list of {'role': ..., 'content': ...}",
                        code="missing_required_parameter" if v is None else "invalid_value")
    out = []
    for i, m in enumerate(v):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or m["role"] not in ROLES:
            role = m.get("role") if isinstance(m, dict) else m
            raise bad_param(f"messages[{i}]", f"messages[{i}] must have a role of {', '.join(ROLES)}, got "
                            f"{shown(role)}")
        refuse_unknown(m, MESSAGE_FIELDS, f"messages[{i}].", "/v1/chat/completions")
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
    stream = flag(body, "stream", False)
    options = body.get("stream_options")
    return CompletionRequest(chat=chat, model=model, prompt=None if chat else prompt_of(body),
                             messages=messages_of(body) if chat else None, sampling=sampling(body, chat),
                             stream=stream, include_usage=bool(stream and (options or {}).get("include_usage")),
                             logprobs=logprobs_of(body, chat), cache_prompt=flag(body, "cache_prompt", True),
                             grammar=grammar_of(body, chat))
