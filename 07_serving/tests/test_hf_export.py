"""Tests of the Hugging Face export (`hf_export.py` of the server package, given code): the
folder vLLM serves in `07_serving/bench_vllm.py` must tokenize, template chats and compute
logits exactly as the course does, and the export must never lose data.

The model is `solutions.gpt.random_gpt` (tiny, context 64): the conversion is the same for
every size, and the default model's export is checked by `bench_vllm.py` itself."""

from __future__ import annotations

import importlib
import json

import pytest
import torch

import course
from solutions.fileio import PACKAGE, UnsafeOutputError
from solutions.gpt import random_gpt, save_checkpoint
from solutions.tokenizer import EOT, ByteTokenizer

pytestmark = pytest.mark.given
transformers = pytest.importorskip("transformers")
srv = course.load("server")
hf_export = importlib.import_module(f"{srv.__name__}.hf_export")  # given code of this stage
TOK = ByteTokenizer()
TEXTS = ["plain ASCII, digits 0123 and punctuation !?", "déjà vu — naïve façade, 日本語, Ελληνικά",
         "emoji 😀🐍🇫🇷 and a ZWJ 👩‍💻", "\n", "\r\n\t  trailing spaces   \n\n", "a literal <|endoftext|> is bytes",
         "", "def f(x):\n    return {'a': [1, 2]}\n"]


@pytest.fixture(scope="module")
def model():
    return random_gpt(64, n_layer=1, n_embd=32, dtype=torch.float32)


@pytest.fixture(scope="module")
def folder(model, tmp_path_factory):
    return hf_export.export(tmp_path_factory.mktemp("hf") / "course-gpt", model, render_chat=srv.render_chat)


@pytest.fixture(scope="module")
def tokenizer(folder):
    return transformers.AutoTokenizer.from_pretrained(str(folder))


def test_export_writes_exactly_the_hugging_face_files(folder):
    assert sorted(p.name for p in folder.iterdir()) == sorted(hf_export.FILES)
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".partial-")], "a partial was left behind"
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["GPT2LMHeadModel"] and config["vocab_size"] == 257
    assert config["n_positions"] == 64 and config["eos_token_id"] == EOT


def test_tokenizer_ids_are_the_course_bytes(tokenizer):
    for text in TEXTS + [srv.render_chat([{"role": "user", "content": t} for t in TEXTS])]:
        ids = tokenizer(text)["input_ids"]
        assert ids == TOK.encode(text), text
        assert tokenizer.decode(ids) == text
    assert tokenizer.eos_token_id == EOT and tokenizer.convert_ids_to_tokens(EOT) == "<|endoftext|>"
    assert len(tokenizer) == 257
    # every single byte and a cut multi-byte character decode as the course decodes them (U+FFFD)
    for ids in [[i] for i in range(256)] + [[0xE6, 0x97], [104, 0xF0, 0x9F], [104, EOT, 105]]:
        assert tokenizer.decode(ids, skip_special_tokens=True) == TOK.decode(ids), ids


@pytest.mark.parametrize("messages", [
    [{"role": "user", "content": "hi"}],
    [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Say hé 😀\nplease"},
     {"role": "assistant", "content": "ok"}, {"role": "user", "content": ""}],
])
def test_chat_template_renders_as_the_course_server(tokenizer, messages):
    want = srv.render_chat(messages)
    for gen in (True, False):  # the course always ends with the assistant cue
        assert tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen) == want
    ids = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    assert list(ids) == TOK.encode(want)


def test_hf_model_logits_equal_the_course_model(folder, model):
    hf = transformers.GPT2LMHeadModel.from_pretrained(str(folder)).eval()
    idx = torch.randint(0, 257, (3, 64), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(hf(idx).logits, model(idx), rtol=1e-5, atol=1e-5)


def test_refuses_a_non_empty_target_a_file_and_the_course_packages(model, tmp_path):
    full = tmp_path / "full"
    full.mkdir()
    (full / "notes.txt").write_text("mine")
    with pytest.raises(UnsafeOutputError, match="not empty"):
        hf_export.export(full, model, render_chat=srv.render_chat)
    assert [p.name for p in full.iterdir()] == ["notes.txt"] and (full / "notes.txt").read_text() == "mine"
    (tmp_path / "file").write_text("x")
    with pytest.raises(UnsafeOutputError):
        hf_export.export(tmp_path / "file", model, render_chat=srv.render_chat)
    inside = PACKAGE / "hf-export-test-must-not-exist"
    with pytest.raises(UnsafeOutputError, match="package"):
        hf_export.export(inside, model, render_chat=srv.render_chat)
    assert not inside.exists()
    with pytest.raises(ValueError, match="float32"):
        hf_export.export(tmp_path / "half", random_gpt(64, n_layer=1, n_embd=32, dtype=torch.float16))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "full"], "nothing else was written"


def test_command_line_refuses_with_exit_2(tmp_path, capsys, model):
    ckpt = save_checkpoint(model, tmp_path / "m.pt", half=False)
    for argv, says in (([], "out_dir"), ([str(tmp_path)], "not empty"),
                       ([str(tmp_path / "new"), "--model", str(tmp_path / "no.pt")], "no.pt"),
                       ([str(tmp_path / "m.pt" / "x"), "--model", str(ckpt)], "")):
        with pytest.raises(SystemExit) as e:
            hf_export.main(argv)
        err = capsys.readouterr().err
        assert e.value.code == 2 and "error:" in err and says in err and "Traceback" not in err, (argv, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pt"]
