"""A campaign kept in a folder: answers round-trip exactly as uint16 ids joined to their prompts by hash, and a new
machine continuing from the folder trains as the old machine would have from the same head."""
import json

import pytest
import torch
from checkpoints import write_checkpoint
from safetensors.torch import load_file
from test_eagle3_head import head_weights, train_head

from yggc.errors import YggcError
from yggc.train import campaign, shards


def shard(prompts: list[list[int]], answers: list[list[int]]) -> dict[str, torch.Tensor]:
    offsets = lambda xs: torch.tensor([0] + [len(x) for x in xs]).cumsum(0)  # noqa: E731
    return {"prompt_ids": torch.tensor(sum(prompts, []), dtype=torch.int32), "prompt_offsets": offsets(prompts),
            "response_ids": torch.tensor(sum(answers, []), dtype=torch.int32), "response_offsets": offsets(answers)}


def test_answers_round_trip_to_the_same_token_sequences():
    prompts, answers = [[1, 5, 9], [7, 7]], [[65535, 0, 12], [49151]]
    compact = campaign.compact_shard(shard(prompts, answers))
    assert compact["answer_ids"].dtype == torch.uint16 and compact["prompt_sha256"].shape == (2, 32)
    back = campaign.expand_shard(compact, prompts, "x")
    po, ro = back["prompt_offsets"].tolist(), back["response_offsets"].tolist()
    assert [back["prompt_ids"][a:b].tolist() for a, b in zip(po, po[1:])] == prompts
    assert [back["response_ids"][a:b].tolist() for a, b in zip(ro, ro[1:])] == answers
    assert back["topk_ids"].shape == (4, 0)  # no soft labels
    with pytest.raises(YggcError, match="prompt 1 is not the one its answer was generated for"):
        campaign.expand_shard(compact, [[1, 5, 9], [7, 8]], "x")
    with pytest.raises(YggcError, match="2 answers but 1 prompts"):
        campaign.expand_shard(compact, [[1, 5, 9]], "x")
    with pytest.raises(YggcError, match="does not fit in 16 bits"):
        campaign.compact_shard(shard(prompts, [[65536], [1]]))


def test_a_new_machine_continues_the_campaign_as_the_old_one_would_have(ckpt_root, tmp_path):
    target = write_checkpoint(ckpt_root / "campaign_v", "llama_tied_llama3")
    folder = tmp_path / "campaign"
    first = train_head(target, tmp_path / "old", "--schedule", "wsd", "--steps", "4", "--campaign", str(folder))
    record = json.loads((folder / "campaign.json").read_text())
    assert len(record["runs"]) == 1 and record["best"]["steps"] == 4 and (folder / "head" / "config.json").is_file()
    answers = sorted(p.relative_to(folder) for p in folder.glob("answers/*/shard-*.safetensors"))
    assert answers and all(load_file(str(folder / p))["answer_ids"].dtype == torch.uint16 for p in answers)
    # the old machine, warm-starting from the kept head: what the new machine must reproduce
    again = train_head(target, tmp_path / "old", "--schedule", "wsd", "--steps", "3", "--init", str(folder / "head"),
                       "--no-resume")
    fresh = train_head(target, tmp_path / "new", "--schedule", "wsd", "--steps", "3", "--campaign", str(folder))
    assert fresh["init"] == str(folder / "head")
    for split in ("train", "heldout"):  # the same conversations, read from the campaign instead of generated
        old, new = (shards.read_samples(tmp_path / m / "data" / split) for m in ("old", "new"))
        assert [s.ids for s in old] == [s.ids for s in new] and [s.answer_start for s in old] == [
            s.answer_start for s in new]
    a, b = head_weights(again), head_weights(fresh)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert fresh["heldout_agreement_per_step"] == again["heldout_agreement_per_step"]
    assert len(json.loads((folder / "campaign.json").read_text())["runs"]) == 2
    assert first["steps"] == 4


def test_a_head_is_kept_only_where_it_beats_the_best_so_far(tmp_path):
    head = tmp_path / "head-out"
    head.mkdir()
    (head / "config.json").write_text("{}")
    record = {"data": None, "runs": [], "best": {"score": 0.5, "steps": 0}}  # e.g. the warm start's own score
    summary = {"steps": 10, "heldout_agreement_per_step": [0.9], "heldout-mtbench_agreement_per_step": [0.4],
               "heldout-human_agreement_per_step": [0.5], "head": str(head)}
    assert not campaign.record_run(tmp_path / "c", record, {"x": 1}, summary)  # human chat 0.45 < 0.5
    assert not (tmp_path / "c" / "head").exists() and record["best"]["score"] == 0.5 and len(record["runs"]) == 1
    summary["heldout-human_agreement_per_step"] = [0.7]
    assert campaign.record_run(tmp_path / "c", record, {"x": 1}, summary)  # 0.55
    assert (tmp_path / "c" / "head" / "config.json").is_file() and record["best"] == {"score": 0.55, "steps": 10}
    assert json.loads((tmp_path / "c" / "campaign.json").read_text())["runs"][1]["score"] == 0.55
    assert not campaign.record_run(tmp_path / "c", record, {"x": 1}, summary)  # the finished run again: no new row
    assert len(json.loads((tmp_path / "c" / "campaign.json").read_text())["runs"]) == 2


def test_sampled_answers_answer_every_training_prompt_again_at_t1_and_travel_with_the_campaign(ckpt_root, tmp_path):
    assert shards.shard_sampling("train-t1", 0, 0) == (True, shards.SAMPLED_SEED_OFFSET)
    assert [shards.shard_sampling("train", i, 0)[0] for i in range(3)] == [False, False, True]
    assert {shards.shard_sampling("train-t1", i, 0)[1] for i in range(9)}.isdisjoint(
        {shards.shard_sampling("train", i, 0)[1] for i in range(9)})  # never the training split's draws
    target = write_checkpoint(ckpt_root / "campaign_t1_v", "llama_tied_llama3")
    folder = tmp_path / "campaign"
    both = train_head(target, tmp_path / "old", "--steps", "2", "--sampled-answers", "--campaign", str(folder))
    greedy, drawn = (shards.read_samples(tmp_path / "old" / "data" / s) for s in ("train", "train-t1"))
    assert [s.ids[:s.answer_start] for s in drawn] == [s.ids[:s.answer_start] for s in greedy]  # the same prompts
    assert [s.ids for s in drawn] != [s.ids for s in greedy]  # answered anew
    assert all(campaign.sampled_flag(p) == "True" for p in (tmp_path / "old" / "data" / "train-t1").glob("shard-*"))
    assert both["train_conversations"] == len(greedy) + len(drawn)
    assert sorted(p.name for p in (folder / "answers" / "train-t1").glob("shard-*")) == sorted(
        p.name for p in (tmp_path / "old" / "data" / "train-t1").glob("shard-*"))
    fresh = train_head(target, tmp_path / "new", "--steps", "2", "--sampled-answers", "--campaign", str(folder),
                       "--init", str(folder / "head"))
    assert [s.ids for s in shards.read_samples(tmp_path / "new" / "data" / "train-t1")] == [s.ids for s in drawn]
    assert fresh["train_conversations"] == both["train_conversations"]


def test_a_rebuilt_prompt_file_is_let_through_and_the_digests_decide():
    data = {"target": "t", "dtype": "bfloat16", "chat_prompts_sha256": "a" * 64, "gen_batch": 32}
    record = {"data": data, "runs": [], "best": None}
    campaign.check_data(record, {**data, "chat_prompts_sha256": "b" * 64})  # other bytes: the import joins by digest
    with pytest.raises(YggcError, match=r"chat_prompts_sha256 a+ -> None"):
        campaign.check_data(record, {**data, "chat_prompts_sha256": None})  # no prompt set now: other data
    with pytest.raises(YggcError, match="gen_batch 32 -> 64"):
        campaign.check_data(record, {**data, "chat_prompts_sha256": "b" * 64, "gen_batch": 64})


def test_a_splits_short_last_shard_is_imported_from_the_leading_prompts(tmp_path):
    prompts = [[1, i] for i in range(7)]  # the split has 7 prompts; 5 were answered, 3 to a shard
    answers = [[10 + i] for i in range(5)]
    for index, (a, b) in enumerate([(0, 3), (3, 5)]):
        campaign.write_shard(campaign.compact_shard(shard(prompts[a:b], answers[a:b])),
                             tmp_path / "c" / "answers" / "heldout" / f"shard-{index:05d}.safetensors", {})
    assert campaign.import_answers(tmp_path / "c", tmp_path / "data", {"heldout": prompts}, 3) == 2
    back = shards.read_samples(tmp_path / "data" / "heldout")
    assert [s.ids for s in back] == [p + a for p, a in zip(prompts, answers)]
    with pytest.raises(YggcError, match="prompt 0 is not the one"):
        campaign.import_answers(tmp_path / "c", tmp_path / "other", {"heldout": prompts[1:]}, 3)


def test_a_resumed_run_starts_from_its_own_warm_start(tmp_path):
    """A run resumed from its saved state rebuilds its head from the head it was warm-started from (the saved rows'
    draft vocabulary), not from a vocabulary counted from the data; a warm start that is gone is one line."""
    from yggc.train.campaign import saved_warm_start

    head, state = tmp_path / "head", tmp_path / "state" / "state.json"
    head.mkdir()
    state.parent.mkdir()
    state.write_text(json.dumps({"step": 9, "recipe": {"seed": 0, "init": str(head)}}))
    assert saved_warm_start(state) == head
    state.write_text(json.dumps({"step": 9, "recipe": {"seed": 0}}))
    assert saved_warm_start(state) is None
    state.write_text(json.dumps({"step": 9, "recipe": {"init": str(tmp_path / "gone")}}))
    with pytest.raises(YggcError, match="warm-started from .*gone, which is gone; restore it or pass --no-resume"):
        saved_warm_start(state)
