"""bf16 end to end through an O1 bundle (its own file: the compile is the suite's longest, and a file
is the unit the parallel test run schedules)."""
import pytest
import torch
from checkpoints import write_checkpoint
from yggc.passes.pipeline import CompileJob, compile_bundle

from yggc.plan.shape import TreeShape
from yggc.runtime import Runtime
from yggc.tree.sampling import SamplingParams

pytestmark = pytest.mark.slow  # compiles bundles: scheduled first (tests/conftest.py)

SHAPE = TreeShape(3, 2, 5)


def test_bfloat16_bundle_is_lossless_against_bfloat16_decoding(tmp_path):
    """bf16 end to end (weights, KV cache, compiled buckets): the tree through compiled bf16 buckets equals the
    bundle's own compiled bf16 verifier decoding, token for token. (Compiled and eager bf16 kernels round
    differently, so eager bf16 AR is not the reference: it left the compiled path at token 4 here.)"""
    v = write_checkpoint(tmp_path / "v", "llama_gqa", seed=11)
    pair_dirs = (v, write_checkpoint(tmp_path / "d", "llama_gqa", seed=12, base=v, noise=0.03))
    out = tmp_path / "bf16"
    compile_bundle(CompileJob(*pair_dirs, out, SHAPE, dtype=torch.bfloat16, max_seq=96, profile_repeats=2),
                   log=lambda m: None)
    rt = Runtime.load(out)
    assert rt.verifier.graph.embed.weight.dtype == torch.bfloat16
    assert rt.verifier.graph.caches()[0].k.dtype == torch.bfloat16
    for seed in range(2):
        prompt = torch.randint(1, 301, (6 + 7 * seed,), generator=torch.Generator().manual_seed(seed)).tolist()
        ar = rt.decoder(speculative=False)  # no end-of-sequence stop: all 40 tokens are compared
        ref = [t for c in ar.stream(prompt, 40, SamplingParams()) for t in c]
        tree = rt.decoder(speculative=True)
        assert [t for c in tree.stream(prompt, 40, SamplingParams()) for t in c] == ref
        assert tree.stats.n_iterations > 0
