"""yggc train drafter: prompts from docstrings, self-generated soft labels, the student, exact resume."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from checkpoints import write_checkpoint
from safetensors.torch import load_file

from yggc.cli.main import main
from yggc.errors import YggcError
from yggc.train import shards, stdlib_prompts, student
from yggc.train.batches import batch_indices
from yggc.train.presets import DRAFTER_PRESETS

DOC = "Return the {what} of the two numbers given, rounding the result toward zero when needed."


def write_corpus(root: Path) -> Path:
    """Python files whose functions have sentence-long docstrings; some land in the held-out split."""
    for i in range(40):
        path = root / f"pkg{i % 4}" / f"mod_{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f'def op_{i}_{j}(a, b=1):\n    """{DOC.format(what=f"thing {i}.{j}")}"""\n'
                                f"    return a * {j} + b\n\n\n" for j in range(3)) + "def _private():\n    '''" +
                        DOC.format(what="hidden") + "'''\n")
    return root


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus"))


def test_prompts_are_stable_disjoint_and_skip_private(corpus):
    train, held = stdlib_prompts.build_prompts(False, corpus), stdlib_prompts.build_prompts(True, corpus)
    assert train == stdlib_prompts.build_prompts(False, corpus)
    assert train and held and not set(train) & set(held)
    assert len(train) + len(held) == 120  # 40 files x 3 public functions
    assert not any("_private" in p or "hidden" in p for p in train + held)
    files = lambda prompts: {int(i) for p in prompts for i in re.findall(r"op_(\d+)_", p)}  # noqa: E731
    assert files(held) and not files(held) & files(train)  # split by file


def test_source_segments_equal_ast_s_on_every_line_ending():
    import ast
    import inspect

    texts = [inspect.getsource(ast), "def f(x):\r\n    'é ü'\r\n    return x\rclass C: pass\n\ndef g(): return 'ß'",
             "def h():\n    return 1"]  # a real module; CRLF, CR and non-ASCII; no final newline
    for text in texts:
        nodes = ast.parse(text).body
        lines = stdlib_prompts.LINE.findall(text)
        assert nodes and [stdlib_prompts.source_segment(lines, n) for n in nodes] == \
            [ast.get_source_segment(text, n) for n in nodes]


def test_instruction_fills_every_template():
    item = stdlib_prompts.DocItem("a/b.py", "a.b", "f", "(x)", "Do things.\n\nMore.", "def f(x):\n    pass",
                                   "def f(x):\n    pass")
    for template in stdlib_prompts.TEMPLATES:
        text = template.format(name=item.name, signature=item.signature, module=item.module, summary="Do things.",
                               code=item.code, code_nodoc=item.code_nodoc, doc=item.doc)
        assert "{" not in text.replace("{x}", "")


def test_reference_answers_pair_with_their_instructions(corpus):
    for heldout in (False, True):
        pairs = stdlib_prompts.build_pairs(heldout, corpus)
        assert [q for q, _ in pairs] == stdlib_prompts.build_prompts(heldout, corpus)
        marks = lambda text: set(re.findall(r"op_(\d+)_(\d+)", text)) | set(re.findall(r"thing (\d+)\.(\d+)", text))  # noqa: E731
        for question, answer in pairs:  # each answer is made from the same object as its question
            assert "{" not in answer and len(marks(question)) == 1 and marks(answer) == marks(question)
    assert len(stdlib_prompts.ANSWERS) == len(stdlib_prompts.TEMPLATES)


def test_batches_are_epoch_permutations_and_pure():
    n, batch = 7, 3
    seen = [i for step in range(7) for i in batch_indices(n, 5, step, batch)]
    assert sorted(seen[:7]) == list(range(7)) and sorted(seen[7:14]) == list(range(7))
    assert batch_indices(n, 5, 4, batch) == batch_indices(n, 5, 4, batch)
    assert batch_indices(n, 6, 0, 7) != batch_indices(n, 5, 0, 7)


def test_collate_aligns_positions_with_answer_tokens():
    k = torch.tensor([[5, 6]] * 2)
    lp = torch.log(torch.tensor([[0.6, 0.2]] * 2))
    s = shards.Sample([1, 2, 3, 5, 9], 3, k, lp)
    b = student.collate([s, shards.Sample([4, 7, 8], 1, k, lp)])
    assert b.ids.tolist() == [[1, 2, 3, 5], [4, 7, 0, 0]]
    assert b.positions.tolist() == [[0, 2], [0, 3], [1, 0], [1, 1]]  # the predecessors of 5, 9, 7, 8
    assert b.targets.tolist() == [5, 9, 7, 8]
    assert torch.allclose(b.topk_probs, torch.tensor([[0.75, 0.25]] * 4))


def test_projected_embedding_keeps_the_principal_subspace():
    torch.manual_seed(0)
    basis = torch.linalg.qr(torch.randn(16, 16))[0][:4]          # a 4-dim subspace of R^16
    emb = torch.randn(50, 4) * torch.tensor([8.0, 4.0, 2.0, 1.0]) @ basis
    small = student.projected_embedding(emb, 4)
    gram = lambda x: (x - x.mean(0)) @ (x - x.mean(0)).T  # noqa: E731  (the geometry of the rows)
    scale = emb.norm(dim=1).mean() / (emb @ basis.T).norm(dim=1).mean()
    assert small.shape == (50, 4)
    assert torch.allclose(gram(small), gram(emb) * scale**2, rtol=1e-3, atol=1e-2)


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("target"), "llama_tied_llama3")


def run(target: Path, corpus: Path, out: Path, *extra: str) -> dict:
    """`yggc train drafter` on the tiny preset -> the summary it writes with --json."""
    summary = out.parent / f"{out.name}-summary.json"
    assert main(["train", "drafter", "--target", str(target), "--preset", "tiny", "--corpus-dir", str(corpus),
                 "--out", str(out), "--threads", "1", "--json", str(summary), *extra]) == 0
    return json.loads(summary.read_text())


def test_soft_labels_are_the_targets_greedy_choice(target, corpus, tmp_path):
    run(target, corpus, tmp_path / "a", "--steps", "1")
    shard = load_file(str(tmp_path / "a" / "data" / "train" / "shard-00000.safetensors"))  # greedy shard
    assert torch.equal(shard["topk_ids"][:, 0], shard["response_ids"])
    lp = shard["topk_logprobs"].float()
    assert (lp[:, :-1] >= lp[:, 1:]).all() and (lp.exp().sum(1) <= 1.001).all()
    samples = shards.read_samples(tmp_path / "a" / "data" / "train")
    assert len(samples) == DRAFTER_PRESETS["tiny"].n_prompts


def test_resumed_training_equals_one_run_and_exports(target, corpus, tmp_path, capsys):
    one = run(target, corpus, tmp_path / "one")
    assert capsys.readouterr().out == one["drafter"] + "\n"  # stdout: the trained folder only
    assert run(target, corpus, tmp_path / "two", "--stop-after", "2").get("drafter") is None
    assert capsys.readouterr().out == ""  # stopped before the last step: nothing exported
    two = run(target, corpus, tmp_path / "two")
    a = load_file(str(Path(one["drafter"]) / "model.safetensors"))
    b = load_file(str(Path(two["drafter"]) / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert next(iter(a.values())).dtype == torch.bfloat16
    cfg = json.loads((Path(one["drafter"]) / "config.json").read_text())
    assert cfg["vocab_size"] == json.loads((target / "config.json").read_text())["vocab_size"]
    assert (tmp_path / "one" / "drafter" / "tokenizer.json").read_bytes() == (target / "tokenizer.json").read_bytes()
    prompts = json.loads((Path(one["drafter"]) / "prompts.json").read_text())["prompts"]
    assert prompts and set(p["text"] for p in prompts) == set(stdlib_prompts.build_prompts(True, corpus))
    assert (Path(one["drafter"]) / "calib.txt").read_text().strip()
    assert 0.0 <= one["heldout_top1_agreement"] <= one["heldout_top3_agreement"] <= 1.0


def test_chat_prompts_alternate_with_the_stdlib_ones_and_are_scored_apart(target, corpus, tmp_path, capsys):
    chat = tmp_path / "chat_prompts.json"
    chat.write_text(json.dumps({"train": [f"Can you tell me a fact about the number {i}?" for i in range(20)],
                                "heldout": ["What is a good name for a cat?", "How do plants make food?"]}))
    summary = run(target, corpus, tmp_path / "a", "--steps", "1", "--chat-prompts", str(chat))
    assert 0.0 <= summary["heldout_top1_agreement_chat"] <= 1.0 and summary["heldout_tokens_chat"] > 0
    assert len(shards.read_samples(tmp_path / "a" / "data" / "heldout-chat")) == 2
    tok, _ = shards.chat_tokenizer(target)
    first = shards.read_samples(tmp_path / "a" / "data" / "train")[0]
    assert tok.decode(first.ids[:first.answer_start]) == "Can you tell me a fact about the number 0?"
    assert stdlib_prompts.interleave(["a", "b", "c"], ["x"]) == ["a", "x", "b", "c"]
    assert stdlib_prompts.interleave(["a", "b", "c", "d"], ["x", "y", "z"], 2) == ["a", "b", "x", "c", "d", "y", "z"]
    capsys.readouterr()
    assert main(["train", "drafter", "--target", str(target), "--preset", "tiny", "--corpus-dir", str(corpus),
                 "--out", str(tmp_path / "a"), "--threads", "1", "--steps", "1"]) == 2  # same folder, no chat prompts
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "another prompt set" in err[0]


def test_gen_batch_sets_the_shard_size_and_is_fixed_per_data_folder(target, corpus, tmp_path, capsys):
    run(target, corpus, tmp_path / "a", "--steps", "1", "--gen-batch", "3")
    train = tmp_path / "a" / "data" / "train"
    sizes = [len(load_file(str(f))["prompt_offsets"]) - 1 for f in sorted(train.glob("shard-*.safetensors"))]
    assert sizes == [3, 3, 2] and len(shards.read_samples(train)) == DRAFTER_PRESETS["tiny"].n_prompts
    capsys.readouterr()
    assert main(["train", "drafter", "--target", str(target), "--preset", "tiny", "--corpus-dir", str(corpus),
                 "--out", str(tmp_path / "a"), "--threads", "1", "--steps", "1"]) == 2  # the preset's batch, 4
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "shards of 3 prompts, not 4; pass --gen-batch 3" in err[0]
    legacy = tmp_path / "b" / "data"  # recorded before --gen-batch: the preset's batch
    legacy.mkdir(parents=True)
    (legacy / "source.json").write_text(json.dumps({"chat_prompts_sha256": None}))
    shards.check_data_source(legacy, None, 4, 4)
    with pytest.raises(YggcError, match="shards of 4 prompts, not 8"):
        shards.check_data_source(legacy, None, 8, 4)


def test_a_state_made_from_other_settings_is_not_resumed(target, corpus, tmp_path, capsys):
    run(target, corpus, tmp_path / "a", "--stop-after", "1")
    capsys.readouterr()
    assert main(["train", "drafter", "--target", str(target), "--preset", "tiny", "--corpus-dir", str(corpus),
                 "--out", str(tmp_path / "a"), "--threads", "1", "--seed", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "made from other data or settings (seed 0 -> 1)" in err[0] and "--no-resume" in err[0]
    state = json.loads((tmp_path / "a" / ".state" / "drafter" / "state.json").read_text())
    assert state["step"] == 1  # left as it was
    assert run(target, corpus, tmp_path / "a", "--seed", "1", "--no-resume")["drafter"]  # starting over is allowed


def test_a_state_past_the_runs_last_step_is_refused_not_evaluated(tmp_path):
    """Resuming a saved run at step 5 with 3 steps asked trains nothing: the job stops with one line instead of
    evaluating and recording the saved weights as this run's."""
    from yggc.train.loop import distill_steps, save_state
    from yggc.train.options import RunSettings
    from yggc.train.presets import TrainHParams

    model = torch.nn.Linear(2, 2)
    opt = torch.optim.AdamW(model.parameters())
    save_state(tmp_path, model, opt, {"step": 5, "train_seconds": 0.0})
    settings = RunSettings(threads=1, seed=0, max_minutes=None, stop_after=None, ckpt_every=10, resume=True)
    hp = TrainHParams(batch_size=1, lr=1e-3, warmup_steps=0, minutes=1.0)
    with pytest.raises(YggcError, match="at step 5, past this run's 3 steps; raise --steps"):
        distill_steps("eagle3", model, opt, {"step": 0, "train_seconds": 0.0}, 3, hp, tmp_path, settings,
                      lambda meta: pytest.fail("trained a step"))
    assert distill_steps("eagle3", model, opt, {"step": 0, "train_seconds": 0.0}, 5, hp, tmp_path,
                         settings, lambda meta: pytest.fail("trained a step"))["step"] == 5  # done: resumes as done


def test_a_state_warm_started_from_a_head_is_not_resumed_without_it(tmp_path):
    """A setting the saved run had and this run lacks (its warm start) differs as much as a changed one: resuming
    without the head would pair the saved rows with another draft vocabulary."""
    from yggc.train.loop import check_recipe

    (tmp_path / "state.json").write_text(json.dumps({"step": 3, "recipe": {"seed": 0, "init": "/heads/a"}}))
    with pytest.raises(YggcError, match=r"other data or settings \(init /heads/a -> None\); pass --no-resume"):
        check_recipe("eagle3", tmp_path, {"seed": 0})
    check_recipe("eagle3", tmp_path, {"seed": 0, "init": "/heads/a"})  # the same run resumes
