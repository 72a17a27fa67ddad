"""Chat prompts: a model's chat template (tokenizer_config.json's `chat_template`, as GGUF imports and older
transformers store it, or chat_template.jinja beside it, as transformers 5 saves it) rendered in a sandboxed Jinja
environment, the way transformers' apply_chat_template does.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..errors import YggcError

CONFIG_FILE = "tokenizer_config.json"
TEMPLATE_FILE = "chat_template.jinja"  # where transformers 5's save_pretrained puts the template
WHERE = f"{CONFIG_FILE} chat_template or {TEMPLATE_FILE}"  # for messages that say where a template is looked for
ROLES = ("system", "user", "assistant")


class ChatRenderError(YggcError):
    """The template failed on these messages; `reason` is Jinja's words, without the CLI's advice."""

    def __init__(self, reason: str):
        super().__init__(f"the model's chat template failed to render ({reason}); pass a plain prompt with -p")
        self.reason = reason


@dataclass(frozen=True)
class ChatTemplate:
    source: str          # the Jinja template text
    bos_token: str = ""
    eos_token: str = ""  # the end-of-turn token generation stops at

    def render(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """The prompt text for `messages` ([{"role", "content"}, ...]), ending where the assistant speaks."""
        from jinja2 import TemplateError

        check_messages(messages)
        try:
            return compiled(self.source).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                                bos_token=self.bos_token, eos_token=self.eos_token)
        except TemplateError as e:
            raise ChatRenderError(str(e)) from None


@lru_cache(maxsize=8)
def compiled(source: str):
    """A template compiled once, in Jinja's sandbox (as transformers' apply_chat_template does)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    return ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(source)


def check_messages(messages: list[dict[str, str]]) -> None:
    if not messages:
        raise YggcError("a chat needs at least one message")
    for m in messages:
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise YggcError(f"a chat message is {{'role': one of {', '.join(ROLES)}, 'content': text}}, got {m!r}")


def load_chat_template(model_dir: str | Path) -> ChatTemplate | None:
    """The model folder's chat template, or None when it has none: tokenizer_config.json's `chat_template`, else
    the text of chat_template.jinja; the bos/eos token strings come from tokenizer_config.json either way."""
    folder = Path(model_dir)
    cfg = read_tokenizer_config(folder / CONFIG_FILE)
    template = cfg.get("chat_template")
    if not isinstance(template, str) and (folder / TEMPLATE_FILE).is_file():
        template = (folder / TEMPLATE_FILE).read_text(encoding="utf-8")
    if not isinstance(template, str):
        return None
    token = lambda key: cfg[key] if isinstance(cfg.get(key), str) else ""  # noqa: E731
    return ChatTemplate(template, token("bos_token"), token("eos_token"))


def read_tokenizer_config(path: Path) -> dict:
    """tokenizer_config.json's fields, {} where the file is missing."""
    if not path.is_file():
        return {}
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise YggcError(f"{path} is not valid JSON ({e})") from None
    if not isinstance(cfg, dict):
        raise YggcError(f"{path} holds {type(cfg).__name__}, not a JSON object; restore the model's own file")
    return cfg
