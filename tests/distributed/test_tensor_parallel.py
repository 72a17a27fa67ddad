"""Tensor parallelism over 2 gloo ranks launched from pytest: each rank's logits equal the single-process
graph's, and greedy tree decoding with the split verifier equals single-process autoregressive decoding."""
import dataclasses
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.multiprocessing as mp
from checkpoints import write_checkpoint
from safetensors.torch import load_file, save_file
from spawned_ranks import spawned_rank
from yggc.graphs import CheckpointError, load_config, load_model
from yggc.graphs.tensor_parallel import load_tp_model, local_config

from yggc.artifacts.cache_layout import CacheLayout, causal_rows
from yggc.plan.shape import TreeShape
from yggc.runtime.autoregressive import AutoregressiveDecoder
from yggc.runtime.drafters import speculative_decoder
from yggc.tree.sampling import SamplingParams

WORLD = 2
# biases (row-parallel o bias), a tied head, split experts (and a split shared expert beside a dense layer)
NAMES = ["llama_gqa", "qwen2_bias", "llama_tied_llama3", "mixtral_top2", "qwen2_moe_shared"]
SHAPE = TreeShape(3, 2, 5)


def prompt(vocab: int, n: int, seed: int) -> list[int]:
    return torch.randint(1, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def decode(dec, ids, n=32) -> list[int]:
    return [t for chunk in dec.stream(ids, n, SamplingParams()) for t in chunk]


def rank_main(rank: int, init: str, verifier: str, drafter: str, out: str) -> None:
    with spawned_rank("gloo", init_method=init, rank=rank, world_size=WORLD):
        torch.set_num_threads(1)
        layout = CacheLayout(128)
        graph = load_tp_model(verifier, layout.n_slots)
        vocab = graph.cfg.vocab_size
        ids = prompt(vocab, 24, 0)
        pos = torch.arange(len(ids))
        with torch.inference_mode():
            logits = graph(torch.tensor(ids), pos, pos.clone(), causal_rows(pos, layout.n_slots))
        save_file({"logits": logits.contiguous()}, f"{out}/logits{rank}.safetensors")
        ref = prompt(vocab, 9, 1)
        tree = speculative_decoder(graph, load_model(drafter, layout.n_slots), layout, SHAPE)
        tokens = {"tree": decode(tree, ref), "ar": decode(AutoregressiveDecoder(graph, layout), ref),
                  "kv_heads": graph.layers[0].attn.cache.k.shape[0]}
        with open(f"{out}/tokens{rank}.json", "w") as f:
            json.dump(tokens, f)


@pytest.mark.parametrize("name", NAMES)
def test_tensor_parallel_logits_and_tree_decoding_equal_one_process(name, tmp_path):
    v = write_checkpoint(tmp_path / "v", name, seed=5)
    d = write_checkpoint(tmp_path / "d", name, seed=6, base=v, noise=0.03)
    mp.spawn(rank_main, args=(f"file://{tmp_path}/pg", str(v), str(d), str(tmp_path)), nprocs=WORLD)
    layout = CacheLayout(128)
    single = load_model(v, layout.n_slots)
    ids = prompt(single.cfg.vocab_size, 24, 0)
    pos = torch.arange(len(ids))
    with torch.inference_mode():
        want = single(torch.tensor(ids), pos, pos.clone(), causal_rows(pos, layout.n_slots))
        ref = decode(AutoregressiveDecoder(single, layout), prompt(single.cfg.vocab_size, 9, 1))
    for rank in range(WORLD):
        got = load_file(str(tmp_path / f"logits{rank}.safetensors"))["logits"]
        assert (got - want).abs().max().item() <= 1e-5
        tokens = json.loads((tmp_path / f"tokens{rank}.json").read_text())
        assert tokens["ar"] == ref and tokens["tree"] == ref  # every rank runs the same loop to the same tokens
        assert tokens["kv_heads"] == max(1, single.cfg.n_kv_heads // WORLD)  # each rank caches its own KV heads


def test_a_degree_that_does_not_divide_the_heads_is_one_clear_error(checkpoint):
    cfg = load_config(checkpoint("llama_gqa"))  # 4 heads, 2 KV heads, MLP 96
    with pytest.raises(CheckpointError, match=r"attention heads \(4\) do not split over 3 ranks"):
        local_config(cfg, 3)
    assert local_config(cfg, 1) == cfg
    assert (local_config(cfg, 4).n_heads, local_config(cfg, 4).n_kv_heads) == (1, 1)  # KV heads shared by 2 ranks
    moe = local_config(load_config(checkpoint("qwen2_moe_shared")), 2).moe  # experts 40, shared expert 56
    assert (moe.expert_size, moe.shared_expert_size, moe.n_experts) == (20, 28, 5)
    odd = load_config(checkpoint("qwen2_moe_shared"))
    odd = dataclasses.replace(odd, moe=dataclasses.replace(odd.moe, expert_size=41))
    with pytest.raises(CheckpointError, match=r"expert intermediate size \(41\) do not split over 2 ranks"):
        local_config(odd, 2)


def run_cli(*argv: str, env: dict | None = None,
            launcher: tuple[str, ...] = ("-m", "yggc.cli")) -> subprocess.CompletedProcess:
    """`yggc run ARGV` in a subprocess; `launcher`: what python starts (the CLI module, or torchrun and its flags)."""
    return subprocess.run([sys.executable, *launcher, "run", *argv], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})


def test_yggc_run_tp_starts_the_ranks_and_writes_once(tmp_path):
    v = write_checkpoint(tmp_path / "v", "llama_gqa", seed=5)
    d = write_checkpoint(tmp_path / "d", "llama_gqa", seed=6, base=v, noise=0.03)
    common = ["-m", str(v), "-md", str(d), "--prompt-ids", "3,1,4,1,5", "-n", "24", "--threads", "1", "--json"]
    split, whole = run_cli(*common, "--tp", "2"), run_cli(*common)
    assert split.returncode == 0 and whole.returncode == 0, split.stderr
    assert len(split.stdout.strip().splitlines()) == 1  # rank 1 is silent
    assert json.loads(split.stdout)["tokens"] == json.loads(whole.stdout)["tokens"]


def test_torchrun_starts_yggc_as_a_module_and_rank_0_writes_once(tmp_path):
    """The route the help and errors name: `torchrun --nproc-per-node 2 -m yggc run ...`."""
    v = write_checkpoint(tmp_path / "v", "llama_gqa", seed=5)
    d = write_checkpoint(tmp_path / "d", "llama_gqa", seed=6, base=v, noise=0.03)
    common = ["-m", str(v), "-md", str(d), "--prompt-ids", "3,1,4,1,5", "-n", "24", "--threads", "1", "--json"]
    launched = run_cli(*common, launcher=("-m", "torch.distributed.run", "--nproc-per-node", "2", "-m", "yggc"))
    whole = run_cli(*common)
    assert launched.returncode == 0, launched.stderr
    assert len(launched.stdout.strip().splitlines()) == 1  # rank 1 is silent
    assert json.loads(launched.stdout)["tokens"] == json.loads(whole.stdout)["tokens"]


def test_tp_flag_errors_are_one_line(tmp_path):
    v = write_checkpoint(tmp_path / "v", "llama_gqa", seed=5)
    mismatch = run_cli("-m", str(v), "--prompt-ids", "3,1", "--tp", "3", env={"WORLD_SIZE": "2"})
    assert mismatch.returncode == 2
    assert mismatch.stderr.strip() == "yggc: error: --tp 3 but torchrun started 2 ranks; drop --tp or make them equal"
    odd = run_cli("-m", str(v), "--prompt-ids", "3,1", "--tp", "3")
    assert odd.returncode == 2 and odd.stderr.strip().endswith("attention heads (4) do not split over 3 ranks; "
                                                               "use a tensor-parallel degree that divides them")


def nccl_rank_main(rank: int, init: str, verifier: str, out: str) -> None:
    with spawned_rank("nccl", init_method=init, rank=rank, world_size=WORLD):
        torch.cuda.set_device(rank)
        torch.backends.cuda.matmul.allow_tf32 = False
        layout, device = CacheLayout(128), f"cuda:{rank}"
        graph = load_tp_model(verifier, layout.n_slots, device=device)
        pos = torch.arange(24, device=device)
        ids = torch.tensor(prompt(graph.cfg.vocab_size, 24, 0), device=device)
        with torch.inference_mode():
            logits = graph(ids, pos, pos.clone(), causal_rows(pos, layout.n_slots))
        save_file({"logits": logits.cpu().contiguous()}, f"{out}/logits{rank}.safetensors")


@pytest.mark.cuda
@pytest.mark.skipif(torch.cuda.device_count() < WORLD, reason=f"needs {WORLD} CUDA devices")
def test_nccl_ranks_give_one_process_logits(tmp_path):
    v = write_checkpoint(tmp_path / "v", "llama_gqa", seed=5)
    mp.spawn(nccl_rank_main, args=(f"file://{tmp_path}/pg", str(v), str(tmp_path)), nprocs=WORLD)
    layout = CacheLayout(128)
    single = load_model(v, layout.n_slots)
    pos = torch.arange(24)
    with torch.inference_mode():
        want = single(torch.tensor(prompt(single.cfg.vocab_size, 24, 0)), pos, pos.clone(),
                      causal_rows(pos, layout.n_slots))
    for rank in range(WORLD):
        got = load_file(str(tmp_path / f"logits{rank}.safetensors"))["logits"]
        assert (got - want).abs().max().item() <= 1e-4
