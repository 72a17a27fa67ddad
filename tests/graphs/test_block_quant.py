"""Block-quantized weights (graphs/block_quant.py): GGUF Q8_0/Q4_0/Q4_1 matrices survive the import as their raw
blocks, bit for bit against the `gguf` package's own dequantizer; other quantized types are dequantized with one
warning line; an unknown recorded format is one clear error."""
import json

import gguf
import numpy as np
import pytest
import torch
from checkpoints import write_checkpoint
from gguf_files import write_gguf
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from yggc.graphs import CheckpointError, block_quant, load_model
from yggc.graphs.eagle3_checkpoint import read_embedding
from yggc.graphs.gguf_import import import_gguf, unpermute_rope_rows

from yggc.artifacts.cache_layout import causal_rows

Q = gguf.GGMLQuantizationType
FORMATS = {"q8_0": Q.Q8_0, "q4_0": Q.Q4_0, "q4_1": Q.Q4_1}


@pytest.fixture(scope="module")
def verifier(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("block_quant") / "verifier", "llama_gqa", seed=3)


def random_blocks(fmt: str, rows: int, blocks: int, seed: int) -> np.ndarray:
    """Random raw blocks [rows, blocks * bytes] uint8 whose fp16 scales (and q4_1 minimums) are finite."""
    rng = np.random.default_rng(seed)
    size = block_quant.FORMATS[fmt].block_bytes
    raw = rng.integers(0, 256, (rows, blocks, size), dtype=np.uint8)
    halves = 2 if fmt == "q4_1" else 1
    raw[..., :2 * halves] = rng.normal(0, 0.05, (rows, blocks, halves)).astype(np.float16).view(np.uint8)
    return raw.reshape(rows, -1)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_dequantize_equals_gguf_bit_for_bit(fmt):
    raw = random_blocks(fmt, 7, 5, seed=len(fmt))
    want = torch.from_numpy(gguf.quants.dequantize(raw, FORMATS[fmt]).copy())
    got = block_quant.dequantize(torch.from_numpy(raw), fmt)
    assert got.shape == (7, 5 * 32) and got.dtype == torch.float32
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))


def logits_of(model_dir, ids):
    g = load_model(model_dir, 64, torch.float32)
    pos = torch.arange(len(ids))
    return g(torch.tensor(ids), pos, pos, causal_rows(pos, 64))


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_import_keeps_the_blocks_bit_for_bit(verifier, fmt, tmp_path):
    path = write_gguf(verifier, tmp_path / f"{fmt}.gguf", quant=FORMATS[fmt])
    out = import_gguf(path, tmp_path / "blocks", keep_blocks=True)
    with safe_open(str(out / "model.safetensors"), framework="pt") as st:
        formats = block_quant.read_formats(st.metadata(), "test")
    stored = load_file(str(out / "model.safetensors"))
    reader = gguf.GGUFReader(path)
    heads = {"attn_q": 4, "attn_k": 2}
    matrices = [t for t in reader.tensors if len(t.shape) == 2]
    assert set(formats) == {n for n, t in stored.items() if t.dtype == torch.uint8} and len(formats) == len(matrices)
    for t in matrices:
        raw, want = np.array(t.data), gguf.quants.dequantize(t.data, t.tensor_type)
        leaf = t.name.split(".")[-2]
        if leaf in heads:  # the import moves whole rows of blocks back into Hugging Face's order
            raw, want = unpermute_rope_rows(raw, heads[leaf]), unpermute_rope_rows(want, heads[leaf])
        matches = [n for n in formats if torch.equal(stored[n], torch.from_numpy(np.ascontiguousarray(raw)))]
        assert len(matches) == 1, t.name  # exactly one stored tensor holds these bytes
        name = matches[0]
        assert formats[name] == fmt
        got = block_quant.dequantize(stored[name], fmt)
        assert torch.equal(got, torch.from_numpy(np.ascontiguousarray(want))), t.name
    dequantized = import_gguf(path, tmp_path / "float")  # what the import wrote before blocks were kept
    ids = [5, 17, 3, 250, 42, 9]
    assert torch.equal(logits_of(out, ids), logits_of(dequantized, ids))
    assert torch.equal(read_embedding(out), read_embedding(dequantized))  # what an EAGLE-3 head's pairing checks


def test_other_quantized_types_dequantize_with_one_warning(verifier, tmp_path):
    path = write_gguf(verifier, tmp_path / "q5.gguf", quant=Q.Q5_0)
    lines = []
    out = import_gguf(path, tmp_path / "out", keep_blocks=True, log=lines.append)
    assert lines == ["warning: q5.gguf holds Q5_0 matrices, which yggc's kernels do not read: they are dequantized "
                     "to float32 (it keeps Q8_0, Q4_0 and Q4_1 as stored)"]
    stored = load_file(str(out / "model.safetensors"))
    assert all(t.dtype == torch.float32 for t in stored.values())
    assert torch.equal(logits_of(out, [1, 2, 3]), logits_of(import_gguf(path, tmp_path / "plain"), [1, 2, 3]))


def test_an_unknown_recorded_format_is_one_clear_error(verifier, tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text((verifier / "config.json").read_text())
    tensors = load_file(str(verifier / "model.safetensors"))
    save_file(tensors, str(folder / "model.safetensors"),
              metadata={block_quant.FORMATS_KEY: json.dumps({"lm_head.weight": "q3_k"})})
    with pytest.raises(CheckpointError, match="tensor lm_head.weight is stored as 'q3_k', which this yggc does not "
                                              "read \\(it reads q8_0, q4_0, q4_1\\)"):
        load_model(folder, 16)
