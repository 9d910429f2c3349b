"""Given: tiny Llama GGUF files with random weights, written by the `gguf` package (llama.cpp's own
writer), for checks and smoke runs that need a Llama file but not SmolLM2's 98 MB one (nothing to
write here).

    path = write_llama_gguf(tmp / "tiny.gguf", tokenizer=True)   # 2 layers, dim 64, TINY_VOCAB tokens
    g = read_gguf(path)
    model, tok = llama_from_gguf(g), gguf_tokenizer(g)            # export_llama takes both

The stage's tests read files this writer made (so `read_gguf` is checked on files it did not
write); 04_kv_cache/bench_load.py's smoke run loads one instead of SmolLM2. With
`tokenizer=True` the file carries a byte-level BPE tokenizer as SmolLM2's does (GGUF's "gpt2"
model, the "smollm" pre-tokenizer, ChatML control tokens and chat template; `tiny_tokens()`,
`TINY_MERGES`), enough for `gguf_tokenizer`, `render_chat`, `export_llama` and transformers'
`from_pretrained(gguf_file=...)`.
"""

from __future__ import annotations

from pathlib import Path

TINY_MERGES = ("Ġ t", "h e", "Ġt he")
TINY_SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")  # the control tokens, the vocabulary's last three
TINY_VOCAB = 256 + len(TINY_MERGES) + len(TINY_SPECIAL)  # 262
TINY_CHAT_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
                      "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
                      "{{ '<|im_start|>assistant\n' }}{% endif %}")


def tiny_tokens() -> list[str]:
    """The tiny tokenizer's vocabulary, `TINY_VOCAB` strings: bytes 0-255 as GPT-2's characters
    (stage 02's `byte_chars`), one token per merge of `TINY_MERGES` ("Ġt", "he", "Ġthe"), then
    `TINY_SPECIAL`."""
    from solutions.dedup.byte_unicode import byte_chars

    return [*byte_chars(), *(m.replace(" ", "") for m in TINY_MERGES), *TINY_SPECIAL]


def tiny_tokenizer_metadata() -> dict:
    """The tokenizer keys of a `tokenizer=True` file: GGUF key -> (value, GGUFValueType).
    Tokens `tiny_tokens()` (normal, type 1, but the control tokens of `TINY_SPECIAL`, type 3),
    merges `TINY_MERGES`, bos 260 ("<|im_start|>"), eos and padding 261 ("<|im_end|>"),
    pre-tokenizer "smollm", the ChatML template `TINY_CHAT_TEMPLATE`."""
    import gguf

    V = gguf.GGUFValueType
    n, k = TINY_VOCAB, len(TINY_SPECIAL)
    return {"tokenizer.ggml.model": ("gpt2", V.STRING), "tokenizer.ggml.pre": ("smollm", V.STRING),
            "tokenizer.ggml.tokens": (tiny_tokens(), V.ARRAY),
            "tokenizer.ggml.merges": (list(TINY_MERGES), V.ARRAY),
            "tokenizer.ggml.token_type": ([1] * (n - k) + [3] * k, V.ARRAY),
            "tokenizer.ggml.bos_token_id": (n - 2, V.UINT32), "tokenizer.ggml.eos_token_id": (n - 1, V.UINT32),
            "tokenizer.ggml.padding_token_id": (n - 1, V.UINT32),
            "tokenizer.chat_template": (TINY_CHAT_TEMPLATE, V.STRING)}


def write_llama_gguf(path: str | Path, *, n_layer: int = 2, dim: int = 64, n_head: int = 4, n_kv: int = 2,
                     ffn: int = 96, vocab: int | None = None, types: dict | None = None,
                     alignment: int | None = None, extra: dict | None = None, seed: int = 0, context: int = 128,
                     tokenizer: bool = False) -> Path:
    """Write a Llama GGUF file (architecture "llama", GGUF version 3) with random weights at
    `path`; return `path` (a Path).

    Args:
        n_layer, dim, n_head, n_kv, ffn, context: the model's blocks, hidden size, query and
            key/value heads (head_dim = dim // n_head), feed-forward size, context length.
        vocab: the vocabulary size (default 96; with `tokenizer`, `TINY_VOCAB`, and any
            other value is a ValueError).
        types: a tensor part ("token_embd", "attn_q", "ffn_down", ...) -> GGMLQuantizationType;
            default F32. Norms are always F32.
        alignment: a custom `general.alignment` (default: GGUF's 32, not written).
        extra: more metadata, key -> (value, GGUFValueType); written after the tokenizer's.
        seed: the weights' random seed (numpy's default_rng): the same arguments, the same bytes.
        tokenizer: add `tiny_tokenizer_metadata()`.

    The file has no output.weight (the head is tied to token_embd, as SmolLM2's)."""
    import gguf
    import numpy as np

    if tokenizer:
        if vocab not in (None, TINY_VOCAB):
            raise ValueError(f"vocab {vocab}: a file with the tiny tokenizer has {TINY_VOCAB} tokens")
        vocab = TINY_VOCAB
    vocab = 96 if vocab is None else vocab
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), "llama")
    if alignment:
        w.add_custom_alignment(alignment)
    w.add_context_length(context)
    w.add_embedding_length(dim)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(ffn)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_rope_dimension_count(dim // n_head)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)
    w.add_file_type(0)
    for key, (value, vtype) in {**(tiny_tokenizer_metadata() if tokenizer else {}), **(extra or {})}.items():
        if vtype == gguf.GGUFValueType.ARRAY:
            w.add_array(key, value)
        else:
            w.add_key_value(key, value, vtype)
    hd = dim // n_head
    shapes = {"token_embd.weight": (vocab, dim), "output_norm.weight": (dim,)}
    for i in range(n_layer):
        shapes.update({f"blk.{i}.attn_norm.weight": (dim,), f"blk.{i}.attn_q.weight": (n_head * hd, dim),
                       f"blk.{i}.attn_k.weight": (n_kv * hd, dim), f"blk.{i}.attn_v.weight": (n_kv * hd, dim),
                       f"blk.{i}.attn_output.weight": (dim, dim), f"blk.{i}.ffn_norm.weight": (dim,),
                       f"blk.{i}.ffn_gate.weight": (ffn, dim), f"blk.{i}.ffn_up.weight": (ffn, dim),
                       f"blk.{i}.ffn_down.weight": (dim, ffn)})
    for name, shape in shapes.items():
        if len(shape) == 1:
            x, qt = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32), gguf.GGMLQuantizationType.F32
        else:
            x = (0.3 * rng.standard_normal(shape)).astype(np.float32)
            qt = (types or {}).get(name.split(".")[-2], gguf.GGMLQuantizationType.F32)
        w.add_tensor(name, gguf.quants.quantize(x, qt), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)
