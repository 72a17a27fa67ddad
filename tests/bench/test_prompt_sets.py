"""Benchmark prompts come from a JSON file (the shipped held-out prompts by default); a bad file is one clear error."""
import json

import pytest

from yggc.bench.prompt_sets import load_prompt_texts
from yggc.bench.suite import PROMPTS_FILE
from yggc.errors import YggcError


def test_the_default_is_the_shipped_heldout_file():
    texts, source = load_prompt_texts(None)
    assert source == str(PROMPTS_FILE) and texts == [p["text"] for p in json.loads(PROMPTS_FILE.read_text())["prompts"]]


def test_a_missing_file_is_an_error_not_a_fallback(tmp_path):
    with pytest.raises(YggcError, match="does not exist"):
        load_prompt_texts(tmp_path / "nope.json")


@pytest.mark.parametrize("content", ["not json", '{"texts": []}', '{"prompts": [{"body": "x"}]}'])
def test_a_malformed_file_is_one_line(tmp_path, content):
    path = tmp_path / "p.json"
    path.write_text(content)
    with pytest.raises(YggcError, match=r'is not JSON of the form \{"prompts"'):
        load_prompt_texts(path)
