"""The EAGLE-3 training step: the loss on gathered rows equals the all-rows loss (value and gradients), agreement
counts out-of-vocabulary rows as misses, batches of similar lengths, bfloat16 autocast only where the CPU has it,
the warmup-stable-decay schedule, warm starts and pausing."""
import threading

import pytest
import torch
import torch.nn.functional as F
from checkpoints import write_checkpoint
from yggc.graphs import load_model
from yggc.graphs.eagle3_checkpoint import head_base_config, new_eagle3, save_eagle3

from yggc.train import batches, eagle3_head, loop
from yggc.train.features import ConversationFeatures
from yggc.train.presets import TrainHParams
from yggc.train.ttt import ttt_hidden, ttt_logits, ttt_loss


@pytest.fixture(scope="module")
def pair(ckpt_root):
    v = write_checkpoint(ckpt_root / "ttt_step_v", "llama_gqa", seed=5)
    verifier = load_model(v, 64)
    ids = torch.randperm(301, generator=torch.Generator().manual_seed(1))[:120].sort().values
    head = new_eagle3(v, ids, 64, seed=0, init_std=0.2)
    verifier.feature_layers = head.eagle.feature_layers
    return v, verifier, head


def random_conversations(head, n: int, seed: int) -> list[ConversationFeatures]:
    """Conversations of random lengths with random features and verifier choices (some outside the draft vocab)."""
    g = torch.Generator().manual_seed(seed)
    F_dim, H = head.fc.in_features, head.cfg.hidden_size
    out = []
    for _ in range(n):
        T = int(torch.randint(6, 20, (1,), generator=g))
        out.append(ConversationFeatures(torch.randint(0, 301, (T,), generator=g), torch.randn(T, F_dim, generator=g),
                                        torch.randn(T, H, generator=g), torch.randint(0, 301, (T,), generator=g),
                                        int(torch.randint(0, 4, (1,), generator=g))))
    return out


def all_rows_loss(head, seqs, tables, unroll: int, decay: float = 0.8) -> torch.Tensor:
    """The loss as written before gathering: the LM head on every padded row, masked afterwards."""
    draft_ids, t2d, lm_rows = tables
    T, B = max(len(s.tokens) for s in seqs), len(seqs)
    tokens, feats = torch.zeros(B, T, dtype=torch.long), torch.zeros(B, T, seqs[0].features.shape[1])
    final, best = torch.zeros(B, T, seqs[0].final.shape[1]), torch.full((B, T), -1, dtype=torch.long)
    mask = torch.zeros(B, T, dtype=torch.bool)
    for b, s in enumerate(seqs):
        n = len(s.tokens)
        tokens[b, :n], feats[b, :n], final[b, :n], best[b, :n] = s.tokens, s.features, s.final, t2d[s.best]
        mask[b, s.loss_from:n] = True
    mask &= best >= 0
    p = torch.log_softmax(final @ lm_rows.T, -1).exp()
    total, rows = 0.0, torch.arange(T)
    for j, lg in enumerate(ttt_logits(head, tokens, feats, unroll)):
        m = mask & (rows >= j)[None, :]
        ce = -(p * F.log_softmax(lg.float(), -1)).sum(-1)
        total = total + decay ** j * (ce * m).sum() / m.sum().clamp_min(1)
    return total


def test_the_loss_on_gathered_rows_equals_the_all_rows_loss_and_its_gradients(pair):
    _, verifier, head = pair
    tables = eagle3_head.draft_tables(verifier, head.draft_ids)
    seqs = random_conversations(head, 4, seed=2)
    head.requires_grad_(True)
    reference = all_rows_loss(head, seqs, tables, 3)
    want = torch.autograd.grad(reference, list(head.parameters()))
    batch = eagle3_head.collate(seqs, *tables)
    gathered, _ = ttt_loss(head, ttt_hidden(head, batch.tokens, batch.features, 3), batch)
    got = torch.autograd.grad(gathered, list(head.parameters()))
    head.requires_grad_(False)
    torch.testing.assert_close(gathered, reference, rtol=1e-5, atol=1e-6)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_agreement_counts_rows_outside_the_draft_vocabulary_as_misses(pair):
    _, verifier, head = pair
    tables = eagle3_head.draft_tables(verifier, head.draft_ids)
    seqs = random_conversations(head, 3, seed=3)
    batch = eagle3_head.collate(seqs, *tables)
    with torch.no_grad():
        hidden = ttt_hidden(head, batch.tokens, batch.features, 2)
        _, scores = ttt_loss(head, hidden, batch)
        top1 = head.lm_head(head.norm(hidden[0].flatten(0, 1)[batch.rows])).argmax(-1)
    assert scores.rows[0] == len(batch.rows) and (batch.best < 0).any()  # every answer row, in vocabulary or not
    assert scores.hits[0] == int((top1 == batch.best).sum())  # an out-of-vocabulary row (-1) is never a hit
    assert scores.rows[1] == int((batch.positions >= 1).sum())


def test_batches_of_similar_lengths_cover_each_epoch_and_pad_less():
    g = torch.Generator().manual_seed(0)
    lengths = tuple(int(n) for n in torch.randint(10, 400, (64,), generator=g))
    steps = [batches.length_bucketed_indices(lengths, 7, s, 4) for s in range(16)]
    assert sorted(i for batch in steps for i in batch) == list(range(64))  # one epoch: every item once
    assert steps == [batches.length_bucketed_indices(lengths, 7, s, 4) for s in range(16)]  # a pure function of the step
    assert batches.length_bucketed_indices(lengths, 7, 16, 4) != steps[0]  # the next epoch is shuffled anew

    def padding(batches):
        return sum(max(lengths[i] for i in b) * len(b) - sum(lengths[i] for i in b) for b in batches)

    random_order = [batches.batch_indices(64, 7, s, 4) for s in range(16)]
    assert padding(steps) < padding(random_order) / 3
    assert batches.length_bucketed_indices((5, 9), 0, 3, 4) == batches.batch_indices(2, 0, 3, 4)  # fewer items than a batch


def test_bfloat16_autocast_is_chosen_only_where_the_cpu_multiplies_bfloat16(monkeypatch):
    for avx512_bf16, amx, want in ((True, False, True), (False, True, True), (False, False, False)):
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda v=avx512_bf16: v)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda v=amx: v)
        assert eagle3_head.autocast_choice("auto") is want
        assert eagle3_head.autocast_choice("on") is True and eagle3_head.autocast_choice("off") is False


def test_the_warmup_stable_decay_rate_does_not_depend_on_how_long_the_run_will_be():
    hp = TrainHParams(batch_size=2, lr=1e-3, warmup_steps=4, minutes=1.0, min_lr_ratio=0.1)
    assert [loop.wsd_lr_at(s, hp, None, 0) for s in range(4)] == [hp.lr * (s + 1) / 4 for s in range(4)]
    assert loop.wsd_lr_at(10_000, hp, None, 0) == hp.lr  # the stable phase lasts as long as the run is extended
    assert loop.wsd_lr_at(99, hp, 100, 20) == hp.lr  # the decay starts where it is placed
    decay = [loop.wsd_lr_at(s, hp, 100, 20) for s in range(100, 121)]
    assert decay[0] == hp.lr and decay[-1] == pytest.approx(hp.lr * hp.min_lr_ratio)
    assert all(a > b for a, b in zip(decay, decay[1:]))


def test_a_warm_start_loads_the_saved_head_exactly(pair, tmp_path):
    v, verifier, head = pair
    other = new_eagle3(v, head.draft_ids, 64, seed=1, init_std=0.2).to(torch.bfloat16)
    saved = save_eagle3(other, head_base_config(v), tmp_path / "head")
    warm, tables = eagle3_head.saved_head(saved, v, verifier)
    got, want = warm.state_dict(), other.state_dict()
    assert got.keys() == want.keys() and all(t.dtype == torch.float32 for t in got.values())
    trained = [k for k in want if k != "embed.weight"]  # the embedding is the verifier's own, read from it
    assert all(torch.equal(got[k], want[k].float()) for k in trained)  # bfloat16 widens exactly
    assert torch.equal(got["embed.weight"], verifier.embed.weight.float())
    assert torch.equal(tables[0], head.draft_ids)  # the head's own draft vocabulary


def test_a_paused_job_saves_its_state_and_waits_until_the_flag_is_removed(tmp_path, monkeypatch):
    flag = tmp_path / "train.pause"
    monkeypatch.setattr(loop, "PAUSE_FILE", flag)
    saves = []
    loop.wait_while_paused("eagle3", lambda: saves.append(1))
    assert saves == []  # no flag: nothing saved, no wait
    flag.touch()
    remover = threading.Timer(0.3, flag.unlink)
    remover.start()
    loop.wait_while_paused("eagle3", lambda: saves.append(flag.exists()))
    remover.join()
    assert saves == [True] and not flag.exists()  # saved once, while paused; returned once the flag was gone


def test_decay_without_the_wsd_schedule_is_one_clear_error():
    from yggc.cli.main import build_parser
    from yggc.cli.train import job_options
    from yggc.errors import YggcError

    args = build_parser().parse_args(["train", "eagle3", "--target", "t", "--preset", "tiny", "--decay", "10"])
    with pytest.raises(YggcError, match="--decay goes with --schedule wsd"):
        eagle3_head.run_preset(job_options(args))
