"""yggc train prompts (Magpie): the user-turn prefix, selection, and sampling that is seeded and resumable."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from checkpoints import write_checkpoint

from yggc.cli.main import main
from yggc.errors import YggcError
from yggc.runtime.chat import ChatTemplate
from yggc.train import magpie, stdlib_prompts
from yggc.train.magpie import MagpieSpec

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
SYSTEM = ("{{ '<|im_start|>system\nBe brief.<|im_end|>\n' }}" + CHATML)
SPEC = MagpieSpec(count=8)


def test_user_turn_prefix_stops_where_the_users_text_starts():
    assert magpie.user_turn_prefix(ChatTemplate(CHATML)) == "<|im_start|>user\n"
    assert magpie.user_turn_prefix(ChatTemplate(SYSTEM)) == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n"
    with pytest.raises(YggcError, match="verbatim"):
        magpie.user_turn_prefix(ChatTemplate("{% for m in messages %}{{ m['content'] | upper }}{% endfor %}"))


def test_a_turn_ends_at_the_first_end_of_turn_token():
    decode = lambda ids: ",".join(map(str, ids))  # noqa: E731
    assert magpie.turn_text([5, 6, 2, 7, 2], {2}, decode) == ("5,6", 3)
    assert magpie.turn_text([2, 5], {2, 9}, decode) == ("", 1)
    assert magpie.turn_text([5, 6, 7], {2}, decode) == (None, 3)  # cut: never ended


@pytest.mark.parametrize("text, english", [
    ("How do I sort a list of tuples by the second item in Python?", True),
    ("Can you give me three ideas for a rainy weekend?", True),
    ("Wie kann ich eine Liste sortieren?", False),          # no English function word
    ("Как отсортировать список в Python?", False),           # not ASCII letters
    ("def f(x): return x", False),                           # code fragment, no function word
    ("Hi there", False),                                     # under three words
])
def test_reads_as_english(text, english):
    assert magpie.reads_as_english(text) is english


def test_selection_drops_cut_short_foreign_and_duplicate_turns():
    turns = ["What is the capital of France?", None, "what is the capital of france", "ok",
             "Explain how a hash map works, with an example.", "Wie geht es dir heute?", "  What is the capital of "
             "FRANCE?!  "]
    train, heldout, counts = magpie.select(turns, SPEC)
    assert counts == {"sampled": 7, "cut": 1, "filtered": 2, "duplicates": 2, "train": len(train),
                      "heldout": len(heldout)}
    assert sorted(train + heldout) == ["Explain how a hash map works, with an example.", "What is the capital of France?"]


def test_the_split_depends_on_the_text_alone():
    texts = [f"Can you explain topic number {i} to me in simple words?" for i in range(400)]
    train, heldout, _ = magpie.select(texts, SPEC)
    again_train, again_heldout, _ = magpie.select(list(reversed(texts)), SPEC)
    assert set(heldout) == set(again_heldout) and set(train) == set(again_train) and not set(train) & set(heldout)
    assert 5 <= len(heldout) <= 40  # ~1 in 20
    assert all(magpie.is_heldout(t) for t in heldout) and not any(magpie.is_heldout(t) for t in train)


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    path = write_checkpoint(tmp_path_factory.mktemp("target"), "llama_tied_llama3")
    (path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|endoftext|>", "chat_template": SYSTEM}))
    return path


def sample(target: Path, out: Path, *extra: str) -> dict:
    summary = out.parent / f"{out.name}-summary.json"
    assert main(["train", "prompts", "--target", str(target), "--out", str(out), "--count", "6", "--batch", "2",
                 "--max-new", "6", "--threads", "1", "--seed", "3", "--json", str(summary), *extra]) == 0
    return json.loads(summary.read_text())


def shards(out: Path) -> list[str]:
    return [p.read_text() for p in sorted((out / "magpie").glob("shard-*.json"))]


def test_sampling_is_seeded_and_a_resumed_run_equals_one_run(target, tmp_path, capsys):
    one = sample(target, tmp_path / "one")
    assert capsys.readouterr().out.strip() == one["prompts"] == str(tmp_path / "one" / "chat_prompts.json")
    assert one["sampled"] == 6 and one["generate"]["shards_written"] == 3 and one["generate"]["tokens"] > 0
    sample(target, tmp_path / "two", "--stop-after", "1")
    assert len(shards(tmp_path / "two")) == 1
    two = sample(target, tmp_path / "two")
    assert two["generate"]["shards_written"] == 2
    assert shards(tmp_path / "one") == shards(tmp_path / "two") and len(shards(tmp_path / "one")) == 3
    turns = [t for s in shards(tmp_path / "one") for t in json.loads(s)["turns"]]
    assert len(turns) == 6 and len(set(map(str, turns))) > 1  # sampled, not one greedy turn six times
    other = sample(target, tmp_path / "three", "--seed", "4")
    assert shards(tmp_path / "three") != shards(tmp_path / "one") and other["sampled"] == 6


def test_other_settings_in_the_same_folder_are_one_clear_error(target, tmp_path, capsys):
    sample(target, tmp_path / "a", "--stop-after", "1")
    capsys.readouterr()
    code = main(["train", "prompts", "--target", str(target), "--out", str(tmp_path / "a"), "--count", "6",
                 "--batch", "3", "--max-new", "6", "--threads", "1", "--seed", "3"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "other settings" in err[0] and "batch=2" in err[0]


def test_a_target_without_chat_template_is_refused(tmp_path, capsys):
    plain = write_checkpoint(tmp_path / "plain", "llama_tied_llama3")
    code = main(["train", "prompts", "--target", str(plain), "--out", str(tmp_path / "o"), "--count", "2"])
    err = capsys.readouterr().err
    assert code == 2 and "no chat template" in err and not (tmp_path / "o" / "chat_prompts.json").exists()


def test_chat_prompts_file_errors_name_the_file(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text("{}")
    with pytest.raises(YggcError, match="x.json: not a chat_prompts.json"):
        stdlib_prompts.read_chat_prompts(bad)
    bad.write_text(json.dumps({"train": [1, 2]}))
    with pytest.raises(YggcError, match="not a list of texts"):
        stdlib_prompts.read_chat_prompts(bad)
    bad.write_text("{")
    with pytest.raises(YggcError, match="x.json: cannot read it as JSON"):
        stdlib_prompts.read_chat_prompts(bad)
    bad.write_text(json.dumps({"sources": [], "prompts": [{"source": "a"}]}))
    with pytest.raises(YggcError, match="x.json: 'prompts' is not a list of {source, text} objects"):
        stdlib_prompts.read_chat_prompts(bad)
