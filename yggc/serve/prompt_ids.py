"""A request's prompt as token ids, checked against the context. Runs in a worker thread (app.py sends it
there with asyncio.to_thread), never on the event loop.

Tokenizing is the one costly step before decoding: so a prompt with more characters than the context
could hold at MAX_CHARS_PER_TOKEN characters a token is refused before any templating or tokenizing,
with the same 400 as a prompt found too long after tokenizing. The tokenizer's batch call encodes: unlike
Tokenizer.encode it releases the GIL, so the event loop keeps answering while a long prompt tokenizes.
"""
from __future__ import annotations

from ..runtime.chat import WHERE, ChatRenderError
from ..runtime.runtime import Runtime
from .api_errors import ApiError, bad_param
from .params import CompletionRequest

MAX_CHARS_PER_TOKEN = 32  # generous: English averages ~4 characters a token, code with indentation ~3
NO_TOKENIZER = "this model has no tokenizer.json, so it cannot read text"


def too_long(param: str, max_seq: int, what: str) -> ApiError:
    return bad_param(param, f"this model's maximum context length is {max_seq} tokens, but the prompt has {what} "
                     "(and needs room for one new token); shorten the prompt", code="context_length_exceeded")


def prompt_chars(req: CompletionRequest) -> int:
    if req.chat:
        return sum(len(m.content) for m in req.messages or ())
    return len(req.prompt) if isinstance(req.prompt, str) else 0


def prompt_text(runtime: Runtime, req: CompletionRequest) -> str:
    """The text to tokenize: the prompt, or the messages through the model's chat template."""
    if runtime.tokenizer is None:
        if req.chat:
            raise bad_param("messages", f"{NO_TOKENIZER}; send the prompt to /v1/completions as a list of token "
                            "ids, e.g. \"prompt\": [1, 2, 3]")
        raise bad_param("prompt", f"{NO_TOKENIZER}; send the prompt as a list of token ids, e.g. "
                        "\"prompt\": [1, 2, 3]")
    if not req.chat:
        return req.prompt
    chat = runtime.verifier.chat
    if chat is None:
        raise bad_param("messages", f"this model has no chat template ({WHERE}); "
                        "send a plain prompt to /v1/completions", code="no_chat_template")
    try:
        return chat.render(req.messages_as_dicts())
    except ChatRenderError as e:
        raise bad_param("messages", f"the model's chat template failed to render these messages ({e.reason}); "
                        "send a plain prompt to /v1/completions") from None


def prompt_ids(runtime: Runtime, req: CompletionRequest) -> list[int]:
    """Token ids of the prompt (through the chat template for chat), checked against the context."""
    param = "messages" if req.chat else "prompt"
    max_seq, vocab = runtime.verifier.layout.max_seq, runtime.verifier.graph.cfg.vocab_size
    chars = prompt_chars(req)
    if chars > max_seq * MAX_CHARS_PER_TOKEN:
        raise too_long(param, max_seq, f"{chars} characters (at most {max_seq * MAX_CHARS_PER_TOKEN} are read)")
    if isinstance(req.prompt, tuple):
        ids = list(req.prompt)
    else:
        text = prompt_text(runtime, req)
        ids = runtime.tokenizer.encode_batch([text])[0].ids
    if len(ids) >= max_seq:
        raise too_long(param, max_seq, f"{len(ids)} tokens")
    bad = [t for t in ids if t >= vocab]
    if bad:
        raise bad_param(param, f"prompt token id {bad[0]} is outside the vocabulary (0..{vocab - 1})")
    return ids
