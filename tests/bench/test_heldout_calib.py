"""tools/heldout_calib.py: the verifier's greedy answers to the held-out prompts past --skip, each a whole
conversation ending at the end of turn."""
import json

import heldout_calib

from yggc.runtime import Runtime


def test_writes_one_conversation_per_prompt_past_skip(eager_bundle, tmp_path):
    prompts = [f"[user] question {i}\n[assistant] " for i in range(4)]
    (tmp_path / "prompts.json").write_text(json.dumps({"prompts": [{"text": t} for t in prompts]}))
    out = tmp_path / "calib.txt"
    assert heldout_calib.main([str(eager_bundle), "--prompts-file", str(tmp_path / "prompts.json"), "--skip", "1",
                               "-n", "8", "-o", str(out), "--threads", "1"]) == 0
    conversations = open(out, encoding="utf-8", newline="").read().split("<|endoftext|>\n")
    assert conversations[-1] == "" and len(conversations) == 4 and not (tmp_path / "calib.txt.part").exists()
    rt = Runtime.load(eager_bundle)
    for text, conversation in zip(prompts[1:], conversations):
        answer = rt.generate(text, 8, decoder=rt.decoder(speculative=False)).text.removesuffix("<|endoftext|>")
        assert conversation == text + answer


def test_no_prompt_past_skip_is_an_error(eager_bundle, tmp_path):
    import pytest

    (tmp_path / "p.json").write_text(json.dumps({"prompts": [{"text": "a"}]}))
    with pytest.raises(SystemExit, match="no prompts after the first 16"):
        heldout_calib.main([str(eager_bundle), "--prompts-file", str(tmp_path / "p.json"), "-o", str(tmp_path / "o")])
