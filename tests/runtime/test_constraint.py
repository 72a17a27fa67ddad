"""Structured output inside trees (runtime/constraint.py): greedy tree decoding under a grammar equals
constrained autoregressive decoding token for token for both drafter kinds, sampling keeps the constrained
distribution (chi-square), forbidden drafts are ranked last, and a bad grammar is one clear error."""
import json
import re

import pytest
import torch
from checkpoints import write_checkpoint
from test_speculative import chi2_pvalue
from tokenizers import Tokenizer
from yggc.graphs import load_model
from yggc.graphs.eagle3_checkpoint import head_base_config, new_eagle3, save_eagle3

from yggc.artifacts.cache_layout import CacheLayout, causal_rows
from yggc.errors import YggcError
from yggc.plan.shape import TreeShape
from yggc.runtime import drafters
from yggc.runtime.autoregressive import AutoregressiveDecoder
from yggc.runtime.constraint import GrammarCompiler, GrammarError, GrammarSpec, allowed_by
from yggc.runtime.drafters import speculative_decoder
from yggc.runtime.drafters.suffix_proposer import SuffixDrafter, SuffixProposer
from yggc.runtime.speculative import SpeculativeDecoder
from yggc.tree.sampling import SamplingParams, target_probs
from yggc.tree.token_tree import TokenTree

pytest.importorskip("llguidance")

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}, "n": {"type": "integer"}},
          "required": ["name", "n"], "additionalProperties": False}
SPECS = {"json_schema": GrammarSpec("json_schema", json.dumps(SCHEMA)), "json_object": GrammarSpec("json_object", ""),
         "regex": GrammarSpec("regex", "[a-f]{2,6}( [a-f]{2,6}){1,3}"),
         "gbnf": GrammarSpec("gbnf", 'root ::= ("yes" | "no") " " [0-9] [0-9]? [0-9]?')}
EOS = 0  # the test checkpoints' <|endoftext|>


@pytest.fixture(scope="module")
def models(ckpt_root):
    """(verifier, standalone drafter, EAGLE-3 pair, grammar compiler, layout) over the 301-token test vocabulary."""
    root = ckpt_root / "constraint"
    v = write_checkpoint(root / "v", "llama_gqa", seed=41)
    d = write_checkpoint(root / "d", "llama_gqa", seed=42, base=v, noise=0.03)
    head = new_eagle3(v, torch.arange(301), 2, seed=43, init_std=0.3)
    head_dir = save_eagle3(head, head_base_config(v), root / "head")
    layout = CacheLayout(192, align=32)
    verifier, drafter = load_model(v, layout.n_slots), load_model(d, layout.n_slots)
    e3 = drafters.load_pair(v, head_dir, torch.float32, layout.max_seq)
    compiler = GrammarCompiler(Tokenizer.from_file(str(v / "tokenizer.json")), (EOS,), verifier.cfg.vocab_size)
    return verifier, drafter, e3, compiler, layout


def decode(dec, prompt, constraint, n=48, params=SamplingParams()) -> list[int]:
    dec.constraint = constraint
    try:
        return [t for chunk in dec.stream(prompt, n, params, (EOS,)) for t in chunk]
    finally:
        dec.constraint = None


@pytest.mark.parametrize("kind", list(SPECS))
def test_greedy_trees_under_a_grammar_equal_constrained_ar(models, kind):
    verifier, drafter, (e3_verifier, e3_head), compiler, layout = models
    tokenizer = Tokenizer.from_file(str(e3_verifier.path / "tokenizer.json"))
    spec, finished = SPECS[kind], 0
    for seed in range(3):
        prompt = torch.randint(1, 300, (5 + 4 * seed,), generator=torch.Generator().manual_seed(seed)).tolist()
        ref = decode(AutoregressiveDecoder(verifier, layout), prompt, compiler.constraint(spec))
        assert ref != decode(AutoregressiveDecoder(verifier, layout), prompt, None)  # the grammar changes the text
        for shape in (TreeShape(3, 2, 5), TreeShape(4, 1, 4), TreeShape(2, 4, 7)):
            tree = speculative_decoder(verifier, drafter, layout, shape)
            assert decode(tree, prompt, compiler.constraint(spec)) == ref, f"{kind} {shape} seed {seed}"
            assert tree.stats.n_accept > 0
        head = drafters.speculative_decoder(e3_verifier.graph, e3_head.graph, layout, TreeShape(3, 2, 5))
        assert decode(head, prompt, compiler.constraint(spec)) == ref, f"{kind} EAGLE-3 seed {seed}"
        suffix = SpeculativeDecoder(SuffixProposer(verifier, SuffixDrafter(min_n=1), layout, TreeShape(4, 2, 6)))
        assert decode(suffix, prompt, compiler.constraint(spec)) == ref, f"{kind} suffix drafts seed {seed}"
        if ref[-1] == EOS:  # the grammar was completed: the text is in its language
            finished += 1
            text = tokenizer.decode(ref[:-1])
            if kind.startswith("json"):
                value = json.loads(text)
                assert isinstance(value, dict) and (kind == "json_object" or set(value) == {"name", "n"})
            elif kind == "regex":
                assert re.fullmatch(spec.text, text)
            else:
                assert re.fullmatch(r"(yes|no) [0-9]{1,3}", text)
    if kind in ("regex", "gbnf"):  # short languages: every answer finishes within the budget
        assert finished == 3


def exact_two(verifier, layout, context: list[int], compiler, spec, params) -> torch.Tensor:
    """The constrained joint distribution [vocab * vocab] of the two tokens after `context`."""
    def probs_after(tokens: list[int]) -> torch.Tensor:
        seq = context + tokens
        s = torch.arange(len(seq))
        logits = verifier(torch.tensor(seq), s, s, causal_rows(s, layout.n_slots))[-1]
        c = compiler.constraint(spec)
        c.commit(tokens)
        return target_probs(c.mask(logits), params).double()

    with torch.inference_mode():
        p1 = probs_after([])
        vocab = p1.shape[0]
        joint = torch.zeros(vocab, vocab, dtype=torch.float64)
        for t in torch.nonzero(p1).flatten().tolist():
            joint[t] = p1[t] * probs_after([t])
    return joint.flatten()


@pytest.mark.parametrize("shape", [TreeShape(2, 3, 5), TreeShape(3, 1, 3)])
def test_sampling_under_a_grammar_keeps_the_constrained_distribution(models, shape):
    verifier, drafter, _, compiler, layout = models
    spec, params = GrammarSpec("regex", "[a-c]+ [a-c]+"), SamplingParams(temperature=1.0)
    prompt = [17, 5, 88, 3]
    probs = exact_two(verifier, layout, prompt, compiler, spec, params)
    assert (probs > 0).sum() > 4  # several constrained continuations
    dec = speculative_decoder(verifier, drafter, layout, shape)
    vocab = verifier.cfg.vocab_size
    counts = torch.zeros(vocab * vocab, dtype=torch.float64)
    for seed in range(1000):
        a, b = decode(dec, prompt, compiler.constraint(spec), n=2,
                      params=SamplingParams(temperature=1.0, seed=seed))
        counts[a * vocab + b] += 1
    assert counts[probs == 0].sum() == 0  # nothing the grammar forbids
    assert chi2_pvalue(counts, probs) > 1e-3


def test_forbidden_drafts_are_ranked_last(models):
    *_, compiler, _ = models
    c = compiler.constraint(GrammarSpec("regex", "ab+"))
    tok = Tokenizer.from_file(str(models[2][0].path / "tokenizer.json"))
    a, b, z = (tok.token_to_id(ch) for ch in "abz")
    # root -> a (ok) -> b (ok); root -> z (forbidden) -> b (under a forbidden parent); a -> z (forbidden)
    tree = TokenTree(torch.tensor([7, a, z, b, b, z]), torch.tensor([-1, 0, 0, 1, 2, 1]),
                     torch.tensor([0, 1, 1, 2, 2, 2]), torch.tensor([0.0, -0.5, -0.1, -0.9, -0.2, -0.3]), 6)
    ranked = c.ranked(tree)
    assert ranked.cum_logp.tolist() == pytest.approx([0.0, -0.5, float("-inf"), -0.9, float("-inf"), float("-inf")])
    masks = c.tree_masks([7, a, b], [-1, 0, 1])
    assert masks[0].nonzero().flatten().tolist() == [a] and b in masks[1].nonzero().flatten().tolist()
    assert EOS in masks[2].nonzero().flatten().tolist() and a not in masks[2].nonzero().flatten().tolist()


@pytest.mark.parametrize("spec, message", [
    (GrammarSpec("json_schema", "{not json"), "the JSON schema is not valid JSON"),
    (GrammarSpec("lark", "start: ("), "the lark is not a grammar yggc can follow"),
    (GrammarSpec("gbnf", 'root ::= "a" undefined'), "the gbnf is not a grammar yggc can follow"),
])
def test_a_bad_grammar_is_one_error_line(models, spec, message):
    compiler = models[3]
    with pytest.raises(YggcError) as e:
        compiler.constraint(spec)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_a_grammar_past_the_parser_limits_is_refused_when_made(models):
    """llguidance compiles lazily: 3,000 alternatives in one rule pass LLMatcher and fail at the first token
    (more than 2,000 items in a parser row). The probe finds it before any token, and leaves a grammar that
    passes where it was."""
    compiler = models[3]
    with pytest.raises(GrammarError) as e:
        compiler.constraint(GrammarSpec("gbnf", "root ::= " + " | ".join(f'"{i}"' for i in range(3000))))
    assert str(e.value).startswith("the gbnf is too large to follow (") and "\n" not in str(e.value)
    assert "max is 2000" in str(e.value)
    fine = GrammarSpec("gbnf", "root ::= " + " | ".join(f'"{i}"' for i in range(1000)))
    probed = compiler.constraint(fine)
    start = probed.matcher.deep_copy()
    start.reset()
    assert torch.equal(probed.allowed(), allowed_by(start, compiler.vocab)) and not probed.matcher.is_error()
