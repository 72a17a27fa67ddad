"""GGUF import: tiny files written with gguf's own writer round-trip into checkpoint folders that decode
exactly like the originals; every bad input is one clear error."""
import json

import gguf
import numpy as np
import pytest
import torch
from checkpoints import TEXT, write_checkpoint
from gguf_files import write_gguf
from safetensors.torch import load_file
from yggc.graphs import CheckpointError, load_model, load_tokenizer
from yggc.graphs.gguf_import import cached_import, import_gguf

from yggc.artifacts.cache_layout import causal_rows
from yggc.cli.main import main
from yggc.runtime import loading

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|endoftext|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


@pytest.fixture(scope="module")
def hf_pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("gguf_pair")
    verifier = write_checkpoint(root / "verifier", "llama_gqa", seed=3)
    drafter = write_checkpoint(root / "drafter", "llama_gqa", seed=4, base=verifier, noise=0.3)
    return verifier, drafter


@pytest.fixture(scope="module")
def gguf_pair(hf_pair, tmp_path_factory):
    root = tmp_path_factory.mktemp("gguf_files")
    return (write_gguf(hf_pair[0], root / "verifier.gguf", chat_template=CHATML),
            write_gguf(hf_pair[1], root / "drafter.gguf"))


def logits_of(model_dir, ids):
    g = load_model(model_dir, 64, torch.float32)
    pos = torch.arange(len(ids))
    return g(torch.tensor(ids), pos, pos, causal_rows(pos, 64))


def test_f32_round_trip_is_exact(hf_pair, gguf_pair, tmp_path):
    out = import_gguf(gguf_pair[0], tmp_path / "imported")
    want, got = load_file(str(hf_pair[0] / "model.safetensors")), load_file(str(out / "model.safetensors"))
    assert set(got) == set(want)
    for name in want:
        assert torch.equal(got[name], want[name]), name  # the Q/K permutation is undone exactly
    ids = [5, 17, 3, 250, 42, 9]
    assert torch.equal(logits_of(out, ids), logits_of(hf_pair[0], ids))
    a, b = load_tokenizer(out), load_tokenizer(hf_pair[0])
    for text in TEXT + ["  two  spaces, digits 12345 and <|endoftext|>"]:
        assert a.encode(text).ids == b.encode(text).ids
    cfg = json.loads((out / "config.json").read_text())
    assert (cfg["num_key_value_heads"], cfg["tie_word_embeddings"], cfg["eos_token_id"]) == (2, False, 0)
    assert json.loads((out / "tokenizer_config.json").read_text())["chat_template"] == CHATML


def test_q8_0_weights_dequantize_like_llama_cpp(hf_pair, tmp_path):
    path = write_gguf(hf_pair[0], tmp_path / "q8.gguf", quant=gguf.GGMLQuantizationType.Q8_0)
    got = load_file(str(import_gguf(path, tmp_path / "q8", dtype="bfloat16") / "model.safetensors"))
    ref = load_file(str(hf_pair[0] / "model.safetensors"))
    for name, w in ref.items():
        if w.ndim == 2:
            q = gguf.quants.quantize(w.numpy(), gguf.GGMLQuantizationType.Q8_0)
            want = torch.from_numpy(gguf.quants.dequantize(q, gguf.GGMLQuantizationType.Q8_0).copy())
            assert got[name].dtype == torch.bfloat16
            assert torch.equal(got[name], want.to(torch.bfloat16)), name
            assert (got[name].float() - w).abs().max() < 0.02 * w.abs().max()


def test_tree_decoding_from_gguf_equals_autoregressive(gguf_pair, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(loading, "GGUF_CACHE", tmp_path / "cache")
    common = ["run", "-m", str(gguf_pair[0]), "--prompt-ids", "5,17,3,250", "-n", "40", "--json"]
    outs = []
    for extra in ([], ["-md", str(gguf_pair[1]), "--depth", "3", "--width", "2"],
                  ["-md", str(gguf_pair[1]), "--depth", "4", "--width", "1"]):
        assert main(common + extra) == 0
        outs.append(json.loads(capsys.readouterr().out))
    assert len(outs[0]["tokens"]) > 0
    assert outs[1]["tokens"] == outs[0]["tokens"] and outs[2]["tokens"] == outs[0]["tokens"]
    assert outs[1]["mean_accepted_length"] > 1.0  # the drafter is close to the verifier: trees do accept
    assert len(list((tmp_path / "cache").iterdir())) == 2  # each file imported once, then reused


def test_chat_uses_the_template_and_stops_at_end_of_turn(gguf_pair, tmp_path, monkeypatch, capsys):
    transformers = pytest.importorskip("transformers")
    monkeypatch.setattr(loading, "GGUF_CACHE", tmp_path / "cache")
    folder = cached_import(gguf_pair[0], tmp_path / "cache")
    hf_tok = transformers.PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"), chat_template=CHATML)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "def add(a, b):"}]
    rendered = hf_tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    loaded = loading.load(folder, torch.float32, 256)
    assert loaded.chat.render(messages) == rendered
    assert loading.encode_chat(loaded, messages) == loaded.tokenizer.encode(rendered).ids
    assert 0 in loaded.eos_ids  # the template's end-of-turn token
    assert main(["run", "-m", str(gguf_pair[0]), "--system", "Be brief.", "--chat", "def add(a, b):",
                 "-n", "20", "--json"]) == 0
    chat = json.loads(capsys.readouterr().out)
    assert main(["run", "-m", str(gguf_pair[0]), "-p", rendered, "-n", "20", "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert chat["prompt_ids"] == plain["prompt_ids"] and chat["tokens"] == plain["tokens"]


@pytest.mark.parametrize("case, message", [
    ("missing", "does not exist"),
    ("not_gguf", "is not a readable GGUF file"),
    ("other_arch", "architecture 'gpt2' is not supported"),
])
def test_bad_gguf_is_one_clear_line(case, message, tmp_path, capsys):
    path = tmp_path / "model.gguf"
    if case == "not_gguf":
        path.write_bytes(b"PK\x03\x04 this is a zip file")
    if case == "other_arch":
        w = gguf.GGUFWriter(str(path), "gpt2")
        w.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
        w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    assert main(["import", str(path), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("yggc: error:") and message in err[0]
    assert not (tmp_path / "out").exists()


def test_unsupported_tensor_type_names_it(hf_pair, tmp_path, monkeypatch):
    path = write_gguf(hf_pair[0], tmp_path / "q8.gguf", quant=gguf.GGMLQuantizationType.Q8_0)
    import yggc.graphs.gguf_import as gi

    monkeypatch.setattr(gi, "SUPPORTED_TYPES", (gguf.GGMLQuantizationType.F32,))
    with pytest.raises(CheckpointError, match="has type Q8_0, which yggc does not import; supported: F32"):
        import_gguf(path, tmp_path / "out")
    assert not (tmp_path / "out").exists() and list(tmp_path.glob(".out*")) == []


def test_import_refuses_to_overwrite(gguf_pair, tmp_path, capsys):
    (tmp_path / "out").mkdir()
    assert main(["import", str(gguf_pair[1]), "-o", str(tmp_path / "out")]) == 2
    assert "exists; pass --overwrite" in capsys.readouterr().err
    assert main(["import", str(gguf_pair[1]), "-o", str(tmp_path / "out"), "--overwrite"]) == 0
    assert (tmp_path / "out" / "model.safetensors").is_file()


def test_cached_import_follows_the_file_not_its_name(gguf_pair, tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(gguf_pair[1].read_bytes())
    first = cached_import(path, tmp_path / "cache")
    assert cached_import(path, tmp_path / "cache") == first  # reused, not re-imported
    path.write_bytes(gguf_pair[0].read_bytes())  # another model under the same name
    second = cached_import(path, tmp_path / "cache")
    assert second != first
    assert load_file(str(second / "model.safetensors")).keys() == load_file(str(first / "model.safetensors")).keys()
    assert json.loads((second / "tokenizer_config.json").read_text()).get("chat_template") == CHATML


def test_bf16_export_stores_the_weights_rounded_to_bf16(hf_pair, tmp_path):
    path = write_gguf(hf_pair[0], tmp_path / "bf16.gguf", quant=gguf.GGMLQuantizationType.BF16)
    reader = gguf.GGUFReader(path)
    types = {t.name: t.tensor_type for t in reader.tensors}
    assert types["blk.0.attn_q.weight"] == gguf.GGMLQuantizationType.BF16
    assert types["blk.0.attn_norm.weight"] == gguf.GGMLQuantizationType.F32  # norms stay F32, as llama.cpp keeps them
    assert reader.fields["general.file_type"].contents() == int(gguf.LlamaFileType.MOSTLY_BF16)
    got = load_file(str(import_gguf(path, tmp_path / "out") / "model.safetensors"))
    for name, w in load_file(str(hf_pair[0] / "model.safetensors")).items():
        want = w.to(torch.bfloat16).float() if w.ndim == 2 else w
        assert torch.equal(got[name], want), name


def test_export_refuses_a_non_llama_checkpoint(tmp_path):
    from yggc.graphs.gguf_export import export_gguf

    folder = write_checkpoint(tmp_path / "qwen", "qwen2_bias")
    with pytest.raises(CheckpointError, match="model type 'qwen2' does not export to GGUF"):
        export_gguf(folder, tmp_path / "q.gguf")
    assert list(tmp_path.glob("*.gguf")) == [] and list(tmp_path.glob(".q.gguf*")) == []
