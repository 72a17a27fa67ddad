"""yggc train pair and yggc train evaluate: tokenizer, held-out split, a tiny training run, the shipped pair."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from yggc.cli.main import main
from yggc.train import corpus, evaluate
from yggc.train.loop import ROLES
from yggc.train.presets import load_hf_model

REPO = Path(__file__).resolve().parents[2]

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
    train, _ = corpus.split_files()
    texts = [corpus.read_text(p) for p in train[:40]]
    return corpus.train_tokenizer(texts, vocab_size=512)


@pytest.mark.parametrize("text", SNIPPETS)
def test_tokenizer_round_trip(small_tokenizer, text):
    ids = small_tokenizer.encode(text, add_special_tokens=False).ids
    assert small_tokenizer.decode(ids, skip_special_tokens=False) == text


def test_tokenizer_special_token(small_tokenizer):
    eot = corpus.eot_id(small_tokenizer)
    assert eot == 0 and small_tokenizer.get_vocab_size() == 512
    ids = small_tokenizer.encode("a = 1" + corpus.EOT + "b = 2", add_special_tokens=False).ids
    assert ids.count(eot) == 1
    stream = corpus.encode_documents(small_tokenizer, ["x = 1\n", "y = 2\n"])
    assert stream[0] == eot and stream[-1] == eot and list(stream).count(eot) == 3
    # plain encode() prepends the bos the models were trained with; decode drops it again
    with_bos = small_tokenizer.encode("x = 1").ids
    assert with_bos[0] == eot and with_bos[1:] == small_tokenizer.encode("x = 1", add_special_tokens=False).ids
    assert small_tokenizer.decode(with_bos) == "x = 1"


def test_heldout_split_is_stable_and_disjoint():
    train, held = corpus.split_files()
    train2, held2 = corpus.split_files()
    assert (train, held) == (train2, held2)
    assert held == corpus.heldout_files()
    assert not set(train) & set(held)
    assert sorted(train + held) == sorted(corpus.corpus_files())
    root = corpus.stdlib_root()
    assert all(corpus.is_heldout(p.relative_to(root).as_posix()) for p in held)
    assert 0.02 < len(held) / (len(train) + len(held)) < 0.09
    assert not any(part in corpus.EXCLUDED_DIRS for p in train + held for part in p.relative_to(root).parts[:-1])


def test_heldout_rule_fraction_and_relative_paths(tmp_path):
    names = [f"pkg{i // 50}/module_{i}.py" for i in range(20000)]
    frac = sum(map(corpus.is_heldout, names)) / len(names)
    assert abs(frac - 1 / corpus.HELDOUT_MODULUS) < 0.006
    expected = int.from_bytes(hashlib.sha256(b"json/decoder.py").digest()[:8], "big") % 20 == 0
    assert corpus.is_heldout("json/decoder.py") == expected
    # the split depends only on paths relative to the corpus root
    a, b = write_corpus(tmp_path / "a"), write_corpus(tmp_path / "elsewhere" / "b")
    rel = lambda files, root: [f.relative_to(root).as_posix() for f in files]  # noqa: E731
    (ta, ha), (tb, hb) = corpus.split_files(a), corpus.split_files(b)
    assert rel(ta, a) == rel(tb, b) and rel(ha, a) == rel(hb, b)
    assert "test/test_skip.py" not in rel(ta + ha, a) and len(ta + ha) == 5 and ta


def test_heldout_prompts_are_stable_and_heldout():
    recs = corpus.heldout_prompt_records(16)
    assert recs == corpus.heldout_prompt_records(16)
    assert corpus.heldout_prompts(16) == [r.text for r in recs]
    held = {p.relative_to(corpus.stdlib_root()).as_posix() for p in corpus.heldout_files()}
    for r in recs:
        assert r.path in held and 100 <= len(r.text) <= 200
        assert r.text.lstrip().startswith(("def ", "async def ")) and not r.text.endswith("\n")


def test_chain_accept_lengths():
    m = [True, True, False, True, True, True, True, True, False, False]
    assert evaluate.chain_accept_lengths(m, 4) == [3, 5]  # pos 0: 2+bonus; pos 3: 4+bonus; pos 8: stop
    assert evaluate.chain_accept_lengths([True] * 9, 8) == [9]
    assert evaluate.chain_accept_lengths([False] * 5, 2) == [1, 1, 1]


def train_pair(*argv: str) -> dict:
    """`yggc train pair ARGV` -> the summary it writes with --json."""
    out = Path(argv[argv.index("--out") + 1])
    summary = out.parent / f"{out.name}-summary.json"
    assert main(["train", "pair", *argv, "--json", str(summary)]) == 0
    return json.loads(summary.read_text())


def tiny_args(source: Path, out: Path, steps: int, *extra: str) -> list[str]:
    return [
        "--preset",
        "tiny",
        "--corpus-dir",
        str(source),
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

    source = write_corpus(tmp_path / "corpus")
    out = tmp_path / "pair"
    first = train_pair(*tiny_args(source, out, 6, "--stop-after", "3"))  # an interrupted 6-step run
    assert {r: m["step"] for r, m in first["models"].items()} == {"verifier": 3, "drafter": 3}
    tok_bytes = (out / "tokenizer.json").read_bytes()
    for role in ROLES:
        d = out / role
        assert (d / "tokenizer.json").read_bytes() == tok_bytes
        model = LlamaForCausalLM.from_pretrained(d)
        eot = corpus.load_tokenizer(d / "tokenizer.json").token_to_id(corpus.EOT)
        assert model.config.bos_token_id == model.config.eos_token_id == eot
        with safe_open(str(d / "model.safetensors"), "pt") as f:
            assert all(f.get_slice(k).get_dtype() == "BF16" for k in f.keys())
        state = json.loads((out / ".state" / role / "state.json").read_text())
        assert state["step"] == 3 and state["total_steps"] == 6
    assert not [p for p in out.rglob("*") if p.suffix in (".pt", ".pth", ".bin", ".pkl", ".ckpt")]

    second = train_pair(*tiny_args(source, out, 6))  # resumes from the checkpoint
    for role in ROLES:
        assert second["models"][role]["start_step"] == 3 and second["models"][role]["step"] == 6

    # resuming is exact: 3 + 3 steps give the same verifier as 6 uninterrupted steps
    fresh = tmp_path / "fresh"
    train_pair(*tiny_args(source, fresh, 6, "--only", "verifier"))
    a = (out / ".state" / "verifier" / "model.safetensors").read_bytes()
    b = (fresh / ".state" / "verifier" / "model.safetensors").read_bytes()
    assert a == b


SHIPPED = REPO / "yggc" / "demo_pair"


def test_shipped_demo_pair():
    files = [
        SHIPPED / role / name for role in ROLES for name in ("config.json", "model.safetensors", "tokenizer.json")
    ]
    assert all(f.is_file() for f in files)
    assert sum(f.stat().st_size for f in files) <= 12 * 2**20
    assert (SHIPPED / "verifier" / "tokenizer.json").read_bytes() == (
        SHIPPED / "drafter" / "tokenizer.json"
    ).read_bytes()
    tok = corpus.load_tokenizer(SHIPPED / "verifier" / "tokenizer.json")
    for text in SNIPPETS:
        assert tok.decode(tok.encode(text, add_special_tokens=False).ids, skip_special_tokens=False) == text
    assert tok.encode("def f():").ids[0] == tok.token_to_id(corpus.EOT)
    for role in ROLES:
        cfg = json.loads((SHIPPED / role / "config.json").read_text())
        assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["vocab_size"] == tok.get_vocab_size() == 4096
        assert cfg["bos_token_id"] == cfg["eos_token_id"] == tok.token_to_id(corpus.EOT)
        assert cfg["dtype"] == "bfloat16" and cfg["tie_word_embeddings"]
        model = load_hf_model(SHIPPED / role)
        logits = model(input_ids=torch.tensor([tok.encode("def f(x):\n    return").ids])).logits
        assert logits.shape[-1] == 4096 and torch.isfinite(logits).all()


def test_evaluate_scores_the_shipped_pair(capsys, tmp_path):
    argv = ["train", "evaluate", "--pair", str(SHIPPED), "--ctx", "32", "--max-eval-tokens", "64", "--prompts", "2",
            "--new-tokens", "12", "--json", str(tmp_path / "m.json")]
    assert main(argv) == 0
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert metrics["tokens"] == 64 and metrics["prompts"] == 2 and 1 <= metrics["mean_accept_k4"] <= 5
    assert 0 <= metrics["top1_agreement"] <= 1 and "held-out ppl" in capsys.readouterr().out


def test_evaluate_names_a_missing_pair(capsys, tmp_path):
    assert main(["train", "evaluate", "--pair", str(tmp_path)]) == 2
    missing = tmp_path / "verifier"
    line = f"yggc: error: --pair {missing} is not a folder; pass a checkpoint folder, e.g. $(yggc pull smollm2)"
    assert capsys.readouterr().err.splitlines() == [line]
