"""The stdlib corpus of ``yggc train pair``: files, held-out split, held-out prompts, tokenizer.

Corpus
    Every ``*.py`` file below ``sysconfig.get_paths()["stdlib"]`` (present on
    every machine that has Python), read as UTF-8 with undecodable bytes
    dropped.  Excluded: ``site-packages``/``dist-packages``/``__pycache__``;
    test directories (``test``, ``tests``, ``idle_test``: 22 of the 34 MB, full
    of deliberately odd/malformed sources and data, while the ~12 MB of library
    code is already more than the time budgets can consume); ``encodings``
    (generated charmap tables that would fill the BPE vocabulary with junk);
    ``pydoc_data`` and any file over 512 KiB (a giant docs string).
    With ``--corpus-dir`` any directory can stand in for the stdlib.

Held-out split
    A file is held out iff ``sha256(relative POSIX path) mod 20 == 0`` (about
    5% of files).  It depends only on the path relative to the corpus root, so
    it is identical on every call and every machine; held-out files are never
    used to train the tokenizer or the models.  See ``split_files()``.

Held-out prompts
    ``heldout_prompts(n, n_chars)``: the first ~``n_chars`` characters of
    function definitions in held-out files, cut at a line end, round-robin over
    the files (each file's in sha256 order of ``path:line``) -- the stable
    prompt set of ``yggc train evaluate`` and of the demo pair's ``prompts.json``.

Tokenizer
    Byte-level BPE (``tokenizers``, GPT-2 pre-tokenizer regex, lossless
    round-trip), ``--vocab-size`` (4096 for demo/bench), with one special token
    ``<|endoftext|>`` that separates documents and serves as bos, eos and pad.
    ``tokenizer.encode(text)`` prepends ``<|endoftext|>`` (a TemplateProcessing
    post-processor), as every training document is preceded by it;
    ``add_special_tokens=False`` gives the bare tokens.
"""

from __future__ import annotations

import hashlib
import os
import re
import sysconfig
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from tokenizers import Tokenizer

EOT = "<|endoftext|>"
HELDOUT_MODULUS = 20
EXCLUDED_DIRS = frozenset(
    {"site-packages", "dist-packages", "__pycache__", "test", "tests", "idle_test", "encodings", "pydoc_data"}
)
MAX_FILE_BYTES = 512 * 1024


# --------------------------------------------------------------------------- corpus


def stdlib_root() -> Path:
    """The directory of the running interpreter's standard library."""
    return Path(sysconfig.get_paths()["stdlib"]).resolve()


def rel_posix(path: Path, root: Path) -> str:
    return Path(path).relative_to(root).as_posix()


def corpus_files(root: str | Path | None = None) -> list[Path]:
    """All corpus ``.py`` files under ``root`` (default: the stdlib), sorted by relative path."""
    root = Path(root).resolve() if root else stdlib_root()
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in EXCLUDED_DIRS]
        for name in filenames:
            path = Path(dirpath) / name
            if name.endswith(".py") and path.is_file() and path.stat().st_size <= MAX_FILE_BYTES:
                files.append(path)
    return sorted(files, key=lambda p: rel_posix(p, root))


def is_heldout(rel_path: str) -> bool:
    """True iff the file with this relative POSIX path belongs to the evaluation split."""
    digest = hashlib.sha256(rel_path.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % HELDOUT_MODULUS == 0


def split_files(root: str | Path | None = None) -> tuple[list[Path], list[Path]]:
    """``(train_files, heldout_files)``; disjoint, each sorted by relative path."""
    root = Path(root).resolve() if root else stdlib_root()
    train, heldout = [], []
    for path in corpus_files(root):
        (heldout if is_heldout(rel_posix(path, root)) else train).append(path)
    return train, heldout


def heldout_files(root: str | Path | None = None) -> list[Path]:
    return split_files(root)[1]


def read_text(path: str | Path) -> str:
    return Path(path).read_bytes().decode("utf-8", errors="ignore")


# --------------------------------------------------------------------------- held-out prompts


_DEF_RE = re.compile(r"^([ \t]*)(?:async[ \t]+)?def[ \t]+\w+[ \t]*\(", re.M)


@dataclass(frozen=True)
class Prompt:
    path: str  # relative to the corpus root
    line: int  # 1-based line of the ``def``
    text: str


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _function_snippet(text: str, start: int, indent: str, n_chars: int) -> str | None:
    """``text[start:]`` cut to <= n_chars at a line end (trailing blank lines dropped), provided
    that all of it and the next non-blank line lie inside the body of the function at ``start``."""
    window = text[start : start + n_chars + 1]
    cut = window.rfind("\n")
    snippet = window[: max(cut, 0)].rstrip()
    if len(snippet) < n_chars // 2:
        return None
    following = next((line for line in text[start + len(snippet) :].split("\n")[1:] if line.strip()), "")
    for line in snippet.split("\n")[1:] + [following]:
        if not following or (line.strip() and _indent(line) <= len(indent)):
            return None  # the function (or the file) ends inside the window or right after it
    return snippet


def heldout_prompt_records(n: int = 32, n_chars: int = 200, root: str | Path | None = None) -> list[Prompt]:
    """``n`` deterministic prompts from held-out files: round-robin over the files, in sha256 order of ``path:line``."""
    root = Path(root).resolve() if root else stdlib_root()
    cands = []
    for path in heldout_files(root):
        rel, text = rel_posix(path, root), read_text(path)
        for m in _DEF_RE.finditer(text):
            snippet = _function_snippet(text, m.start(), m.group(1), n_chars)
            if snippet is not None:
                line = text.count("\n", 0, m.start()) + 1
                key = hashlib.sha256(f"{rel}:{line}".encode()).hexdigest()
                cands.append((key, Prompt(rel, line, snippet)))
    # round-robin over files (each file's candidates in hash order) so prompts are diverse
    cands.sort(key=lambda kv: (kv[1].path, kv[0]))
    ranked, rank, prev = [], 0, None
    for key, prompt in cands:
        rank = rank + 1 if prompt.path == prev else 0
        ranked.append((rank, key, prompt))
        prev = prompt.path
    ranked.sort(key=lambda r: r[:2])
    return [p for _, _, p in ranked[:n]]


def heldout_prompts(n: int = 32, n_chars: int = 200, root: str | Path | None = None) -> list[str]:
    """Stable held-out prompt texts (the benchmark harness uses these).

    The first ~``n_chars`` characters of function definitions in held-out files, cut at a line
    end (the newline itself is not included), round-robin over the files.  ``tokenizer.encode``
    prepends ``<|endoftext|>`` (bos) by itself.
    """
    return [p.text for p in heldout_prompt_records(n, n_chars, root)]


# --------------------------------------------------------------------------- tokenizer


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> Tokenizer:
    """Byte-level BPE with ``<|endoftext|>`` as the only special token (id 0)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    add_bos_post_processor(tok)
    return tok


def add_bos_post_processor(tok: Tokenizer) -> None:
    """``encode(text)`` (add_special_tokens=True) prepends ``<|endoftext|>`` as bos, like Llama tokenizers."""
    from tokenizers import processors

    eot = tok.token_to_id(EOT)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{EOT} $A", pair=f"{EOT} $A {EOT} $B", special_tokens=[(EOT, eot)]
    )


def load_tokenizer(path: str | Path) -> Tokenizer:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path))


def eot_id(tok: Tokenizer) -> int:
    return tok.token_to_id(EOT)


def encode_documents(tok: Tokenizer, texts: Sequence[str]) -> np.ndarray:
    """``[EOT] doc0 [EOT] doc1 ... [EOT]`` as one uint16 stream."""
    assert tok.get_vocab_size() < 2**16
    eot = eot_id(tok)
    parts = []
    for enc in tok.encode_batch(list(texts), add_special_tokens=False):
        parts.append(np.asarray([eot] + enc.ids, dtype=np.uint16))
    parts.append(np.asarray([eot], dtype=np.uint16))
    return np.concatenate(parts)
