"""Tests for tools/train_pair.py and tools/eval_pair.py (tokenizer, held-out split, tiny training run)."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))

import eval_pair  # noqa: E402
import train_pair as tp  # noqa: E402

SNIPPETS = [
    "def f(x):\n    return x + 1\n",
    "class A:\n\tdef m(self):  \n\t\tpass\r\n\r\n",
    "s = 'π ≈ 3.14159'  # ünïcödé, 日本語, emoji 🐍\n",
    "   leading and trailing   \n\n\n   ",
    "x=[1,2,3];y={'a':b'\\x00\\xff'}\n# comment with <tags> & ampersands\n",
    "",
]


def write_corpus(root: Path) -> Path:
    """A few small Python files; names chosen so that some are train files."""
    body = "def add_{i}(a, b):\n    '''Add {i}.'''\n    return a + b * {i}\n\n\nclass Thing{i}:\n    value = {i}\n"
    for i, rel in enumerate(["alpha.py", "beta.py", "pkg/__init__.py", "pkg/gamma.py", "pkg/sub/delta.py"]):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(body.format(i=i * 10 + j) for j in range(8)), encoding="utf-8")
    (root / "pkg" / "notes.txt").write_text("not python")
    (root / "test").mkdir()
    (root / "test" / "test_skip.py").write_text("excluded = True\n")
    return root


@pytest.fixture(scope="module")
def small_tokenizer():
    train, _ = tp.split_files()
    texts = [tp.read_text(p) for p in train[:40]]
    return tp.train_tokenizer(texts, vocab_size=512)


@pytest.mark.parametrize("text", SNIPPETS)
def test_tokenizer_round_trip(small_tokenizer, text):
    ids = small_tokenizer.encode(text, add_special_tokens=False).ids
    assert small_tokenizer.decode(ids, skip_special_tokens=False) == text


def test_tokenizer_special_token(small_tokenizer):
    eot = tp.eot_id(small_tokenizer)
    assert eot == 0 and small_tokenizer.get_vocab_size() == 512
    ids = small_tokenizer.encode("a = 1" + tp.EOT + "b = 2", add_special_tokens=False).ids
    assert ids.count(eot) == 1
    stream = tp.encode_documents(small_tokenizer, ["x = 1\n", "y = 2\n"])
    assert stream[0] == eot and stream[-1] == eot and list(stream).count(eot) == 3
    # plain encode() prepends the bos the models were trained with; decode drops it again
    with_bos = small_tokenizer.encode("x = 1").ids
    assert with_bos[0] == eot and with_bos[1:] == small_tokenizer.encode("x = 1", add_special_tokens=False).ids
    assert small_tokenizer.decode(with_bos) == "x = 1"


def test_heldout_split_is_stable_and_disjoint():
    train, held = tp.split_files()
    train2, held2 = tp.split_files()
    assert (train, held) == (train2, held2)
    assert held == tp.heldout_files()
    assert not set(train) & set(held)
    assert sorted(train + held) == sorted(tp.corpus_files())
    root = tp.stdlib_root()
    assert all(tp.is_heldout(p.relative_to(root).as_posix()) for p in held)
    assert 0.02 < len(held) / (len(train) + len(held)) < 0.09
    assert not any(part in tp.EXCLUDED_DIRS for p in train + held for part in p.relative_to(root).parts[:-1])


def test_heldout_rule_fraction_and_relative_paths(tmp_path):
    names = [f"pkg{i // 50}/module_{i}.py" for i in range(20000)]
    frac = sum(map(tp.is_heldout, names)) / len(names)
    assert abs(frac - 1 / tp.HELDOUT_MODULUS) < 0.006
    expected = int.from_bytes(hashlib.sha256(b"json/decoder.py").digest()[:8], "big") % 20 == 0
    assert tp.is_heldout("json/decoder.py") == expected
    # the split depends only on paths relative to the corpus root
    a, b = write_corpus(tmp_path / "a"), write_corpus(tmp_path / "elsewhere" / "b")
    rel = lambda files, root: [f.relative_to(root).as_posix() for f in files]  # noqa: E731
    (ta, ha), (tb, hb) = tp.split_files(a), tp.split_files(b)
    assert rel(ta, a) == rel(tb, b) and rel(ha, a) == rel(hb, b)
    assert "test/test_skip.py" not in rel(ta + ha, a) and len(ta + ha) == 5 and ta


def test_heldout_prompts_are_stable_and_heldout():
    recs = eval_pair.heldout_prompt_records(16)
    assert recs == eval_pair.heldout_prompt_records(16)
    assert eval_pair.heldout_prompts(16) == [r.text for r in recs]
    held = {p.relative_to(tp.stdlib_root()).as_posix() for p in tp.heldout_files()}
    for r in recs:
        assert r.path in held and 100 <= len(r.text) <= 200
        assert r.text.lstrip().startswith(("def ", "async def ")) and not r.text.endswith("\n")


def test_chain_accept_lengths():
    m = [True, True, False, True, True, True, True, True, False, False]
    assert eval_pair.chain_accept_lengths(m, 4) == [3, 5]  # pos 0: 2+bonus; pos 3: 4+bonus; pos 8: stop
    assert eval_pair.chain_accept_lengths([True] * 9, 8) == [9]
    assert eval_pair.chain_accept_lengths([False] * 5, 2) == [1, 1, 1]


def tiny_args(corpus: Path, out: Path, steps: int, *extra: str) -> list[str]:
    return [
        "--preset",
        "tiny",
        "--corpus-dir",
        str(corpus),
        "--out",
        str(out),
        "--steps",
        str(steps),
        "--threads",
        "1",
        "--ckpt-every",
        "2",
        *extra,
    ]


def test_tiny_training_checkpoints_and_resume(tmp_path):
    from safetensors import safe_open
    from transformers import LlamaForCausalLM

    corpus = write_corpus(tmp_path / "corpus")
    out = tmp_path / "pair"
    first = tp.main(tiny_args(corpus, out, 6, "--stop-after", "3"))  # an interrupted 6-step run
    assert {r: m["step"] for r, m in first["models"].items()} == {"verifier": 3, "drafter": 3}
    tok_bytes = (out / "tokenizer.json").read_bytes()
    for role in tp.ROLES:
        d = out / role
        assert (d / "tokenizer.json").read_bytes() == tok_bytes
        model = LlamaForCausalLM.from_pretrained(d)
        eot = tp.load_tokenizer(d / "tokenizer.json").token_to_id(tp.EOT)
        assert model.config.bos_token_id == model.config.eos_token_id == eot
        with safe_open(str(d / "model.safetensors"), "pt") as f:
            assert all(f.get_slice(k).get_dtype() == "BF16" for k in f.keys())
        state = json.loads((out / ".state" / role / "state.json").read_text())
        assert state["step"] == 3 and state["total_steps"] == 6
    assert not [p for p in out.rglob("*") if p.suffix in (".pt", ".pth", ".bin", ".pkl", ".ckpt")]

    second = tp.main(tiny_args(corpus, out, 6))  # resumes from the checkpoint
    for role in tp.ROLES:
        assert second["models"][role]["start_step"] == 3 and second["models"][role]["step"] == 6

    # resuming is exact: 3 + 3 steps give the same verifier as 6 uninterrupted steps
    fresh = tmp_path / "fresh"
    tp.main(tiny_args(corpus, fresh, 6, "--only", "verifier"))
    a = (out / ".state" / "verifier" / "model.safetensors").read_bytes()
    b = (fresh / ".state" / "verifier" / "model.safetensors").read_bytes()
    assert a == b


SHIPPED = REPO / "yggc" / "demo_pair"


def test_shipped_demo_pair():
    files = [
        SHIPPED / role / name for role in tp.ROLES for name in ("config.json", "model.safetensors", "tokenizer.json")
    ]
    assert all(f.is_file() for f in files)
    assert sum(f.stat().st_size for f in files) <= 12 * 2**20
    assert (SHIPPED / "verifier" / "tokenizer.json").read_bytes() == (
        SHIPPED / "drafter" / "tokenizer.json"
    ).read_bytes()
    tok = tp.load_tokenizer(SHIPPED / "verifier" / "tokenizer.json")
    for text in SNIPPETS:
        assert tok.decode(tok.encode(text, add_special_tokens=False).ids, skip_special_tokens=False) == text
    assert tok.encode("def f():").ids[0] == tok.token_to_id(tp.EOT)
    for role in tp.ROLES:
        cfg = json.loads((SHIPPED / role / "config.json").read_text())
        assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["vocab_size"] == tok.get_vocab_size() == 4096
        assert cfg["bos_token_id"] == cfg["eos_token_id"] == tok.token_to_id(tp.EOT)
        assert cfg["dtype"] == "bfloat16" and cfg["tie_word_embeddings"]
        model = tp.load_hf_model(SHIPPED / role)
        logits = model(input_ids=torch.tensor([tok.encode("def f(x):\n    return").ids])).logits
        assert logits.shape[-1] == 4096 and torch.isfinite(logits).all()


def test_cli_help(capsys):
    for mod in (tp, eval_pair):
        with pytest.raises(SystemExit):
            mod.parse_args(["--help"])
        assert "--" in capsys.readouterr().out
