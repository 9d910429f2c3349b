"""Stage 04, held-out cases of 4.11-4.13: other shapes, head counts, alignments and seeds than the
visible tests', the same oracles (gguf, transformers' GGUF loading). Every test also reports
its outputs with `course.answer`: exact for bytes, shapes and names, bit-exact for
dequantised weights (the contract asks for gguf's float32 arithmetic)."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch

import course

kc = course.load("kv_cache")
Q, V = gguf.GGMLQuantizationType, gguf.GGUFValueType


def plain(value):
    """Metadata as answer data: ints beyond 2**53 as str (`course.answer` takes no larger int)."""
    if isinstance(value, list):
        return [plain(v) for v in value]
    if type(value) is int and abs(value) >= 2 ** 53:
        return str(value)
    return value


ODD = dict(n_layer=3, dim=96, n_head=6, n_kv=3, ffn=64, vocab=70, alignment=128, seed=11,
           types={"token_embd": Q.Q4_1, "attn_q": Q.Q8_0, "attn_k": Q.Q4_1, "attn_v": Q.Q4_1,
                  "ffn_gate": Q.F16, "ffn_down": Q.Q4_1})


@pytest.fixture(scope="module")
def odd_model(tmp_path_factory, write_llama_gguf):
    """3 layers, 6 query heads over 3 KV heads of 16, alignment 128."""
    return write_llama_gguf(tmp_path_factory.mktemp("hidden") / "model.gguf", **ODD)


@pytest.fixture(scope="module")
def odd_file(tmp_path_factory, write_llama_gguf):
    """`odd_model`'s shapes with more metadata (transformers' reader cannot read its nested array)."""
    extra = {"h.u64": (2 ** 64 - 1, V.UINT64), "h.i16s": ([-3, 7, 32767], V.ARRAY), "h.f64": (-2.5e-5, V.FLOAT64),
             "h.strs": (["", "🐍", "x y"], V.ARRAY), "h.nested": ([["a"], ["b", "c"]], V.ARRAY),
             "h.pad": ("p" * 13, V.STRING)}
    return write_llama_gguf(tmp_path_factory.mktemp("hidden") / "odd.gguf", extra=extra, **ODD)


# ---------------------------------------------------------------------- 4.11
@pytest.mark.exercise("4.11")
def test_reader_on_another_file(odd_file):
    f, r = kc.read_gguf(odd_file), gguf.GGUFReader(odd_file)
    assert f.data_offset == r.data_offset and f.alignment == 128
    for t in r.tensors:
        ours = f.tensors[t.name]
        assert ours.shape == tuple(int(d) for d in reversed(t.shape)) and ours.offset == t.data_offset
        assert np.array_equal(ours.data, np.asarray(t.data).reshape(-1).view(np.uint8)), t.name
    course.answer("metadata", {k: plain(v) for k, v in f.metadata.items()}, exact=True)
    course.answer("layout", [f.version, f.alignment, f.data_offset], exact=True)
    course.answer("tensors", [[t.name, list(t.shape), t.ggml_type, t.offset, int(t.data.size)]
                              for t in f.tensors.values()], exact=True)
    course.answer("bytes", np.stack([np.asarray(t.data[:16]) for t in f.tensors.values()]), exact=True)


@pytest.mark.exercise("4.11")
def test_read_value_at_a_position():
    import struct

    buf = np.frombuffer(b"xx" + struct.pack("<IQ", 8, 2) + struct.pack("<Q", 3) + b"abc" + struct.pack("<Q", 0)
                        + struct.pack("<d", 0.25), dtype=np.uint8)
    value, pos = kc.read_value(buf, 2, 9)
    assert value == ["abc", ""] and pos == 2 + 12 + 11 + 8
    value2, end = kc.read_value(buf, pos, 12)
    assert value2 == 0.25 and end == len(buf)
    with pytest.raises(ValueError, match="vtype"):
        kc.read_value(buf, 0, 13)
    course.answer("values", [value, pos, value2, end], exact=True)


# ---------------------------------------------------------------------- 4.12
@pytest.mark.exercise("4.12")
@pytest.mark.parametrize("qtype,fn", [(Q.Q8_0, "dequantize_q8_0"), (Q.Q4_1, "dequantize_q4_1")])
def test_dequantise_other_blocks(qtype, fn):
    rng = np.random.default_rng(99)
    w = (rng.standard_normal((9, 160)) * np.geomspace(1e-3, 30, 9)[:, None]).astype(np.float32)
    w[4] = np.abs(w[4]) + 7.0  # every weight positive: Q4_1's m well above 0
    w[5] = -np.abs(w[5]) - 7.0
    raw = gguf.quants.quantize(w, qtype)
    got = getattr(kc, fn)(raw).reshape(w.shape)
    want = gguf.quants.dequantize(raw, qtype)
    assert got.dtype == np.float32 and np.array_equal(got.view(np.uint32), want.view(np.uint32))
    course.answer("weights", got, exact=True)


@pytest.mark.exercise("4.12")
def test_q4_1_blocks_by_hand():
    q = (np.arange(32) * 7) % 16
    blocks = []
    for d, m in ((0.125, 2.0), (-1.0, 0.5), (0.0, -0.75)):
        packed = (q[:16] | (q[16:] << 4)).astype(np.uint8)
        blocks.append(np.concatenate([np.float16(d).reshape(1).view(np.uint8),
                                      np.float16(m).reshape(1).view(np.uint8), packed]))
    got = kc.dequantize_q4_1(np.concatenate(blocks))
    want = np.concatenate([np.float32(d) * q.astype(np.float32) + np.float32(m)
                           for d, m in ((0.125, 2.0), (-1.0, 0.5), (0.0, -0.75))])
    assert np.array_equal(got, want)
    course.answer("weights", got, exact=True)


@pytest.mark.exercise("4.12")
def test_smollm2_tensors(smollm2_gguf):
    g = smollm2_gguf()
    out = {}
    for name in ("blk.13.ffn_gate.weight", "blk.7.attn_v.weight", "blk.0.attn_norm.weight"):
        t = g.tensors[name]
        w = kc.dequantize_tensor(t)
        want = gguf.quants.dequantize(t.data.reshape(t.shape[0], -1) if len(t.shape) > 1 else t.data, t.ggml_type)
        assert np.array_equal(w.reshape(-1).view(np.uint32), want.reshape(-1).view(np.uint32)), name
        out[name] = w[:8, :64] if w.ndim == 2 else w
    course.answer("weights", out, exact=True)


# ---------------------------------------------------------------------- 4.13
@pytest.mark.exercise("4.13")
def test_mapping_on_another_file(odd_model):
    odd_file = odd_model
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf = AutoModelForCausalLM.from_pretrained(str(odd_file.parent), gguf_file=odd_file.name, dtype=torch.float32).eval()
    ours, theirs = kc.llama_state_dict(kc.read_gguf(odd_file)), hf.state_dict()
    for name, w in ours.items():
        assert torch.equal(w, theirs[name]), name
    course.answer("names", sorted(ours), exact=True)
    course.answer("qk", [ours[f"model.layers.{i}.self_attn.{p}_proj.weight"][:, :4] for i in (0, 2) for p in "qk"],
                  exact=True)
    model = kc.llama_from_gguf(kc.read_gguf(odd_file))
    idx = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7]])
    with torch.no_grad():
        logits = model(idx)
        torch.testing.assert_close(logits, hf(idx).logits, atol=1e-4, rtol=1e-4)
    course.answer("logits", logits, rtol=1e-4, atol=1e-4)


@pytest.mark.exercise("4.13")
@pytest.mark.parametrize("n_heads,head_dim,cols", [(5, 6, 2), (1, 128, 1)])
def test_unpermute_other_shapes(n_heads, head_dim, cols):
    w = np.arange(n_heads * head_dim * cols, dtype=np.float64).reshape(n_heads * head_dim, cols)
    stored = w.reshape(n_heads, 2, head_dim // 2, cols).swapaxes(1, 2).reshape(w.shape)  # llama.cpp's permute
    back = kc.unpermute_qk(stored, n_heads)
    assert np.array_equal(back, w)
    course.answer("rows", back[:, 0].astype(np.int64), exact=True)


@pytest.mark.exercise("4.13")
def test_names_of_every_layer_part():
    parts = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down", "attn_norm", "ffn_norm")
    names = [kc.hf_name(f"blk.{i}.{p}.weight") for i in (0, 7, 123) for p in parts]
    for bad in ("blk.1.ffn_gate_exps.weight", "output.bias", "BLK.1.attn_q.weight"):
        with pytest.raises(ValueError):
            kc.hf_name(bad)
    course.answer("names", names, exact=True)


# ---- 4.13 on SmolLM2's real file, against the live oracle (the visible test: two prompts,
# recorded): every parameter, logits on 8 prompts, two greedy answers token for token

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
    course.answer("names", sorted(ours), exact=True)
    course.answer("qk", [ours[f"model.layers.{i}.self_attn.{p}_proj.weight"][:, :4] for i in (0, 29) for p in "qk"],
                  exact=True)


@pytest.mark.exercise("4.13")
def test_logits_equal_transformers_on_eight_prompts(loaded):
    _, model, tok, hf = loaded()
    assert isinstance(model, __import__("solutions.train", fromlist=["Llama"]).Llama)
    last = []
    for text in PROMPTS:
        idx = torch.tensor([tok.encode(text)])
        with torch.no_grad():
            ours, theirs = model(idx), hf(idx).logits
        err = (ours - theirs).abs().max().item()
        assert torch.allclose(ours, theirs, atol=1e-4, rtol=1e-4), \
            f"{text!r}: logits differ from transformers' by up to {err:.3g} (tolerance 1e-4)"
        last.append(ours[0, -1, :256])
    course.answer("last_logits", last, rtol=1e-4, atol=1e-4)


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
    course.answer("tokens", ours, exact=True)
