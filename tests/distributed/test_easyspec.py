"""EasySpec across 2 gloo ranks launched from pytest: each rank runs one attention layer of every fuzzy set,
the gathered fuzzy logits equal one process's, greedy output equals single-process autoregressive decoding,
and after each bonus calibration every rank's drafter K/V equal an exact sequential pass."""
import json

import torch
import torch.multiprocessing as mp
from checkpoints import write_checkpoint
from spawned_ranks import spawned_rank
from test_tensor_parallel import WORLD, decode, prompt, run_cli
from yggc.graphs import load_model
from yggc.graphs.fuzzy import FuzzyDrafter, fuzzy_groups
from yggc.graphs.tensor_parallel import load_tp_model

from yggc.artifacts.cache_layout import CacheLayout, causal_rows, prefill
from yggc.plan.shape import TreeShape
from yggc.runtime.autoregressive import AutoregressiveDecoder, StopPolicy
from yggc.runtime.drafters.fuzzy_proposer import FuzzyProposer, fuzzy_drafter
from yggc.runtime.speculative import SpeculativeDecoder
from yggc.tree.sampling import SamplingParams

LAYOUT = CacheLayout(128)


def fuzzy_logits(fuzzy, vocab: int) -> torch.Tensor:
    ids = prompt(vocab, 20, 2)
    pos = torch.arange(len(ids))
    return fuzzy(torch.tensor(ids), pos, pos.clone(), causal_rows(pos, LAYOUT.n_slots))


def calibrated_caches_are_exact(dec, drafter, exact, vocab: int) -> bool:
    """Drive the decoder by hand; after each iteration compare the drafter's K/V up to the root with exact."""
    stop, gen = StopPolicy(200, (), LAYOUT), torch.Generator()
    committed = prompt(vocab, 9, 3)
    logits = dec.proposer.prefill(committed, 0)
    n, pending = len(committed), [int(logits.argmax())]
    committed += pending
    ok = True
    while len(committed) < 50:
        root = n
        new, n, pending = dec.iterate(n, pending, SamplingParams(), gen, stop)
        prefill(exact, committed[:root + 1], 0, LAYOUT, 8)
        for fz, ex in zip(drafter.caches(), exact.caches()):
            ok &= all(torch.allclose(a[:, :root + 1], b[:, :root + 1], atol=1e-5) for a, b in ((fz.k, ex.k), (fz.v, ex.v)))
        committed += new
    return ok


def rank_main(rank: int, init: str, verifier: str, drafter_dir: str, out: str) -> None:
    with spawned_rank("gloo", init_method=init, rank=rank, world_size=WORLD):
        torch.set_num_threads(1)
        graph = load_tp_model(verifier, LAYOUT.n_slots)
        vocab = graph.cfg.vocab_size
        drafter = load_model(drafter_dir, LAYOUT.n_slots)
        fuzzy = fuzzy_drafter(drafter, WORLD, "all")
        with torch.inference_mode():
            logits = fuzzy_logits(fuzzy, vocab)
            dec = SpeculativeDecoder(FuzzyProposer(graph, drafter, LAYOUT, TreeShape(4, 2, 6), fuzzy))
            tokens = decode(dec, prompt(vocab, 9, 1))
            exact_cache = calibrated_caches_are_exact(dec, drafter, load_model(drafter_dir, LAYOUT.n_slots), vocab)
        torch.save({"logits": logits}, f"{out}/fuzzy{rank}.pt")
        with open(f"{out}/easyspec{rank}.json", "w") as f:
            json.dump({"tokens": tokens, "accepted": dec.stats.n_accept, "exact_cache": exact_cache,
                       "sets": [list(g) for g in fuzzy.groups]}, f)


def test_easyspec_across_ranks_is_lossless_and_calibrates_the_drafter_cache(tmp_path):
    v = write_checkpoint(tmp_path / "v", "llama_deep", seed=5)
    d = write_checkpoint(tmp_path / "d", "llama_deep", seed=6, base=v, noise=0.03)
    mp.spawn(rank_main, args=(f"file://{tmp_path}/pg", str(v), str(d), str(tmp_path)), nprocs=WORLD)
    single = load_model(v, LAYOUT.n_slots)
    drafter = load_model(d, LAYOUT.n_slots)
    vocab = single.cfg.vocab_size
    with torch.inference_mode():
        ref = decode(AutoregressiveDecoder(single, LAYOUT), prompt(vocab, 9, 1))
        want = fuzzy_logits(FuzzyDrafter(drafter, fuzzy_groups(6, WORLD, "all")), vocab)
    for rank in range(WORLD):
        got = json.loads((tmp_path / f"easyspec{rank}.json").read_text())
        assert got["sets"] == [[0, 1], [2, 3], [4, 5]]
        assert got["tokens"] == ref and got["accepted"] > 0
        assert got["exact_cache"]
        logits = torch.load(tmp_path / f"fuzzy{rank}.pt", weights_only=True)["logits"]
        assert (logits - want).abs().max().item() <= 1e-5  # the parallel sets compute what one process does


def test_yggc_run_fuzzy_on_two_ranks_matches_sequential_drafting(tmp_path):
    v = write_checkpoint(tmp_path / "v", "llama_deep", seed=5)
    d = write_checkpoint(tmp_path / "d", "llama_deep", seed=6, base=v, noise=0.03)
    common = ["-m", str(v), "-md", str(d), "--prompt-ids", "3,1,4,1,5", "-n", "24", "--threads", "1", "--json"]
    fuzzy = run_cli(*common, "--tp", "2", "--draft-parallel", "fuzzy")
    whole = run_cli(*common)
    assert fuzzy.returncode == 0 and whole.returncode == 0, fuzzy.stderr
    assert json.loads(fuzzy.stdout)["tokens"] == json.loads(whole.stdout)["tokens"]
    wrong = run_cli(*common, "--tp", "2", "--draft-parallel", "fuzzy", "--fuzzy-layers", "3")
    assert wrong.returncode == 2
    assert wrong.stderr.strip() == ("yggc: error: --fuzzy-layers 3 on 2 ranks: each rank runs one attention layer "
                                    "of a set, so use --fuzzy-layers 2")
    shallow = run_cli("-m", str(v), "-md", str(write_checkpoint(tmp_path / "d2", "llama_gqa", seed=1)),
                      "--prompt-ids", "3,1", "--draft-parallel", "fuzzy")
    assert shallow.returncode == 2 and "hold no set of 2 inner layers" in shallow.stderr
    bundle = run_cli(str(tmp_path), "--prompt-ids", "3,1", "--draft-parallel", "fuzzy")
    assert bundle.returncode == 2 and "--draft-parallel fuzzy runs the drafter eagerly" in bundle.stderr
