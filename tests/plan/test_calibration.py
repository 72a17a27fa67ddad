"""Calibration statistics and the latency objective: pure functions checked against brute force, and
the recording decoder checked against the verifier's own decoding."""
from types import SimpleNamespace

import pytest
import torch
from checkpoints import write_checkpoint
from trees import _grow, _logps
from yggc.graphs import load_model
from yggc.passes.calibrate import (
    CalibrationSpec,
    calibrate,
    calibration_prompts,
    rank_acceptance,
    read_calibration_text,
    record_width,
)
from yggc.passes.choose_shape import candidate_shapes, choose_shape

from yggc.artifacts.cache_layout import CacheLayout
from yggc.errors import YggcError
from yggc.plan.bundle_profile import ModelTimes, Profile
from yggc.plan.calibration import (
    TreeSample,
    acceptance_rates,
    accepted_by_budget,
    node_weights,
    tokens_per_iteration,
    truncate,
)
from yggc.plan.cost_model import CostCurve
from yggc.plan.objective import StageCosts, rank_shapes
from yggc.plan.shape import TreeShape
from yggc.runtime.autoregressive import AutoregressiveDecoder
from yggc.tree.egt import egt_tree
from yggc.tree.prune import prune_topk
from yggc.tree.sampling import SamplingParams


def random_tree(D, W, seed):
    state, _ = _grow(D, W, 9, None, _logps(D, W, 9, seed))
    return egt_tree(state)


def continuation_along(tree, node, extra, seed):
    """The tokens of the path to `node`, then `extra` random tokens: a continuation the tree half-matches."""
    g = torch.Generator().manual_seed(seed)
    return [int(tree.tokens[i]) for i in tree.path_to(node)] + torch.randint(0, 9, (extra,), generator=g).tolist()


def brute_accepted(tree, V, continuation):
    """Prune with prune_topk, then walk the kept nodes along the continuation."""
    kept = set(prune_topk(tree, V).tolist())
    node, k = 0, 0
    for want in continuation:
        nxt = [i for i in kept if int(tree.parents[i]) == node and int(tree.tokens[i]) == want]
        if not nxt:
            break
        node, k = nxt[0], k + 1
    return k


@pytest.mark.parametrize("D,W", [(1, 1), (4, 1), (3, 2), (5, 3), (4, 4)])
@pytest.mark.parametrize("seed", range(4))
def test_accepted_by_budget_matches_pruning_then_walking(D, W, seed):
    tree = random_tree(D, W, seed)
    for node in range(tree.n_nodes):
        cont = continuation_along(tree, node, 2, seed)
        got = accepted_by_budget(tree, node_weights(TreeSample(tree, W, cont)))
        assert got == [brute_accepted(tree, v, cont) for v in range(tree.n_nodes)]
        assert got[-1] >= len(tree.path_to(node))  # the full tree accepts at least the whole path


@pytest.mark.parametrize("D,W", [(4, 1), (3, 2), (4, 3)])
def test_sampled_trees_are_priced_by_expected_acceptance(D, W):
    """At T > 0 a sample carries each node's acceptance probability (a product along its path): the accepted
    drafts under budget V are the sum over the nodes prune_topk keeps, for every depth and budget."""
    tree = random_tree(D, W, seed=D + W)
    g = torch.Generator().manual_seed(1)
    step = torch.rand(tree.n_nodes, generator=g, dtype=torch.float64)
    prob = torch.ones(tree.n_nodes, dtype=torch.float64)
    for i in range(1, tree.n_nodes):  # parents come first in growth order
        prob[i] = prob[int(tree.parents[i])] * step[i] / W
    sample = TreeSample(tree, W, [], path_prob=prob)
    table = tokens_per_iteration([sample], D)
    for depth in range(1, D + 1):
        shallow = truncate(tree, 1 + depth * W)
        for verify in range(1, depth * W + 1):
            kept = prune_topk(shallow, verify)[1:]  # the root is not a draft
            assert table[TreeShape(depth, W, verify)] == pytest.approx(1 + float(prob[kept].sum()), abs=1e-12)
    deepest = int(tree.depth[: tree.n_nodes].max())  # EGT may spend its nodes above depth D
    at = [float(prob[tree.depth[: tree.n_nodes] == d].sum()) for d in range(deepest + 1)]
    assert acceptance_rates([sample]) == pytest.approx([at[d + 1] / at[d] for d in range(deepest)])


def test_rank_acceptance_is_each_draw_ranks_acceptance_given_its_parent():
    """Root -> children 1, 2 (draws 1 and 2); node 1 -> child 3 (its draw 1); node 2 -> child 4 (its draw 1)."""
    from yggc.tree.token_tree import TokenTree

    tree = TokenTree(torch.tensor([0, 5, 6, 7, 8]), torch.tensor([-1, 0, 0, 1, 2]), torch.tensor([0, 1, 1, 2, 2]),
                     torch.zeros(5), 5)
    sample = TreeSample(tree, 2, [], path_prob=torch.tensor([1.0, 0.6, 0.1, 0.3, 0.05], dtype=torch.float64))
    # rank 1: (0.6 + 0.3 + 0.05) / (1 + 0.6 + 0.1); rank 2: 0.1 / 1; ranks never drafted copy the one above
    assert rank_acceptance([sample], ranks=3) == pytest.approx([0.5588, 0.1, 0.1], abs=1e-4)


@pytest.mark.parametrize("W", [1, 2, 3])
def test_a_shallower_egt_is_the_deeper_one_truncated(W):
    logps = _logps(6, W, 11, seed=W)
    deep = egt_tree(_grow(6, W, 11, None, logps)[0])
    for D in range(1, 6):
        shallow = egt_tree(_grow(D, W, 11, None, logps[:D])[0])
        cut = truncate(deep, 1 + D * W)
        n = shallow.n_nodes
        assert cut.n_nodes == n
        assert cut.tokens[:n].tolist() == shallow.tokens.tolist()
        assert cut.parents[:n].tolist() == shallow.parents.tolist()


def test_tokens_per_iteration_of_a_chain():
    # chain 0 -> 5 -> 6 -> 7 -> 8; the verifier continues 5, 6, 9, ...: two drafts accepted at depth >= 2
    tree = random_tree(4, 1, 0)
    tree.tokens[1:5] = torch.tensor([5, 6, 7, 8])
    table = tokens_per_iteration([TreeSample(tree, 1, [5, 6, 9, 9])], max_depth=4)
    assert table[TreeShape(1, 1, 1)] == 2.0
    assert table[TreeShape(4, 1, 2)] == 3.0
    assert table[TreeShape(4, 1, 4)] == 3.0
    assert table[TreeShape(3, 1, 1)] == 2.0
    assert set(table) == {TreeShape(d, 1, v) for d in range(1, 5) for v in range(1, d + 1)}
    assert acceptance_rates([TreeSample(tree, 1, [5, 6, 9, 9])]) == [1.0, 1.0, 0.0, 0.0]


def test_objective_prices_draft_and_verify_steps():
    costs = StageCosts(CostCurve(10.0, 4.0, 1.0), CostCurve(1.0, 2.0, 0.5), host_ms={"prune": 0.25})
    # head step at width 2 (1 ms) + 2 steps at width 4 (2 ms each) + verify of 7 rows (13 ms) + host
    assert costs.iteration_ms(TreeShape(3, 4, 6)) == pytest.approx(1 + 4 + 13 + 0.25)
    table = {TreeShape(1, 1, 1): 1.8, TreeShape(4, 1, 4): 3.0, TreeShape(4, 2, 8): 3.6, TreeShape(8, 4, 32): 6.0}
    ranking = rank_shapes(table, costs)
    speedups = [c.speedup for c in ranking]
    assert speedups == sorted(speedups, reverse=True)
    best = ranking[0]
    assert best.speedup == pytest.approx(max(t * 10.0 / costs.iteration_ms(s) for s, t in table.items()))
    assert best.ms_per_token == pytest.approx(costs.iteration_ms(best.shape) / table[best.shape])


def test_choose_shape_honours_pins_and_records_the_ranking():
    tree = random_tree(4, 2, 3)
    samples = [TreeSample(tree, 2, continuation_along(tree, n, 4, n)[:4]) for n in range(tree.n_nodes)]
    costs = StageCosts(CostCurve(5.0, 1.0, 0.2), CostCurve(0.5, 1.0, 0.05))
    shape, plan = choose_shape(candidate_shapes(samples, 4, depth=3), costs)
    assert shape.depth == 3 and plan.source == "calibration" and plan.shape == shape
    assert plan.candidates[0] == plan.objective and all(c.shape.depth == 3 for c in plan.candidates)
    shape, _ = choose_shape(candidate_shapes(samples, 4, verify=5), costs)
    assert shape.verify == 5
    with pytest.raises(YggcError, match="--verify must be at most"):
        candidate_shapes(samples, 2, verify=7)


def test_calibration_text_errors(tmp_path):
    missing, empty, binary = tmp_path / "nope.txt", tmp_path / "empty.txt", tmp_path / "bin.txt"
    empty.write_text("  \n")
    binary.write_bytes(b"\xff\xfe\x00bad")
    for path, msg in [(missing, "does not exist"), (empty, "is empty"), (binary, "not UTF-8")]:
        with pytest.raises(YggcError, match=msg):
            read_calibration_text((path,))


class WordTokenizer:
    class Encoding:
        def __init__(self, ids):
            self.ids = ids

    def encode(self, text):
        return self.Encoding([len(w) for w in text.split()])


def test_calibration_prompts_are_spread_windows():
    tok = WordTokenizer()
    prompts = calibration_prompts(["a " * 100, "bb " * 100], tok, n_prompts=4, prompt_tokens=30)
    assert len(prompts) == 4 and all(len(p) == 30 for p in prompts)
    assert prompts[0] == [1] * 30 and prompts[-1] == [2] * 30  # first and last window of the concatenation
    assert calibration_prompts(["a b c d e"], tok, 8, 64) == [[1] * 5]  # shorter than a window: all of it
    with pytest.raises(YggcError, match="only 2 tokens"):
        calibration_prompts(["a b"], tok, 8, 64)


def test_calibration_needs_room_in_the_cache(tmp_path):
    text = tmp_path / "c.txt"
    text.write_text("a b c d e f g h " * 20)
    with pytest.raises(YggcError, match="--max-seq 40 leaves no room"):
        calibrate(None, None, CacheLayout(40), WordTokenizer(), CalibrationSpec((text,), new_tokens=24))


def test_recorded_trees_sit_on_the_verifiers_own_continuation(tmp_path):
    layout = CacheLayout(128)
    v = write_checkpoint(tmp_path / "v", "llama_gqa", seed=21)
    d = write_checkpoint(tmp_path / "d", "llama_gqa", seed=22, base=v, noise=0.03)
    verifier, drafter = load_model(v, layout.n_slots), load_model(d, layout.n_slots)
    spec = CalibrationSpec((), max_depth=4, new_tokens=24)
    prompts = [[5, 6, 7, 8, 9], [11, 3, 3, 40, 2, 9, 17]]
    for width in (1, 3):
        samples = record_width(verifier, drafter, layout, prompts, width, spec)
        assert samples and all(s.width == width and s.tree.n_nodes == 1 + 4 * width for s in samples)
        refs = []
        for p in prompts:
            ar = AutoregressiveDecoder(verifier, layout)
            refs.append(list(p) + [t for c in ar.stream(p, spec.new_tokens, SamplingParams()) for t in c])
        # every sample's root and continuation is a window of the verifier's greedy output
        for s in samples:
            window = [int(s.tree.tokens[0])] + s.continuation
            assert any(window == ref[i:i + 5] for ref in refs for i in range(len(ref) - 4))
        accepted = [accepted_by_budget(s.tree, node_weights(s))[-1] for s in samples]
        assert sum(accepted) > 0  # a noisy copy of the verifier gets drafts accepted


def test_forward_profile_reuses_earlier_measurements():
    from yggc.passes.compile_state import Pair, Widths
    from yggc.passes.profile import profile_forward

    class Counting(torch.nn.Linear):
        def __init__(self):
            super().__init__(1, 1)
            self.widths = []
            self.cfg = SimpleNamespace(vocab_size=10, moe=None)  # what the profile reads of a model's config

        def __call__(self, ids, pos, slots, mask):
            self.widths.append(ids.shape[0])

    model = Counting()
    out = profile_forward(Pair(model, None), Widths([1, 4], []), CacheLayout(64), repeats=3,
                          measured={"verifier": ModelTimes({1: 5.0, 8: 9.0})})
    assert set(model.widths) == {4}  # only the new width is timed
    assert out["verifier"].bucket_ms[1] == 5.0 and set(out["verifier"].bucket_ms) == {1, 4, 8}


def test_phase_profile_prices_the_glue_so_its_shape_costs_what_its_phases_took(ckpt_root):
    """Calibration at O2 and the final profile time a decoder's phases whole, in turn with the calls they are priced
    with (the verifier's at the verify width, the drafter's at its steps' widths); the glue is what the phases took
    beyond those calls and the other priced stages, so at that shape the objective's iteration is the phases' time
    with the calls priced as their curves say, and no stage is negative."""
    from yggc.passes.profile import phase_profile

    from yggc.runtime.drafters import speculative_decoder

    layout, shape = CacheLayout(64), TreeShape(2, 2, 3)
    verifier = load_model(write_checkpoint(ckpt_root / "glue_v", "tiny_vocab", seed=1), layout.n_slots)
    drafter = load_model(write_checkpoint(ckpt_root / "glue_d", "tiny_vocab", seed=2), layout.n_slots)
    measured = phase_profile(speculative_decoder(verifier, drafter, layout, shape), repeats=3, drafter=drafter)
    calls = measured.calls_ms
    assert measured.shape == TreeShape(2, 2, 3) and set(measured.phase_ms) == {"draft", "verify"}
    assert {model: set(ms) for model, ms in calls.items()} == {"verifier": {1, 4}, "drafter": {2}}
    assert min(ms for model in calls.values() for ms in model.values()) > 0
    curve = ModelTimes({}, {"t0_ms": 0.001, "knee": 4.0, "slope_ms": 0.0})  # cheaper than any real call
    costs = StageCosts.from_profile(Profile.measured(0, {"verifier": curve, "drafter": curve}, {}, phases=measured))
    assert min(costs.glue_ms) > 0
    head_and_step = 2 * costs.drafter(2) - 2 * calls["drafter"][2]  # HEAD_WIDTH and W are both 2 here
    calls_priced_by_their_curves = costs.verifier(4) - calls["verifier"][4] + head_and_step
    assert costs.iteration_ms(shape) == pytest.approx(sum(measured.phase_ms.values()) + calls_priced_by_their_curves)
    unpriced = phase_profile(speculative_decoder(verifier, drafter, layout, shape), repeats=3)
    assert set(unpriced.calls_ms) == {"verifier"}  # no drafter forward given: its curve prices its steps
