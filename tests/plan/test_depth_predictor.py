"""The draft-depth predictor on synthetic calibration trees where the right depth is learnable."""
import pytest
import torch
from yggc.passes.train_predictor import train_policy

from yggc.plan.bundle_plan import AdaptivePlan
from yggc.plan.calibration import TreeSample, tokens_per_iteration
from yggc.plan.depth_predictor import N_FEATURES, TOP_K, DepthPolicy, root_features, shape_per_depth
from yggc.plan.shape import TreeShape
from yggc.tree.token_tree import TokenTree

MAX_DEPTH = 6


def chain_sample(accepted: int, features: torch.Tensor) -> TreeSample:
    """A drafted chain 1..6 whose first `accepted` tokens the verifier continues with."""
    n = 1 + MAX_DEPTH
    tree = TokenTree(torch.arange(n), torch.arange(-1, n - 1), torch.arange(n), -torch.arange(n).float(), n)
    continuation = list(range(1, accepted + 1)) + [999] * (MAX_DEPTH - accepted)
    return TreeSample(tree, 1, continuation, features)


def synthetic_samples(n: int, seed: int = 0) -> list[TreeSample]:
    """Half the roots are confident (the verifier's top log-prob near 0) and accept 5-6 drafts, the rest
    accept 0-1: a constant depth must pick one regime's depth for both."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        confident = i % 2 == 0
        top = -torch.rand(TOP_K, generator=g).sort(descending=True).values * (0.1 if confident else 3.0) - torch.arange(TOP_K)
        entropy = torch.rand(1, generator=g) * (0.2 if confident else 3.0)
        accepted = int(torch.randint(5, 7, (1,), generator=g)) if confident else int(torch.randint(0, 2, (1,), generator=g))
        out.append(chain_sample(accepted, torch.cat([top, entropy])))
    return out


def cost(shape: TreeShape) -> float:
    return 10.0 + 2.5 * shape.depth  # each draft step costs a quarter of the verifier


def test_root_features_are_top_log_probs_and_entropy():
    logits = torch.tensor([[2.0, 1.0, 0.0] + [-1e4] * 9])
    f = root_features(logits)
    p = torch.softmax(logits, -1)
    assert f.shape == (1, N_FEATURES)
    assert torch.allclose(f[0, :3], torch.log(p[0, :3]), atol=1e-6)
    assert f[0, -1].item() == pytest.approx(float(-(p[0, :3] * p[0, :3].log()).sum()), abs=1e-5)


def test_shape_per_depth_is_the_brute_force_best_at_each_depth():
    table = tokens_per_iteration(synthetic_samples(40), MAX_DEPTH)
    best = shape_per_depth(table, cost)
    for d in range(1, MAX_DEPTH + 1):
        at_d = {s: t / cost(s) for s, t in table.items() if s.depth == d}
        assert at_d[best[d]] == max(at_d.values())


def test_predictor_beats_the_best_constant_depth_when_depth_is_learnable():
    samples = synthetic_samples(400)
    policy, record = train_policy(samples, tokens_per_iteration(samples, MAX_DEPTH), 1, cost)
    assert record.used and policy is not None
    held = record.held_out_tokens_per_ms
    assert held.adaptive > 1.2 * held.best_constant
    assert held.oracle >= held.adaptive  # nothing chooses better than knowing each tree's yield
    confident, unsure = samples[0].features, samples[1].features
    assert policy.choose(confident).depth >= 5 and policy.choose(unsure).depth <= 2


def test_predictor_is_not_used_when_depth_is_not_learnable():
    samples = synthetic_samples(400)
    for s in samples:  # the same features for every root: nothing to learn
        s.features = torch.zeros(N_FEATURES)
    policy, record = train_policy(samples, tokens_per_iteration(samples, MAX_DEPTH), 1, cost)
    assert policy is None and not record.used and "did not beat" in record.reason and record.n_features is None


def test_policy_round_trips_through_its_record():
    samples = synthetic_samples(200)
    policy, record = train_policy(samples, tokens_per_iteration(samples, MAX_DEPTH), 1, cost)
    again = DepthPolicy.from_plan(AdaptivePlan.from_json(record.to_json()), policy.predictor.state_dict())
    features = torch.stack([s.features for s in samples])
    assert torch.equal(again.choose_index(features), policy.choose_index(features))
    assert again.shapes == policy.shapes and again.iteration_ms == policy.iteration_ms


def test_bundle_policy_loads_from_safetensors_and_a_corrupt_file_is_one_error(tmp_path):
    from safetensors.torch import save_file

    from yggc.errors import YggcError
    from yggc.runtime.runtime import load_policy

    samples = synthetic_samples(200)
    policy, record = train_policy(samples, tokens_per_iteration(samples, MAX_DEPTH), 1, cost)
    save_file(policy.predictor.state_dict(), tmp_path / "predictor.safetensors")
    loaded = load_policy(tmp_path, record)
    features = torch.stack([s.features for s in samples])
    assert torch.equal(loaded.choose_index(features), policy.choose_index(features))
    assert load_policy(tmp_path, AdaptivePlan(False)) is None and load_policy(tmp_path, None) is None
    (tmp_path / "predictor.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(YggcError, match="its depth predictor does not load"):
        load_policy(tmp_path, record)


def test_oracle_choice_is_the_brute_force_best_over_every_assignment():
    import itertools

    from yggc.plan.objective import oracle_choice

    g = torch.Generator().manual_seed(0)
    for trial in range(30):
        m, n_shapes = 1 + trial % 5, 1 + trial % 4
        tokens = torch.randint(1, 7, (m, n_shapes), generator=g).double()
        ms = 5 + 10 * torch.rand(n_shapes, generator=g, dtype=torch.float64)
        best = max(sum(tokens[i, c] for i, c in enumerate(cs)) / sum(ms[c] for c in cs)
                   for cs in itertools.product(range(n_shapes), repeat=m))
        choice = oracle_choice(tokens, ms)
        got = tokens.gather(1, choice[:, None]).sum() / ms[choice].sum()
        assert float(got) == pytest.approx(float(best), rel=1e-12)
