"""The tokenizer and chat template stored in a GGUF file -> tokenizer.json + tokenizer_config.json.

GGUF keeps a BPE tokenizer as lists (tokenizer.ggml.tokens / merges / token_type) plus the name of
its pre-tokenizer regex (tokenizer.ggml.pre, llama.cpp's LLAMA_VOCAB_PRE_TYPE_*). This rebuilds the
same tokenizer with the `tokenizers` library. Supported: byte-level BPE ("gpt2" model) with the
"smollm", "gpt-2" and "default" pre-tokenizers; anything else is one CheckpointError.
"""
from __future__ import annotations

from gguf import GGUFReader, TokenType
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

from .config import CheckpointError

# llama.cpp pre-tokenizer name -> the same split as a `tokenizers` pre-tokenizer
PRE_TOKENIZERS = {
    # smollm: each digit alone, then GPT-2's byte-level regex (llama-vocab.cpp LLAMA_VOCAB_PRE_TYPE_SMOLLM)
    "smollm": lambda: pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                               pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]),
    "gpt-2": lambda: pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    "default": lambda: pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
}


def field(reader: GGUFReader, key: str, default=None):
    """A GGUF metadata value as a Python value (str, int, float, list), or `default` when absent."""
    f = reader.fields.get(key)
    return default if f is None else f.contents()


def gguf_tokenizer(reader: GGUFReader, where: str) -> Tokenizer:
    """The byte-level BPE tokenizer of a GGUF file; CONTROL tokens become special tokens."""
    model = field(reader, "tokenizer.ggml.model")
    if model != "gpt2":
        raise CheckpointError(f"{where}: tokenizer model {model!r} is not supported; yggc imports byte-level BPE "
                              "('gpt2') tokenizers from GGUF")
    pre = field(reader, "tokenizer.ggml.pre", "default")
    if pre not in PRE_TOKENIZERS:
        raise CheckpointError(f"{where}: pre-tokenizer {pre!r} is not supported; yggc imports "
                              f"{', '.join(sorted(PRE_TOKENIZERS))}")
    tokens: list[str] = field(reader, "tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in field(reader, "tokenizer.ggml.merges", [])]
    types = field(reader, "tokenizer.ggml.token_type", [TokenType.NORMAL] * len(tokens))
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges, fuse_unk=False))
    tok.pre_tokenizer = PRE_TOKENIZERS[pre]()
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, kind in zip(tokens, types) if kind == TokenType.CONTROL])
    tok.add_tokens([AddedToken(t, special=False, normalized=False)
                    for t, kind in zip(tokens, types) if kind == TokenType.USER_DEFINED])
    return tok


def gguf_tokenizer_config(reader: GGUFReader) -> dict:
    """tokenizer_config.json as Hugging Face writes it: chat template and the bos/eos token strings."""
    tokens: list[str] = field(reader, "tokenizer.ggml.tokens")
    out: dict = {"add_bos_token": bool(field(reader, "tokenizer.ggml.add_bos_token", False))}
    for name in ("bos", "eos", "unknown", "padding"):
        token_id = field(reader, f"tokenizer.ggml.{name}_token_id")
        if token_id is not None and 0 <= token_id < len(tokens):
            out[{"unknown": "unk_token", "padding": "pad_token"}.get(name, f"{name}_token")] = tokens[token_id]
    template = field(reader, "tokenizer.chat_template")
    if template:
        out["chat_template"] = template
    return out
