"""Human-written prompt sets: splits that are pure functions of the source and the text."""
import json

from yggc.train import stdlib_prompts
from yggc.train.human_prompts import in_turn, prompt_set_splits
from yggc.train.magpie import is_heldout


def prompt(source: str, text: str) -> dict:
    return {"source": source, "id": text[:8], "text": text}


def test_mt_bench_first_turns_are_held_out_and_its_follow_ups_left_out():
    texts = [f"Please explain topic number {i} to me in simple words." for i in range(200)]
    raw = {"sources": [], "prompts": [prompt("mt_bench", "Compose a travel blog post about Hawaii."),
                                      prompt("mt_bench_turn2", "Rewrite your previous response."),
                                      prompt("koala_test", "What is the capital of Peru, and why?"),
                                      *(prompt("dolly", t) for t in texts),
                                      prompt("vicuna", texts[0].upper())]}  # the same text normalised: once
    splits = prompt_set_splits(raw, "set.json")
    assert splits["heldout-mtbench"] == ["Compose a travel blog post about Hawaii."]
    assert "Rewrite your previous response." not in sum(splits.values(), [])
    assert "What is the capital of Peru, and why?" in splits["heldout-human"]  # a set published for evaluation only
    held = [t for t in texts if is_heldout(t)]
    assert 0 < len(held) < 40 and splits["heldout-human"][1:] == held
    assert splits["train"] == [t for t in texts if not is_heldout(t)]


def test_the_training_split_takes_the_sources_in_turn():
    assert in_turn([["a1", "a2", "a3"], ["b1"], ["c1", "c2"]]) == ["a1", "b1", "c1", "a2", "c2", "a3"]
    groups = {src: [f"Tell me about {src} item {i}, please." for i in range(n)]
              for src, n in (("big", 30), ("small", 4), ("mid", 12))}
    raw = {"sources": [], "prompts": [prompt(src, t) for src, texts in groups.items() for t in texts]}
    kept = [[t for t in texts if not is_heldout(t)] for texts in groups.values()]
    assert prompt_set_splits(raw, "set.json")["train"] == in_turn(kept)


def test_a_prompt_set_mixes_two_chat_prompts_with_each_stdlib_prompt_and_keeps_its_held_out_splits(tmp_path):
    path = tmp_path / "set.json"
    texts = [f"How do I cook dish number {i} well?" for i in range(60)]
    path.write_text(json.dumps({"sources": [], "prompts": [prompt("mt_bench", "Hi there, who are you?"),
                                                           *(prompt("x", t) for t in texts)]}))
    splits = stdlib_prompts.prompt_splits(None, path)
    assert {"train", "heldout", "heldout-mtbench", "heldout-human"} <= splits.keys()
    train = [t for t in texts if not is_heldout(t)]
    assert splits["train"][:6] == [train[0], train[1], splits["train"][2], train[2], train[3], splits["train"][5]]
    assert splits["train"][2] not in texts and splits["heldout-mtbench"] == ["Hi there, who are you?"]
