"""yggc train eagle3: the training-time test computes exactly what the runtime's draft steps compute; the
reference conversations, the resume point, and a whole tiny run (resumed, and in bfloat16)."""
import json
import shutil
from pathlib import Path

import pytest
import torch
from checkpoints import write_checkpoint
from safetensors.torch import load_file
from yggc.graphs import load_model
from yggc.graphs.eagle3_checkpoint import new_eagle3

from yggc.artifacts.cache_layout import causal_rows
from yggc.cli.main import main
from yggc.train import eagle3_head, features
from yggc.train.presets import DRAFTER_PRESETS
from yggc.train.shards import Sample
from yggc.train.stdlib_prompts import build_pairs
from yggc.train.ttt import ttt_logits


@pytest.fixture(scope="module")
def tiny(ckpt_root):
    v = write_checkpoint(ckpt_root / "ttt_v", "llama_gqa", seed=3)
    verifier = load_model(v, 64)
    ids = torch.randperm(301, generator=torch.Generator().manual_seed(0))[:200]
    head = new_eagle3(v, ids, 64, seed=0, init_std=0.2)
    verifier.feature_layers = head.eagle.feature_layers
    return verifier, head


def runtime_chain_logits(head, tokens, feats, r: int, depth: int) -> list[torch.Tensor]:
    """The runtime's computation: real pairs 0..r in the cache, then a chain of `depth` draft nodes, node d fed
    its parent's output feature at slot = position r + d -> draft-vocab logits of nodes 0..depth."""
    slots = torch.arange(r + 1)
    logits, out = head(tokens[:r + 1], head.fuse(feats[:r + 1]), slots, slots, causal_rows(slots, 64))
    got, parent = [logits[r]], out[r:r + 1]
    for d in range(1, depth + 1):
        slot = torch.tensor([r + d])
        logits, parent = head(tokens[r + d:r + d + 1], parent, slot, slot, causal_rows(slot, 64))
        got.append(logits[0])
    return [g[head.draft_ids] for g in got]


def test_training_time_test_matches_runtime_draft_steps(tiny):
    verifier, head = tiny
    seq = torch.randint(0, 301, (14,), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        pos = torch.arange(14)
        _, feats = verifier.forward_features(seq, pos, pos, causal_rows(pos, 64))
        tokens, feats = seq[1:], feats[:-1]  # row p: (g_p, x_{p+1})
        unrolled = ttt_logits(head, tokens[None], feats[None], 3)  # 3 x [1, T, Vd]
        for r in (0, 4, 9):
            chain = runtime_chain_logits(head, tokens, feats, r, 2)
            for j in range(3):  # step j, row r + j: the depth-j node whose last real pair is r
                torch.testing.assert_close(unrolled[j][0, r + j], chain[j], atol=2e-4, rtol=1e-4)


def test_reference_samples_read_each_prompt_then_its_reference_answer(ckpt_root, tmp_path):
    from tokenizers import Tokenizer

    for i in range(8):  # a corpus of 8 files, 2 documented functions each
        (tmp_path / f"m{i}.py").write_text("".join(f'def f{i}_{j}(x):\n    """Scale the number x by the factor {j}, as file {i} does it."""\n'
                                                   f"    return x * {j}\n\n\n" for j in range(2)))
    v = write_checkpoint(ckpt_root / "ref_v", "llama_gqa", seed=3)  # no chat template: plain text
    tok, max_new = Tokenizer.from_file(str(v / "tokenizer.json")), DRAFTER_PRESETS["tiny"].gen.max_new
    samples = eagle3_head.reference_samples(v, "tiny", 6, tmp_path)
    pairs = [(q, a) for q, a in build_pairs(False, tmp_path)[:6]
             if len(tok.encode(q).ids) <= DRAFTER_PRESETS["tiny"].gen.max_prompt]
    assert samples and len(samples) == len(pairs)
    for s, (question, answer) in zip(samples, pairs):
        assert s.ids[:s.answer_start] == tok.encode(question).ids
        assert s.ids[s.answer_start:] == tok.encode(answer).ids[:max_new]
    assert eagle3_head.reference_samples(v, "tiny", 0) == []


def test_a_run_that_reached_its_steps_skips_the_training_features(tmp_path):
    assert eagle3_head.saved_step(tmp_path, resume=True) == 0  # nothing saved: train from step 0
    (tmp_path / "state.json").write_text('{"step": 800, "seed": 0}')
    assert eagle3_head.saved_step(tmp_path, resume=True) == 800  # a rerun with --steps <= 800 only evaluates, exports
    assert eagle3_head.saved_step(tmp_path, resume=False) == 0


def test_features_are_read_back_exactly_and_keyed_by_the_data_and_the_weights(tiny, ckpt_root, tmp_path, monkeypatch):
    verifier, _ = tiny
    target = features.verifier_digest(ckpt_root / "ttt_v")
    samples = [Sample([5, 9, 2, 7, 1, 3], 3, None, None), Sample([4, 4, 8, 2, 6], 2, None, None)]
    first = features.cached_extract(verifier, samples, target, tmp_path)
    assert len(list(tmp_path.glob("features-*.safetensors"))) == 1
    monkeypatch.setattr(features, "extract", lambda *a: pytest.fail("the cached features were computed again"))
    again = features.cached_extract(verifier, samples, target, tmp_path)
    for a, b in zip(first, again, strict=True):
        assert all(torch.equal(getattr(a, k), getattr(b, k)) for k in features.FIELDS) and a.loss_from == b.loss_from
    other = [Sample([5, 9, 2, 7, 1, 3], 2, None, None)]  # the same ids, another answer start: another file
    assert features.cache_key(target, other) != features.cache_key(target, samples)
    changed = write_checkpoint(tmp_path / "v2", "llama_gqa", seed=4)  # other weights: another file
    assert features.cache_key(features.verifier_digest(changed), samples) != features.cache_key(target, samples)


def conversations(answer_lengths: list[int], prompt: int = 3) -> list[Sample]:
    return [Sample([0] * (prompt + n), prompt, None, None) for n in answer_lengths]


def test_a_token_budget_cuts_each_kind_at_the_same_share_of_its_answer_tokens():
    generated, reference = conversations([10, 10, 10, 10]), conversations([5, 5, 5, 5, 5, 5, 5, 5])
    assert eagle3_head.label_tokens(generated) == 40 and eagle3_head.label_tokens(reference) == 40
    assert eagle3_head.budget_prefixes((generated, reference), None) == (4, 8)
    assert eagle3_head.budget_prefixes((generated, reference), 80) == (4, 8)  # the whole data: everything
    assert eagle3_head.budget_prefixes((generated, reference), 1000) == (4, 8)
    assert eagle3_head.budget_prefixes((generated, reference), 40) == (2, 4)  # half of each kind's tokens
    assert eagle3_head.budget_prefixes((generated, reference), 30) == (2, 3)  # 15 of each: the conversation reaching it
    assert eagle3_head.budget_prefixes((generated, []), 1) == (1, 0)  # at least one; an empty kind stays empty


def test_a_bfloat16_verifier_keys_its_features_apart(ckpt_root):
    folder = ckpt_root / "ttt_v"
    digest = features.verifier_digest(folder)  # float32: the key features cached before --dtype had
    assert features.verifier_digest(folder, "float32") == digest
    assert features.verifier_digest(folder, "bfloat16") == f"{digest}:bfloat16"


def train_head(target: Path, out: Path, *extra: str) -> dict:
    """`yggc train eagle3` on the tiny preset (its prompts: the stdlib's) -> the summary it writes with --json."""
    summary = out.parent / f"{out.name}-summary.json"
    assert main(["train", "eagle3", "--target", str(target), "--preset", "tiny", "--out", str(out), "--threads", "1",
                 "--json", str(summary), *extra]) == 0
    return json.loads(summary.read_text())


def head_weights(summary: dict) -> dict[str, torch.Tensor]:
    return load_file(str(Path(summary["head"]) / "model.safetensors"))


def test_a_resumed_head_equals_one_run_and_bfloat16_data_stays_apart(ckpt_root, tmp_path, capsys):
    target = write_checkpoint(ckpt_root / "e3_train_v", "llama_tied_llama3")
    one = train_head(target, tmp_path / "one")
    assert train_head(target, tmp_path / "two", "--stop-after", "2").get("head") is None  # stopped: nothing exported
    two = train_head(target, tmp_path / "two")
    a, b = head_weights(one), head_weights(two)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert one["verifier_dtype"] == "float32" and len(one["heldout_agreement_per_step"]) == one["unroll"]
    capsys.readouterr()
    assert main(["train", "eagle3", "--target", str(target), "--preset", "tiny", "--out", str(tmp_path / "two"),
                 "--threads", "1", "--score", one["head"]]) == 0  # the other run's head on this folder's held-out text
    scored = capsys.readouterr().out.strip().splitlines()
    assert len(scored) == 1 and scored[0].startswith("heldout: ")
    assert [float(a) for a in scored[0].split(": ")[1].split(" / ")] == \
        pytest.approx(one["heldout_agreement_per_step"], abs=0.1)  # as its own summary (float32 there, bf16 read)
    assert main(["train", "eagle3", "--target", str(target), "--preset", "tiny", "--out", str(tmp_path / "one"),
                 "--threads", "1", "--dtype", "bfloat16"]) == 2  # the float32 answers are not mixed with bfloat16 ones
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "wrote in float32, not bfloat16; pass --dtype float32" in err[0]
    bf16 = train_head(target, tmp_path / "bf16", "--dtype", "bfloat16")
    assert bf16["verifier_dtype"] == "bfloat16"
    assert json.loads((tmp_path / "bf16" / "data" / "source.json").read_text())["dtype"] == "bfloat16"
    cached = {p.name for p in (tmp_path / "one" / ".state" / "features").glob("*.safetensors")}
    assert cached.isdisjoint(p.name for p in (tmp_path / "bf16" / ".state" / "features").glob("*.safetensors"))


def test_a_wsd_run_trained_longer_then_decayed_equals_one_run_and_a_warm_start_keeps_the_head(ckpt_root, tmp_path):
    target = write_checkpoint(ckpt_root / "e3_wsd_v", "llama_tied_llama3")
    one = train_head(target, tmp_path / "one", "--schedule", "wsd", "--steps", "6", "--decay", "3")
    stable = train_head(target, tmp_path / "two", "--schedule", "wsd", "--steps", "4")
    assert stable["steps"] == 4 and stable["head"]  # the stable phase's head is exported; the run can go on
    two = train_head(target, tmp_path / "two", "--schedule", "wsd", "--steps", "6", "--decay", "3")
    assert one["steps"] == two["steps"] == 9 and one["schedule"] == "wsd" and one["decay_steps"] == 3
    a, b = head_weights(one), head_weights(two)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # extended, then decayed: one run
    warm = train_head(target, tmp_path / "warm", "--init", one["head"], "--steps", "2")
    assert warm["init"] == one["head"] and warm["draft_vocab"] == one["draft_vocab"]
    assert torch.equal(head_weights(warm)["d2t"], a["d2t"])  # the warm head keeps the draft vocabulary it started with


def test_a_bfloat16_verifiers_features_are_cached_in_bfloat16_and_read_back_mapped(ckpt_root, tmp_path):
    from safetensors import safe_open

    verifier = load_model(write_checkpoint(ckpt_root / "bf16_feature_v", "llama_gqa", seed=3), 64, torch.bfloat16)
    verifier.feature_layers = (0, 1, 1)
    samples = [Sample([5, 9, 2, 7, 1, 3], 3, None, None), Sample([4, 4, 8, 2, 6], 2, None, None)]
    computed = features.extract(verifier, samples)
    mapped = features.cached_extract(verifier, samples, "v:bfloat16", tmp_path)
    (path,) = tmp_path.glob("features-*.safetensors")
    with safe_open(str(path), "pt") as f:
        assert f.get_slice("features").get_dtype() == "BF16" and f.get_slice("final").get_dtype() == "BF16"
    assert all(isinstance(m, features.MappedConversation) for m in mapped)
    for a, b in zip(computed, mapped, strict=True):
        assert len(a) == len(b) and a.loss_from == b.loss_from
        assert all(torch.equal(getattr(a, k), getattr(b, k)) for k in features.FIELDS)


def test_the_same_tensors_written_again_are_the_same_verifier(ckpt_root, tmp_path):
    from safetensors.torch import save_file

    folder = ckpt_root / "ttt_v"
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    weights = next(copy.glob("*.safetensors"))
    tensors = load_file(str(weights))
    save_file(dict(reversed(list(tensors.items()))), str(weights), metadata={"written": "elsewhere"})
    assert weights.read_bytes() != next(folder.glob("*.safetensors")).read_bytes()
    assert features.verifier_digest(copy) == features.verifier_digest(folder)
    name = sorted(tensors)[0]
    save_file({**tensors, name: tensors[name] + 1}, str(weights))
    assert features.verifier_digest(copy) != features.verifier_digest(folder)
