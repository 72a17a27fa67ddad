"""Sampling from a block-quantized verifier keeps that verifier's distribution: a compiled O2 bundle whose verifier
streams Q8_0 blocks through yggc::quant_linear_v1, decoding speculatively at T = 1, emits the two tokens after a root
with the joint distribution the same bundle's own verifier (its compiled package, the --no-spec model) gives them.
(Q4_1 shares the kernel's row-independent arithmetic and would cost a second bundle's compile.)"""
import pytest
import torch
from checkpoints import write_checkpoint
from test_speculative import N_SAMPLES, T1, chi2_pvalue, exact_two, first_two_after_root
from yggc.passes.pipeline import CompileJob, compile_bundle

from yggc.bundle import load_manifest
from yggc.plan.shape import TreeShape
from yggc.runtime import Runtime

pytestmark = pytest.mark.slow  # compiles a bundle: scheduled first (tests/conftest.py)
SHAPE = TreeShape(3, 2, 6)


@pytest.fixture(scope="module")
def runtime(tmp_path_factory) -> Runtime:
    """A Q8_0 bundle of a verifier over an 8-token vocabulary (hidden 32: whole blocks) and a drafter that is the
    verifier plus noise, so drafts are often accepted and often rejected."""
    root = tmp_path_factory.mktemp("qsample")
    v = write_checkpoint(root / "v", "tiny_vocab", seed=5, tokenizer=False)
    d = write_checkpoint(root / "d", "tiny_vocab", seed=6, base=v, noise=0.3, tokenizer=False)
    compile_bundle(CompileJob(v, d, root / "b", SHAPE, torch.bfloat16, max_seq=32, profile_repeats=2, opt="O2",
                              weights="q8_0"), log=lambda m: None)
    assert load_manifest(root / "b").weights == "q8_0"
    return Runtime.load(root / "b")


def test_sampled_speculation_keeps_the_quantized_verifier_distribution(runtime):
    prompt, root = [1, 5, 2], 3
    dec = runtime.decoder(shape=SHAPE, sampling=True)
    counts = first_two_after_root(dec, prompt, root, T1, N_SAMPLES)
    verifier = runtime.compiled["verifier"]  # the bundle's own verifier: its package, quantized layers and all
    assert verifier.runner(len(prompt) + 2) is not None  # the exact probabilities come from the package too
    p_value = chi2_pvalue(counts, exact_two(verifier, runtime.verifier.layout, prompt + [root], T1))
    assert p_value > 1e-3, f"emitted tokens do not follow the quantized verifier (p={p_value:.2g})"
    accepted = dec.stats.accepted_lengths
    assert 0 in accepted and SHAPE.depth in accepted  # drafts were rejected at the root, and accepted whole
