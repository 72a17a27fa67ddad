"""Structured output: the tokens a grammar allows next, after the committed tokens and along a draft tree.

Grammars (a JSON schema, any JSON object, GBNF as llama.cpp takes it, Lark, a regex) go through llguidance
(`pip install 'yggc[grammar]'`). A constrained request masks the verifier's logits at every row it verifies
with what the grammar allows after that row's path, so greedy output equals constrained autoregressive
decoding token for token and sampling keeps the constrained distribution; draft nodes the grammar forbids are
ranked last before the tree is pruned to V, so the verify spends its rows on drafts that can be accepted.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import YggcError
from ..tree.token_tree import TokenTree

KINDS = ("json_schema", "json_object", "gbnf", "lark", "regex")
# a new grammar is walked this many tokens in, trying this many of the tokens it allows at each step (probe)
PROBE_STEPS, PROBE_WIDTH = 8, 64
# JSON on one line, as json.dumps writes it: free whitespace lets a small model pad forever (a schema's
# "x-guidance" options override this)
JSON_LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


class GrammarError(YggcError):
    """A request's grammar cannot be followed: malformed, or past llguidance's parser limits on the way."""


def llguidance():
    try:
        import llguidance
    except ImportError:
        raise YggcError("structured output needs llguidance: pip install 'yggc[grammar]'") from None
    return llguidance


@dataclass(frozen=True)
class GrammarSpec:
    kind: str  # one of KINDS
    text: str  # the schema as JSON, the grammar or the regex ("" for json_object)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise YggcError(f"unknown grammar kind {self.kind!r}; kinds are {', '.join(KINDS)}")

    def llguidance_grammar(self) -> str:
        llg = llguidance()
        Matcher = llg.LLMatcher
        if self.kind in ("json_schema", "json_object"):
            try:
                schema = json.loads(self.text) if self.kind == "json_schema" else {"type": "object"}
                return Matcher.grammar_from_json_schema(schema, defaults=JSON_LAYOUT)
            except ValueError as e:
                raise YggcError(f"the JSON schema is not valid JSON or not an object: {e}") from None
        if self.kind == "regex":
            return Matcher.grammar_from_regex(self.text)
        if self.kind == "lark":
            return Matcher.grammar_from_lark(self.text)
        try:
            return Matcher.grammar_from_lark(llg.gbnf_to_lark.gbnf_to_lark(self.text))
        except Exception as e:  # the converter raises bare Exceptions for a grammar it cannot read
            raise YggcError(f"the gbnf is not a grammar yggc can follow: {e}") from None


class GrammarCompiler:
    """Grammars for one model's tokenizer (building llguidance's view of it is slow: made once)."""

    def __init__(self, tokenizer, eos_ids: tuple[int, ...], vocab: int):
        if tokenizer is None:
            raise YggcError("structured output needs the model's tokenizer.json; this model has none")
        if not eos_ids:
            raise YggcError("structured output needs the model's end-of-sequence token; its config names none")
        self.vocab = vocab
        self.lltok = llguidance().LLTokenizer(tokenizer.to_str(), n_vocab=vocab, eos_token=list(eos_ids))

    def constraint(self, spec: GrammarSpec) -> Constraint:
        """A checked grammar state: compiled, then probed a few tokens in (GrammarError if either fails)."""
        matcher = llguidance().LLMatcher(self.lltok, spec.llguidance_grammar(), log_level=0)
        kind = spec.kind.replace("_", " ")
        if matcher.is_error():
            raise GrammarError(f"the {kind} is not a grammar yggc can follow: {first_line(matcher)}")
        constraint = Constraint(matcher, self.vocab)
        error = constraint.probe()
        if error is not None:
            raise GrammarError(f"the {kind} is too large to follow ({error}); give its largest choice fewer "
                               "alternatives, or nest them")
        return constraint


class Constraint:
    """One request's grammar state (an llguidance matcher), advanced by the tokens the request emits."""

    def __init__(self, matcher, vocab: int):
        self.matcher, self.vocab = matcher, vocab

    def allowed(self) -> torch.Tensor:
        """[vocab] bool: the tokens the grammar allows after everything committed so far."""
        return allowed_by(self.matcher, self.vocab)

    def probe(self, steps: int = PROBE_STEPS, width: int = PROBE_WIDTH) -> str | None:
        """Why the grammar fails within `steps` tokens, or None: on a copy of the state, try up to `width` of the
        tokens allowed at each step, then go on with the first. llguidance compiles a grammar lazily, so one past
        its parser limits (thousands of alternatives in one rule) fails only once tokens come; this finds the
        common cases before a request is admitted. The state itself is untouched."""
        matcher = self.matcher.deep_copy()
        for _ in range(steps):
            if matcher.is_stopped():
                return None
            tokens = allowed_by(matcher, self.vocab).nonzero().flatten()[:width].tolist()
            for t in tokens:
                matcher.rollback(matcher.try_consume_tokens([t]))
                if matcher.is_error():
                    return first_line(matcher)
            if not tokens or not matcher.consume_token(tokens[0]):
                return first_line(matcher) if matcher.is_error() else None
        return None

    def mask(self, logits: torch.Tensor) -> torch.Tensor:
        """logits [vocab] -> the same with every token the grammar forbids now at -inf."""
        return logits.masked_fill(~self.allowed().to(logits.device), float("-inf"))

    def commit(self, tokens: list[int]) -> None:
        """Advance by emitted tokens; once the grammar has ended, only the EOS it allows follows (and ends the
        request), which the matcher does not take."""
        for t in tokens:
            if self.matcher.is_stopped():
                return
            if not self.matcher.consume_token(t):
                raise GrammarError(f"the grammar could not go on after token {t} ({first_line(self.matcher)}); "
                                   "simplify the grammar")

    def after(self, path: list[int]) -> torch.Tensor | None:
        """[vocab] bool: the tokens allowed after `path` (from the committed state); None if the grammar forbids
        the path."""
        n = self.matcher.try_consume_tokens(path)
        out = self.allowed() if n == len(path) else None
        self.matcher.rollback(n)
        return out

    def reachable(self, path: list[int]) -> bool:
        n = self.matcher.try_consume_tokens(path)
        self.matcher.rollback(n)
        return n == len(path)

    def masks_after(self, paths: list[list[int]]) -> torch.Tensor:
        """[len(paths), vocab] bool: what the grammar allows after each path. A path it forbids, or one that ended
        it, is never extended by an accepted token (its forbidden token is no masked row's choice, and nothing
        follows the end): it keeps every token, so values computed from its row stay finite."""
        masks = torch.ones(len(paths), self.vocab, dtype=torch.bool)
        for r, path in enumerate(paths):
            allowed = self.after(path)
            if allowed is not None and allowed.any():
                masks[r] = allowed
        return masks

    def tree_masks(self, tokens: list[int], parents: list[int]) -> torch.Tensor:
        """A tree's rows (parents before children, row 0 the committed root) -> [R, vocab] bool: masks_after of
        each row's path."""
        paths: list[list[int]] = [[]]
        for r in range(1, len(tokens)):
            paths.append(paths[parents[r]] + [tokens[r]])
        return self.masks_after(paths)

    def ranked(self, tree: TokenTree) -> TokenTree:
        """The tree with every node the grammar forbids after its parent (and its subtree) ranked last for pruning."""
        n = tree.n_nodes
        tokens, parents = tree.tokens[:n].tolist(), tree.parents[:n].tolist()
        ok = [True] * n
        for i in range(1, n):  # parents before children
            ok[i] = ok[parents[i]] and self.reachable(path_to(i, tokens, parents))
        cum = tree.cum_logp.clone()
        cum[:n] = torch.where(torch.tensor(ok), cum[:n], torch.tensor(float("-inf"), dtype=cum.dtype))
        return TokenTree(tree.tokens, tree.parents, tree.depth, cum, n)



def allowed_by(matcher, vocab: int) -> torch.Tensor:
    """[vocab] bool: the tokens an llguidance matcher allows next."""
    bits = np.unpackbits(np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8), bitorder="little")
    return torch.from_numpy(bits[:vocab].astype(bool))


def first_line(matcher) -> str:
    """The first line of an llguidance matcher's error (the rest dumps its parser state)."""
    return matcher.get_error().strip().splitlines()[0]


def path_to(i: int, tokens: list[int], parents: list[int]) -> list[int]:
    """The tokens from the root's child down to node i (the root's own token is committed already)."""
    path = []
    while i > 0:
        path.append(tokens[i])
        i = parents[i]
    return path[::-1]
