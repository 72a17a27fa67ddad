"""A tied embedding/LM-head table kept as the GGUF stores it (passes/quant_linear.py): the LM head streams its blocks
through yggc::quant_linear_v1, the embedding gathers its rows from the same packed blocks with the bits of the float
table the loader dequantizes, and a compiled bundle decodes speculatively exactly as its own autoregressive step (a
drafter model, or an EAGLE-3 head that keeps a float copy of the embedding for its own use)."""
import gguf
import numpy as np
import pytest
import torch
from checkpoints import write_checkpoint
from gguf_files import write_gguf
from test_quant_linear import calls_the_op
from yggc.graphs import block_quant, load_model
from yggc.graphs.block_linears import FILE
from yggc.graphs.eagle3_checkpoint import EMBEDDING_ONLY, head_base_config, new_eagle3, read_embedding, save_eagle3
from yggc.graphs.gguf_import import cached_import
from yggc.passes import quant_linear, tied_head
from yggc.passes.pipeline import CompileJob, compile_bundle

from yggc.bundle import load_manifest
from yggc.plan.shape import TreeShape
from yggc.runtime import Runtime

pytestmark = pytest.mark.slow  # compiles bundles: scheduled first (tests/conftest.py)


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0", "q4_1"])
def test_the_embedding_gathers_the_float_tables_rows_from_the_packed_blocks(fmt):
    w = np.random.default_rng(3).normal(0, 0.05, (53, 96)).astype(np.float32)  # 53: a group of 16 part-filled
    ggml = gguf.GGMLQuantizationType[block_quant.FORMATS[fmt].ggml_type]
    blocks = torch.from_numpy(gguf.quants.quantize(w, ggml).copy())
    embed = block_quant.BlockEmbedding(block_quant.pack_blocks(blocks, fmt), fmt, torch.bfloat16)
    ids = torch.tensor([52, 0, 17, 16, 17, 31])
    table = block_quant.dequantize(blocks, fmt).to(torch.bfloat16)  # what the loader gives the graph
    assert torch.equal(embed(ids).view(torch.int16), table[ids].view(torch.int16))


@pytest.fixture(scope="module")
def tied(tmp_path_factory):
    """A tied verifier as a Q8_0 GGUF, imported keeping its blocks (its token_embd too), and a drafter."""
    root = tmp_path_factory.mktemp("qtied")
    v = write_checkpoint(root / "v", "llama_tied", seed=21)
    d = write_checkpoint(root / "d", "llama_tied", seed=22, base=v, noise=0.03)
    folder = cached_import(write_gguf(v, root / "v.gguf", quant=gguf.GGMLQuantizationType.Q8_0), root / "cache",
                           keep_blocks=True)
    return root, folder, cached_import(write_gguf(d, root / "d.gguf"), root / "cache", keep_blocks=True)


def test_the_tied_table_streams_its_stored_blocks(tied):
    _, folder, _ = tied
    graph = load_model(folder, 64, torch.bfloat16)
    quant_linear.load_blocks(graph, folder, FILE)
    head = graph.block_linears["lm_head"]
    assert head.fmt == "q8_0" and head.blocks.shape == block_quant.block_shape("q8_0", 320, 64)
    assert not tied_head.applies(graph, "cpu", "O2")  # no bf16 copy of the table is packed
    ids = torch.tensor([5, 17, 3, 250, 42, 9, 319])
    table = graph.embed.weight  # the float table the loader dequantized
    with quant_linear.quantized_layers(graph):
        assert graph.embed.packed is graph.lm_head.packed  # one copy of the table
        assert torch.equal(graph.embed(ids).view(torch.int16), table[ids].view(torch.int16))
    assert graph.embed.weight is table and graph.lm_head.weight is table  # restored


def test_a_tied_quantized_bundle_decodes_as_its_own_autoregressive_step(tied):
    root, folder, drafter = tied
    compile_bundle(CompileJob(folder, drafter, root / "bundle", TreeShape(3, 2, 5), torch.bfloat16, max_seq=128,
                              profile_repeats=2, opt="O2", weights=FILE), log=lambda m: None)
    manifest = load_manifest(root / "bundle")
    assert manifest.weights == "q8_0" and manifest.block_formats["lm_head"] == "q8_0"
    assert calls_the_op(root / "bundle" / "artifacts" / "verifier.pt2")
    rt = Runtime.load(root / "bundle")
    constants = rt.compiled["verifier"].any_width.runner.get_constant_fqns()
    assert sum(name in ("embed_packed", "lm_head_packed") for name in constants) == 1  # the table once, as blocks
    assert not any(name.startswith(("embed_weight", "lm_head_weight")) for name in constants)
    for seed in range(3):
        prompt = torch.randint(1, 320, (5 + 9 * seed,), generator=torch.Generator().manual_seed(seed)).tolist()
        ref = rt.generate(prompt, 48, decoder=rt.decoder(speculative=False)).tokens
        for shape in (TreeShape(3, 2, 5), TreeShape(4, 1, 4), TreeShape(1, 4, 4)):
            assert rt.generate(prompt, 48, decoder=rt.decoder(shape=shape)).tokens == ref
    assert rt.last_stats.n_accept > 0


def test_an_eagle3_head_keeps_a_float_table_beside_a_quantized_tied_verifier(tmp_path):
    """The head gathers its rows from a float copy of the embedding that the bundle keeps for it; the verifier's
    package streams the table's blocks, and speculative output equals the bundle's own autoregressive output."""
    v = write_checkpoint(tmp_path / "v", "tiny_vocab_tied", seed=5)
    head = new_eagle3(v, torch.arange(8), 2, seed=5, init_std=0.3)
    pair = v, save_eagle3(head, head_base_config(v), tmp_path / "head")
    compile_bundle(CompileJob(*pair, tmp_path / "bundle", TreeShape(3, 2, 4), torch.bfloat16, max_seq=96,
                              profile_repeats=2, opt="O2", weights="q8_0"), log=lambda m: None)
    assert load_manifest(tmp_path / "bundle").block_formats["lm_head"] == "q8_0"
    assert (tmp_path / "bundle" / "verifier" / EMBEDDING_ONLY).is_file()
    assert torch.equal(read_embedding(tmp_path / "bundle" / "verifier"), read_embedding(v).to(torch.bfloat16))
    rt = Runtime.load(tmp_path / "bundle")
    for seed in range(2):
        prompt = torch.randint(1, 8, (6 + 5 * seed,), generator=torch.Generator().manual_seed(seed)).tolist()
        ref = rt.generate(prompt, 40, decoder=rt.decoder(speculative=False)).tokens
        assert rt.generate(prompt, 40, decoder=rt.decoder(speculative=True)).tokens == ref
    assert rt.last_stats.n_accept > 0
