"""Running the verifier tensor-parallel across processes (graphs/tensor_parallel.py splits it).

Two ways in: `torchrun --nproc-per-node N -m yggc run ...` starts the ranks itself (RANK, WORLD_SIZE and
MASTER_ADDR/PORT in the environment), and `yggc run --tp N` starts N ranks on this machine. Each rank
loads its slice of the verifier, a whole drafter, and runs the same decode loop; only rank 0 writes.
CPU ranks talk over gloo; CUDA ranks over NCCL, one device each (written to the documented API, not run
here).
"""
from __future__ import annotations

import contextlib
import os
import socket
import sys
from collections.abc import Callable, Iterator

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ..errors import USER_ERRORS, YggcError
from ..graphs.tensor_parallel import load_tp_model
from . import loading


def launched_world() -> int:
    """WORLD_SIZE of a torchrun launch (1 when not launched that way)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def rank_world() -> tuple[int, int]:
    """(rank, world size) of the initialised process group, else (0, 1)."""
    return (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)


def check_world(bundle, tp: int) -> None:
    """A bundle runs on exactly the ranks it was compiled for: one clear error otherwise."""
    world = launched_world()
    if tp == world:
        return
    if tp == 1:
        raise YggcError(f"{bundle} was compiled for one process, but {world} ranks run it; drop --tp (and "
                        f"torchrun), or re-run `yggc compile --tp {world}`")
    raise YggcError(f"{bundle} was compiled for {tp} tensor-parallel ranks, but {world} process(es) run it; run "
                    f"`yggc run --tp {tp} {bundle}` (or torchrun --nproc-per-node {tp} -m yggc run {bundle})")


def quiet_unless_first(rank: int) -> None:
    """Only rank 0 writes: every other rank's stdout and stderr go nowhere."""
    if rank:
        sys.stdout = sys.stderr = open(os.devnull, "w")


def join(device: str = "cpu") -> int:
    """Join the process group the environment describes (once) -> this process's rank."""
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device == "cuda" else "gloo")
        if device == "cuda":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", dist.get_rank())))
        quiet_unless_first(dist.get_rank())
        share = max(1, (os.cpu_count() or 1) // dist.get_world_size())
        if torch.get_num_threads() > share:  # ranks on one machine split its cores; more threads only contend
            torch.set_num_threads(share)
    return dist.get_rank()


def leave(completed: bool = True) -> None:
    """Destroy this rank's process group. After a completed run the ranks first meet at a barrier: a rank that
    closes its connections while a peer's last collective is still in flight can make gloo abort that peer."""
    if not dist.is_initialized():
        return
    if completed:
        dist.barrier()
    dist.destroy_process_group()


@contextlib.contextmanager
def process_group(backend: str, **init_args) -> Iterator[None]:
    """init_process_group(backend, **init_args) for the block's length; leave() after it (no barrier when it
    raised: a peer may never reach one)."""
    dist.init_process_group(backend, **init_args)
    completed = False
    try:
        yield
        completed = True
    finally:
        leave(completed)


def _rank_graph(path, n_slots: int, dtype: torch.dtype, device, weights: bool = True):
    if not weights:  # tensor-parallel bundles are O1: their packages take the slice's weights as inputs
        raise ValueError("a tensor-parallel rank always loads its weight slice")
    return load_tp_model(path, n_slots, dtype, device)


def load_verifier(model_dir, dtype: torch.dtype, max_seq: int, device: str = "cpu",
                  weights: bool = True) -> loading.LoadedModel:
    """This rank's slice of the verifier (joining the process group first), with the whole model's tokenizer
    and chat template; loading.load's arguments."""
    join(device)
    return loading.load(model_dir, dtype, max_seq, device, weights, graph_loader=_rank_graph)


def verifier_loader(world: int) -> Callable[..., loading.LoadedModel]:
    """loading.load, or on a tensor-parallel degree > 1 load_verifier (this rank's slice); same arguments."""
    return load_verifier if world > 1 else loading.load


def free_port() -> int:
    """A free local TCP port for the ranks' rendezvous."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, world: int, port: int, fn: Callable[[], int], results) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    quiet_unless_first(rank)  # before anything can fail: every rank reports the same error
    completed = False
    try:
        results[rank] = fn()
        completed = True
    except USER_ERRORS as e:  # the one line the CLI prints, from rank 0
        print(f"yggc: error: {e}", file=sys.stderr)
        results[rank] = 2
    finally:
        leave(completed)


def launch(world: int, fn: Callable[[], int]) -> int:
    """Run fn in `world` local ranks (what torchrun would start) -> rank 0's return value."""
    results = mp.Manager().dict()
    try:
        mp.spawn(_rank_main, args=(world, free_port(), fn, results), nprocs=world)
    except (mp.ProcessRaisedException, mp.ProcessExitedException):
        if 0 not in results:  # rank 0 failed: its traceback is the one to show
            raise
        # rank 0 reported (say, a one-line error) and left; a rank still waiting on it in a collective failed
    return results.get(0, 1)
