"""Block-quantized verifiers (passes/quant_linear.py, graphs/block_linears.py): the swapped layers compute the kernel's
documented arithmetic, and a compiled bundle streaming a GGUF's Q8_0 blocks as they are decodes speculatively exactly
as its own autoregressive step does (standalone drafter, other tree shapes, suffix branches)."""
import json
import zipfile

import gguf
import pytest
import torch
from checkpoints import write_checkpoint
from gguf_files import write_gguf
from safetensors.torch import load_file
from yggc.graphs import block_quant, load_model
from yggc.graphs.block_linears import FILE, block_linears
from yggc.graphs.gguf_import import cached_import
from yggc.passes import quant_linear
from yggc.passes.pipeline import CompileJob, compile_bundle

from yggc.artifacts.cache_layout import causal_rows
from yggc.bench.floor import streamed_verifier_bytes, weight_bytes
from yggc.bundle import load_manifest
from yggc.cli.main import main
from yggc.plan.shape import TreeShape
from yggc.runtime import Runtime

pytestmark = pytest.mark.slow  # compiles a bundle: scheduled first (tests/conftest.py)

SHAPE = TreeShape(3, 2, 5)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("qpair")
    v = write_checkpoint(root / "v", "llama_gqa", seed=11)
    return v, write_checkpoint(root / "d", "llama_gqa", seed=12, base=v, noise=0.03)


class ReferenceLinear(torch.nn.Module):
    def __init__(self, linear, bias):
        super().__init__()
        self.linear, self.bias = linear, bias

    def forward(self, x):
        y = block_quant.block_matmul(x, self.linear.blocks, self.linear.fmt)
        return (y if self.bias is None else y + self.bias.float()).to(x.dtype)


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0", "q4_1"])
def test_swapped_layers_compute_the_documented_arithmetic(pair, fmt):
    graph = load_model(pair[0], 64, torch.bfloat16)
    quant_linear.load_blocks(graph, pair[0], fmt)
    linears = graph.block_linears
    assert set(linears) == {f"layers.{i}.{n}" for i in range(2) for n in ("attn.wqkv", "attn.wo", "mlp.w13", "mlp.w2")
                            } | {"lm_head"}
    w = load_file(str(pair[0] / "model.safetensors"))["model.layers.1.mlp.down_proj.weight"]
    ggml = gguf.GGMLQuantizationType[block_quant.FORMATS[fmt].ggml_type]
    assert torch.equal(linears["layers.1.mlp.w2"].blocks, torch.from_numpy(gguf.quants.quantize(w.numpy(), ggml)))
    ids = torch.tensor([5, 17, 3, 250, 42, 9])
    pos = torch.arange(6)
    with quant_linear.quantized_layers(graph):
        assert isinstance(graph.layers[0].attn.wqkv, quant_linear.QuantLinear)
        got = graph(ids, pos, pos, causal_rows(pos, 64))
    for name, linear in linears.items():  # the same graph, every layer the reference's arithmetic
        parent, _, leaf = name.rpartition(".")
        module = graph.get_submodule(parent)
        setattr(module, leaf, ReferenceLinear(linear, getattr(module, leaf).bias))
    for cache in graph.caches():
        cache.k.zero_(), cache.v.zero_()
    assert torch.equal(got, graph(ids, pos, pos, causal_rows(pos, 64)))


def test_a_gguf_keeps_its_blocks_and_other_layers_stay_float(pair, tmp_path):
    path = write_gguf(pair[0], tmp_path / "v.gguf", quant=gguf.GGMLQuantizationType.Q4_1)
    folder = cached_import(path, tmp_path / "cache", keep_blocks=True)
    graph = load_model(folder, 64)
    linears = block_linears(folder, graph.cfg, FILE)
    stored = load_file(str(folder / "model.safetensors"))
    assert {b.fmt for b in linears.values()} == {"q4_1"} and len(linears) == 9
    assert torch.equal(linears["layers.0.attn.wo"].blocks, stored["model.layers.0.self_attn.o_proj.weight"])
    q8 = block_linears(folder, graph.cfg, "q8_0")  # another format: quantized from the dequantized values
    want = gguf.quants.quantize(block_quant.dequantize(stored["model.layers.0.self_attn.o_proj.weight"], "q4_1").numpy(),
                                gguf.GGMLQuantizationType.Q8_0)
    assert torch.equal(q8["layers.0.attn.wo"].blocks, torch.from_numpy(want))
    assert quant_linear.weights_label(graph, "float32") == "float32"
    graph.block_linears = {k: v for k, v in linears.items() if k != "lm_head"}
    assert quant_linear.weights_label(graph, "float32") == "q4_1 + float32 (1 layer)"


# llama_gqa by hand: 2 layers of wqkv [64 + 32 + 32, 64], wo [64, 64], w13 [2 * 96, 64], w2 [64, 96], an untied
# lm_head [301, 64]: blocks of 32 along each row; the embedding [301, 64] and 5 norms [64] stay float
BLOCKS_PER_STEP = 2 * (128 * 2 + 64 * 2 + 192 * 2 + 64 * 3) + 301 * 2
FLOAT_REST = 301 * 64 + 5 * 64
BLOCK_BYTES = {"q8_0": 34, "q4_0": 18, "q4_1": 20}


def test_the_bench_floor_counts_the_bytes_each_format_streams(pair):
    graph = load_model(pair[0], 64, torch.bfloat16)
    assert weight_bytes(graph) == 2 * (BLOCKS_PER_STEP * 32 + FLOAT_REST)  # bf16 throughout
    frozen = load_model(pair[0], 64, torch.bfloat16, weights=False)  # an O2 bundle's graph: no weights loaded
    for fmt, size in BLOCK_BYTES.items():
        quant_linear.load_blocks(graph, pair[0], fmt)
        want = size * BLOCKS_PER_STEP + 2 * FLOAT_REST
        assert weight_bytes(graph) == want
        assert weight_bytes(frozen, quant_linear.block_formats(graph)) == want


@pytest.mark.parametrize("flags, message", [
    (["--weights", "q8_0", "--opt", "O1"], "--weights q8_0 streams blocks through yggc's CPU kernel, which O2 "
                                           "packages call; compile with --device cpu --opt O2 in one process, or use "
                                           "--weights float32"),
    (["--weights", "bfloat16"], "--weights bfloat16 needs --dtype bfloat16"),
])
def test_weight_flags_that_cannot_work_are_one_line(pair, flags, message, tmp_path, capsys):
    args = ["compile", "-m", str(pair[0]), "-md", str(pair[1]), "--depth", "2", "--width", "2", "-o",
            str(tmp_path / "b")]
    assert main(args + flags) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not (tmp_path / "b").exists()


@pytest.fixture(scope="module")
def bundle(pair, tmp_path_factory):
    """An O2 bundle whose verifier is a Q8_0 GGUF compiled as it is (the file's own format, the default)."""
    root = tmp_path_factory.mktemp("qbundle")
    path = write_gguf(pair[0], root / "v.gguf", quant=gguf.GGMLQuantizationType.Q8_0)
    folder = cached_import(path, root / "cache", keep_blocks=True)
    drafter = cached_import(write_gguf(pair[1], root / "d.gguf"), root / "cache", keep_blocks=True)  # its tokens
    compile_bundle(CompileJob(folder, drafter, root / "bundle", SHAPE, torch.bfloat16, max_seq=128,
                              profile_repeats=2, opt="O2", weights=FILE), log=lambda m: None)
    return root / "bundle"


def test_quantized_bundle_decodes_as_its_own_autoregressive_step(bundle):
    assert load_manifest(bundle).weights == "q8_0"
    rt = Runtime.load(bundle)
    for seed in range(3):
        prompt = torch.randint(1, 301, (5 + 9 * seed,), generator=torch.Generator().manual_seed(seed)).tolist()
        ref = rt.generate(prompt, 48, decoder=rt.decoder(speculative=False)).tokens
        assert rt.generate(prompt, 48, decoder=rt.decoder(speculative=True)).tokens == ref
        for shape in (TreeShape(4, 1, 4), TreeShape(2, 2, 4), TreeShape(1, 4, 4)):
            assert rt.generate(prompt, 48, decoder=rt.decoder(shape=shape)).tokens == ref
    assert rt.last_stats.n_accept > 0
    phrase = torch.randint(1, 301, (7,), generator=torch.Generator().manual_seed(3)).tolist()
    prompt = phrase + [1] + phrase + [2] + phrase
    ref = rt.generate(prompt, 48, decoder=rt.decoder(speculative=False)).tokens
    dec = rt.decoder(speculative=True, suffix_branches=True, adaptive=False)
    assert rt.generate(prompt, 48, decoder=dec).tokens == ref


def calls_the_op(package) -> bool:
    with zipfile.ZipFile(package) as z:
        return any(b"quant_linear_v1" in z.read(name) for name in z.namelist())


def test_the_verifier_package_calls_the_op_and_inspect_shows_the_format(bundle, capsys):
    assert calls_the_op(bundle / "artifacts" / "verifier.pt2")
    assert not calls_the_op(bundle / "artifacts" / "drafter.pt2")  # the drafter stays float
    assert main(["inspect", str(bundle)]) == 0
    assert "dtype bfloat16, weights q8_0, opt O2" in capsys.readouterr().out
    assert json.loads((bundle / "manifest.json").read_text())["extra"]["weights"] == "q8_0"


def test_the_bench_floor_of_a_quantized_bundle_counts_its_blocks(bundle):
    rt = Runtime.load(bundle)
    assert set(rt.manifest.block_formats.values()) == {"q8_0"} and len(rt.manifest.block_formats) == 9
    assert streamed_verifier_bytes(rt) == BLOCK_BYTES["q8_0"] * BLOCKS_PER_STEP + 2 * FLOAT_REST


@pytest.mark.parametrize("model, weights, streams, want", [
    ("m.gguf", None, True, FILE),  # a GGUF compiles in its own formats where the target streams blocks
    ("m.gguf", None, False, ""),  # elsewhere (O1, CUDA, several ranks) it stays float, as before
    ("folder", None, True, ""),  # a Hugging Face folder stays --dtype unless told
    ("folder", "q4_0", True, "q4_0"),
    ("m.gguf", "float32", True, ""),
])
def test_the_weight_format_a_compile_takes(model, weights, streams, want):
    from argparse import Namespace

    from yggc.cli.compile import weight_format

    assert weight_format(Namespace(model=model, weights=weights, dtype="float32"), streams) == want
