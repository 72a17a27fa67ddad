"""Decoding with an EAGLE-3 head is lossless: greedy output equals the verifier's autoregressive output for
every tree shape, in float32 and bfloat16; sampled output follows the verifier's distribution."""
import pytest
import torch
from checkpoints import write_checkpoint
from test_speculative import N_SAMPLES, SHAPES, chi2_pvalue, decode, exact_two
from yggc.graphs import load_model
from yggc.graphs.eagle3_checkpoint import head_base_config, new_eagle3, save_eagle3

from yggc.plan.shape import TreeShape
from yggc.runtime import drafters
from yggc.runtime.autoregressive import AutoregressiveDecoder, StopPolicy
from yggc.runtime.drafters.eagle3_proposer import Eagle3Proposer
from yggc.tree.sampling import SamplingParams

N_NEW = 40


@pytest.fixture(scope="module")
def heads(ckpt_root):
    """name -> (verifier dir, head dir): random heads over part of the vocabulary (8 of 8 tokens for tiny_vocab,
    so drafts are often right; 120 of 301 for llama_gqa)."""
    out = {}
    for name, seed, n_draft in (("tiny_vocab", 5, 8), ("llama_gqa", 1, 120)):
        v = write_checkpoint(ckpt_root / f"e3_{name}", name, seed=seed)
        vocab = load_model(v, 2).cfg.vocab_size
        ids = torch.randperm(vocab, generator=torch.Generator().manual_seed(seed))[:n_draft]
        head = new_eagle3(v, ids, 2, seed=seed, init_std=0.3)
        out[name] = (v, save_eagle3(head, head_base_config(v), ckpt_root / f"e3_{name}_head"))
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", ["tiny_vocab", "llama_gqa"])
def test_greedy_equals_autoregressive(heads, name, dtype):
    verifier, head = drafters.load_pair(*heads[name], dtype, 160)
    ref_dec = AutoregressiveDecoder(verifier.graph, verifier.layout)
    vocab = verifier.graph.cfg.vocab_size
    for seed in range(2):
        prompt = torch.randint(1, vocab, (7 + 5 * seed,), generator=torch.Generator().manual_seed(seed)).tolist()
        ref = decode(ref_dec, prompt, N_NEW)
        for shape in SHAPES:
            dec = drafters.speculative_decoder(verifier.graph, head.graph, verifier.layout, TreeShape(*shape))
            assert isinstance(dec.proposer, Eagle3Proposer)
            assert decode(dec, prompt, N_NEW) == ref, f"{name} {dtype} {shape}"
            assert dec.stats.n_generated == N_NEW
    if name == "tiny_vocab":
        assert dec.stats.n_accept > 0  # drafts are accepted, so the handed-over features are exercised


@pytest.mark.parametrize("shape", [(1, 4, 3), (3, 4, 8), (4, 2, 8)])
def test_a_phase_over_the_draft_vocabulary_grows_the_full_vocabulary_tree(heads, shape):
    """The compiled phases read the head's logits over its draft vocabulary alone and map the chosen columns to
    token ids (draft_space); the tree is the one grown over the whole vocabulary with -inf outside it."""
    from yggc.runtime.drafters.eagle3_proposer import Eagle3DraftPhase

    verifier, head = drafters.load_pair(*heads["llama_gqa"], torch.float32, 64)
    dec = drafters.speculative_decoder(verifier.graph, head.graph, verifier.layout, TreeShape(*shape))
    vocab, trash = verifier.graph.cfg.vocab_size, verifier.layout.trash
    whole, draft = (Eagle3DraftPhase(head.graph, shape[0], shape[1], vocab, trash, draft_space=d) for d in (False, True))
    assert draft.columns() is head.graph.draft_ids and whole.columns() is None
    for seed in range(3):
        prompt = torch.randint(1, vocab, (6 + 5 * seed,), generator=torch.Generator().manual_seed(seed)).tolist()
        with torch.inference_mode():
            dec.proposer.prefill(prompt, 0)
            inputs = dec.proposer.phase_inputs([prompt[-1]], len(prompt))
            a, b = whole(*inputs), draft(*inputs)
        for name, x, y in zip(("tokens", "parents", "depth"), a, b):
            assert torch.equal(x, y), name
        assert set(b[0][1:].tolist()) <= set(head.graph.draft_ids.tolist())  # drafts are draft-vocabulary tokens
        torch.testing.assert_close(a[3], b[3], atol=1e-5, rtol=1e-5)  # cum_logp


def test_eager_sampled_tree_path_equals_fused_phase(heads):
    """The proposer's node_logits (the eager path sampling uses) gives the fused draft phase's tree for the same state."""
    verifier, head = drafters.load_pair(*heads["tiny_vocab"], torch.float32, 64)
    shape = TreeShape(3, 2, 6)
    dec = drafters.speculative_decoder(verifier.graph, head.graph, verifier.layout, shape)
    prompt = [1, 5, 2, 3, 7]
    with torch.inference_mode():
        dec.proposer.prefill(prompt, 0)
        fused = dec.draft_greedy([4], len(prompt)).tree
        # the same growth through root_logits + node_logits, greedily (the sampled drafting's two hooks)
        from yggc.tree.egt import egt_frontier, egt_init, egt_step

        state = egt_init(4, shape.depth, shape.width, dec.vocab)
        root = dec.proposer.root_logits([4], len(prompt))
        state = egt_step(state, torch.log_softmax(root, -1).expand(shape.width, -1))
        for _ in range(shape.depth - 1):
            f = egt_frontier(state)
            logits = dec.proposer.node_logits(f.tokens, state.parents[f.ids], f.ids, f.depth, f.mask, len(prompt),
                                     dec.layout.view(len(prompt) + shape.n_nodes))
            state = egt_step(state, torch.log_softmax(logits, -1))
    assert torch.equal(state.tokens, fused.tokens) and torch.equal(state.parents, fused.parents)
    assert torch.allclose(state.cum_logp, fused.cum_logp, atol=1e-5)


def first_two(dec, prompt, root, params, n_samples):
    """Counts [vocab * vocab] of the two tokens emitted after `root` (prompt prefilled once; each sample restarts
    from the same state: iterations only write slots >= len(prompt) - 1, and the head's pending features are reset)."""
    vocab = dec.vocab
    counts = torch.zeros(vocab * vocab, dtype=torch.float64)
    stop = StopPolicy(100, (), dec.layout)
    with torch.inference_mode():
        dec.proposer.prefill(prompt, 0)
        features = dec.proposer.pending_features
        for seed in range(n_samples):
            gen = torch.Generator().manual_seed(seed)
            dec.proposer.pending_features = features
            new, n, pending = dec.iterate(len(prompt), [root], params, gen, stop)
            if len(new) < 2:
                new += dec.iterate(n, pending, params, gen, stop)[0]
            counts[new[0] * vocab + new[1]] += 1
    return counts


@pytest.mark.parametrize("shape,tree_rule", [((3, 2, 6), "rrs"), ((2, 3, 4), "point-mass"), ((3, 1, 3), "rrs")])
def test_sampling_matches_verifier_distribution(heads, shape, tree_rule):
    verifier, head = drafters.load_pair(*heads["tiny_vocab"], torch.float32, 32)
    params = SamplingParams(temperature=1.0)
    dec = drafters.speculative_decoder(verifier.graph, head.graph, verifier.layout, TreeShape(*shape),
                                       tree_rule=tree_rule)
    prompt, root = [1, 5, 2], 3
    counts = first_two(dec, prompt, root, params, N_SAMPLES)
    p_value = chi2_pvalue(counts, exact_two(verifier.graph, verifier.layout, prompt + [root], params))
    assert p_value > 1e-3, f"emitted tokens do not follow the verifier (p={p_value:.2g})"
    assert dec.stats.n_accept > 0


def test_long_prompt_prefills_in_chunks(heads):
    """Prompts longer than one prefill chunk hand the head every position's features."""
    verifier, head = drafters.load_pair(*heads["tiny_vocab"], torch.float32, 300)
    prompt = [(i * 5) % 7 + 1 for i in range(150)]
    ref = decode(AutoregressiveDecoder(verifier.graph, verifier.layout), prompt, 30)
    dec = drafters.speculative_decoder(verifier.graph, head.graph, verifier.layout, TreeShape(3, 2, 4))
    assert decode(dec, prompt, 30) == ref



@pytest.mark.parametrize("name", ["tiny_vocab", "llama_gqa"])
def test_per_iteration_shapes_keep_greedy_output(heads, name):
    """The depth predictor may switch the head's tree shape every iteration (deeper to shallower included, with
    more pending pairs than the new depth's draft phase pads to): the output stays the verifier's own."""
    from trees import CyclingPolicy

    verifier, head = drafters.load_pair(*heads[name], torch.float32, 160)
    shapes = [TreeShape(*s) for s in SHAPES]
    prompt = torch.randint(1, verifier.graph.cfg.vocab_size, (9,), generator=torch.Generator().manual_seed(3)).tolist()
    ref = decode(AutoregressiveDecoder(verifier.graph, verifier.layout), prompt, N_NEW)
    dec = drafters.speculative_decoder(verifier.graph, head.graph, verifier.layout, shapes[0])
    dec.policy = policy = CyclingPolicy(shapes)
    assert decode(dec, prompt, N_NEW) == ref
    assert len(policy.seen) == len(shapes)
