"""Where a chat template is read from: tokenizer_config.json's `chat_template`, or chat_template.jinja (where
transformers 5's save_pretrained puts it); the bundle carries the file, so `--chat` answers on such a folder."""
import json

import pytest
from eager_bundle import CHAT, write_eager_bundle

from yggc.runtime.chat import load_chat_template

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Is 7 prime?"}]


def test_a_template_only_in_chat_template_jinja_is_read(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>", "bos_token": "<s>"}))
    (tmp_path / "chat_template.jinja").write_text(CHAT)
    template = load_chat_template(tmp_path)
    assert (template.source, template.eos_token, template.bos_token) == (CHAT, "<|im_end|>", "<s>")
    assert template.render(MESSAGES) == "[system] Be brief.\n[user] Is 7 prime?\n[assistant] "
    (tmp_path / "tokenizer_config.json").unlink()  # the file alone still gives the template (no end-of-turn token)
    assert load_chat_template(tmp_path).source == CHAT and load_chat_template(tmp_path).eos_token == ""


def test_tokenizer_config_keeps_precedence_and_no_template_is_none(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ 'config' }}"}))
    (tmp_path / "chat_template.jinja").write_text("{{ 'file' }}")
    assert load_chat_template(tmp_path).render(MESSAGES) == "config"
    (tmp_path / "chat_template.jinja").unlink()
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    assert load_chat_template(tmp_path) is None


def test_the_bundle_carries_chat_template_jinja_and_run_chat_answers(tmp_path, capsys):
    """A bundle whose verifier keeps its template only in chat_template.jinja: the file is in the bundle and
    `yggc run --chat` answers what it answers when the same template sits in tokenizer_config.json."""
    from yggc.cli import main

    answers = []
    for template_file in (True, False):
        bundle = write_eager_bundle(tmp_path / str(template_file), template_file=template_file)
        assert (bundle / "verifier" / "chat_template.jinja").is_file() == template_file
        capsys.readouterr()
        assert main(["run", str(bundle), "--chat", "Is 7 prime?", "-n", "6", "--json"]) == 0
        answers.append(json.loads(capsys.readouterr().out)["tokens"])
    assert answers[0] == answers[1] and len(answers[0]) > 0


def test_a_folder_saved_by_transformers_save_pretrained(tmp_path):
    """transformers' own save_pretrained (chat_template.jinja in transformers 5): yggc renders what
    apply_chat_template renders, and finds the end-of-turn token."""
    transformers = pytest.importorskip("transformers")
    from yggc.runtime.loading import demo_pair_dirs

    tok = transformers.PreTrainedTokenizerFast(tokenizer_file=str(demo_pair_dirs()[0] / "tokenizer.json"),
                                               eos_token="<|endoftext|>")
    tok.chat_template = CHAT
    tok.save_pretrained(tmp_path)
    template = load_chat_template(tmp_path)
    assert template is not None and template.eos_token == "<|endoftext|>"
    assert template.render(MESSAGES) == tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    saved_in_config = "chat_template" in json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert saved_in_config or (tmp_path / "chat_template.jinja").is_file()
