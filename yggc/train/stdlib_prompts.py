"""Chat prompts for distilling a drafter (``yggc train drafter``), made from material on every machine.

Every function and class with a docstring in the Python standard library (the corpus of corpus.py)
becomes one instruction, phrased by one of TEMPLATES: write this function, explain this code, what
does module.name do, summarise this docstring, ... The template, and the order of the prompts, are
pure functions of the object's path and name, so the set is identical on every call on one Python
version.

Each instruction also has a reference answer made from the object's own docstring and code
(`build_pairs`): teacher-forced text for ``yggc train eagle3``'s --reference conversations, where the
verifier's own answers are what 2 cores make slowly.

Held-out split: corpus.py's (sha256 of the file's relative path mod 20 == 0). Prompts from held-out
files are never used for training; they are the benchmark's chat prompts.
"""
from __future__ import annotations

import ast
import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import YggcError
from .corpus import corpus_files, is_heldout, read_text, rel_posix, stdlib_root
from .human_prompts import is_prompt_set, prompt_set_splits

MAX_CODE_CHARS = 700
MAX_DOC_CHARS = 500
LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")  # a line and its end, as ast splits source

TEMPLATES = (
    "Write a Python function `{name}{signature}` that does the following: {summary}",
    "What does `{module}.{name}` in the Python standard library do? Answer briefly.",
    "Explain what this Python code does:\n\n```python\n{code}\n```",
    "Write a docstring for this Python function:\n\n```python\n{code_nodoc}\n```",
    "Summarize the following documentation in two sentences:\n\n{doc}",
    "Give a short example of how to use `{module}.{name}` in Python.",
    "Rewrite this Python code so that it is easier to read, and explain the changes:\n\n```python\n{code}\n```",
    "{summary} How would you do that in Python? Show a short example.",
)

# one reference answer per template, in TEMPLATES order
ANSWERS = (
    "```python\n{code}\n```",
    "`{module}.{name}`: {summary}",
    "{doc}",
    '```python\n"""{doc}"""\n```',
    "{summary}",
    "```python\nfrom {module} import {name}\n```\n\n{summary}",
    "```python\n{code_nodoc}\n```",
    "```python\n{code}\n```",
)


@dataclass(frozen=True)
class DocItem:
    path: str       # relative to the stdlib root
    module: str     # dotted module name
    name: str
    signature: str  # "(a, b=1)" for functions, "" for classes
    doc: str        # the whole docstring, cut to MAX_DOC_CHARS
    code: str       # the source, cut to MAX_CODE_CHARS at a line end
    code_nodoc: str # the source without its docstring

    @property
    def key(self) -> str:
        return hashlib.sha256(f"{self.path}:{self.name}".encode()).hexdigest()


def cut_lines(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters at a line end."""
    if len(text) <= limit:
        return text
    return text[: text.rfind("\n", 0, limit) + 1 or limit].rstrip()


def module_name(rel: str) -> str:
    """"a/b/__init__.py" -> "a.b"; "a/c.py" -> "a.c"."""
    parts = rel.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def without_docstring(source: str, node: ast.AST) -> str:
    """The source of `node` with its docstring's lines left out."""
    doc = node.body[0]
    lines = source.split("\n")
    start, end = doc.lineno - node.lineno, doc.end_lineno - node.lineno
    return "\n".join(lines[:start] + lines[end + 1:])


def source_segment(lines: list[str], node: ast.stmt) -> str:
    """ast.get_source_segment(text, node) for lines = LINE.findall(text), the file split once: that function
    splits the whole file again at every call, which made reading the stdlib take most of a minute."""
    first, last = node.lineno - 1, node.end_lineno - 1
    if first == last:
        return lines[first].encode()[node.col_offset:node.end_col_offset].decode()
    return "".join([lines[first].encode()[node.col_offset:].decode(), *lines[first + 1:last],
                    lines[last].encode()[:node.end_col_offset].decode()])


def doc_items(path: Path, root: Path) -> Iterator[DocItem]:
    """Public top-level functions and classes of one file that have a docstring of a sentence or more."""
    text, rel = read_text(path), rel_posix(path, root)
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return
    lines = LINE.findall(text)
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) or node.name.startswith("_"):
            continue
        doc = ast.get_docstring(node)
        if not doc or len(doc) < 40:
            continue
        source = source_segment(lines, node)
        signature = f"({ast.unparse(node.args)})" if isinstance(node, ast.FunctionDef) else ""
        yield DocItem(rel, module_name(rel), node.name, signature, cut_lines(doc, MAX_DOC_CHARS),
                      cut_lines(source, MAX_CODE_CHARS), cut_lines(without_docstring(source, node), MAX_CODE_CHARS))


def phrase(item: DocItem, templates: tuple[str, ...]) -> str:
    """The item phrased by the template its key picks (the same index in TEMPLATES and ANSWERS)."""
    template = templates[int(item.key[:8], 16) % len(templates)]
    summary = item.doc.split("\n\n")[0].replace("\n", " ").strip()
    return template.format(name=item.name, signature=item.signature, module=item.module, summary=summary,
                           code=item.code, code_nodoc=item.code_nodoc, doc=item.doc)


def instruction(item: DocItem) -> str:
    """The chat instruction made from `item`."""
    return phrase(item, TEMPLATES)


def sorted_items(heldout: bool, root: Path | None) -> list[DocItem]:
    """The training (heldout=False) or held-out items, in a fixed pseudo-random order."""
    root = Path(root).resolve() if root else stdlib_root()
    items = [item for path in corpus_files(root) if is_heldout(rel_posix(path, root)) == heldout
             for item in doc_items(path, root)]
    return sorted(items, key=lambda item: item.key)


def build_prompts(heldout: bool, root: Path | None = None) -> list[str]:
    """The training (heldout=False) or held-out instructions, in a fixed pseudo-random order."""
    return [instruction(item) for item in sorted_items(heldout, root)]


def build_pairs(heldout: bool, root: Path | None = None) -> list[tuple[str, str]]:
    """build_prompts' instructions, in the same order, each with its reference answer."""
    return [(instruction(item), phrase(item, ANSWERS)) for item in sorted_items(heldout, root)]


def read_chat_prompts(path: Path) -> dict[str, list[str]]:
    """The chat prompts of a --chat-prompts file by split: a chat_prompts.json of `yggc train prompts` (its
    "train" and "heldout" lists: splits "train" and "heldout-chat") or a human-written prompt set (human_prompts.py:
    "train", "heldout-mtbench", "heldout-human"); one clear error otherwise."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise YggcError(f"--chat-prompts {path}: cannot read it as JSON ({e})") from None
    if is_prompt_set(raw):
        return prompt_set_splits(raw, str(path))
    splits = {}
    for split, name in (("train", "train"), ("heldout", "heldout-chat")):
        prompts = raw.get(split) if isinstance(raw, dict) else None
        if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
            raise YggcError(f"--chat-prompts {path}: not a chat_prompts.json of `yggc train prompts` or a prompt set "
                            f"('{split}' is not a list of texts)")
        splits[name] = prompts
    return splits


def interleave(a: list[str], b: list[str], every: int = 1) -> list[str]:
    """`every` items of a, then one of b, and so on; then the rest of the longer list."""
    out, j = [], 0
    for i, item in enumerate(a):
        out.append(item)
        if (i + 1) % every == 0 and j < len(b):
            out.append(b[j])
            j += 1
    return out + b[j:]


def prompt_splits(corpus: Path | None, chat_prompts: Path | None) -> dict[str, list[str]]:
    """Data split -> its prompt texts: the stdlib prompts (build_prompts), and with --chat-prompts its training
    prompts interleaved with the stdlib ones (one to one for a chat_prompts.json, as its data folders were made;
    two to one for a prompt set, so that chat makes most of the batches) and its held-out splits."""
    splits = {"train": build_prompts(False, corpus), "heldout": build_prompts(True, corpus)}
    if chat_prompts is not None:
        chat = read_chat_prompts(chat_prompts)
        every = 2 if "heldout-mtbench" in chat else 1
        splits["train"] = interleave(chat.pop("train"), splits["train"], every)
        splits |= chat
    return splits
