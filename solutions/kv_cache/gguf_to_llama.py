"""Exercise 4.13: GGUF's Llama tensors under Hugging Face `LlamaForCausalLM`'s names, Q and K un-permuted."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import torch

from .gguf_quants import dequantize_tensor
from .gguf_reader import GGUFFile

# GGUF's names of a Llama layer's tensors (llama.cpp's gguf-py tensor_mapping) -> transformers'
LAYER_NAMES = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
               "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
               "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}
GLOBAL_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
                "output.weight": "lm_head.weight"}


def hf_name(gguf_name: str) -> str:
    """The `LlamaForCausalLM` state-dict name of the GGUF tensor `gguf_name`:
    "token_embd.weight" -> "model.embed_tokens.weight", "output_norm.weight" ->
    "model.norm.weight", "output.weight" -> "lm_head.weight" (`GLOBAL_NAMES`), and
    "blk.{i}.{part}.weight" -> "model.layers.{i}.{LAYER_NAMES[part]}.weight".
    ValueError naming `gguf_name` for any other name."""
    # BEGIN SOLUTION 4.13
    # DECISION: how a name splits (the global tensors looked up whole, a layer's as
    #   blk.<i>.<part>.weight, the layer number kept); the direction of the Q/K permutation
    #   (GGUF's row 2j + k goes back to row k * head_dim/2 + j of its head: llama.cpp's permute
    #   inverted, not applied again); and which tensors move over how many heads (attn_q over
    #   the query heads, attn_k over the KV heads; V, the output and the MLP stay as stored).
    # HINT: A regular expression r"blk\.(\d+)\.(\w+)\.weight" takes a layer's name apart;
    #   re.fullmatch rejects anything with extra text around it.
    if gguf_name in GLOBAL_NAMES:
        return GLOBAL_NAMES[gguf_name]
    m = re.fullmatch(r"blk\.(\d+)\.(\w+)\.weight", gguf_name)
    if m and m.group(2) in LAYER_NAMES:
        return f"model.layers.{int(m.group(1))}.{LAYER_NAMES[m.group(2)]}.weight"
    raise ValueError(f"gguf_name must be a Llama tensor of GGUF (token_embd, output_norm, output, "
                     f"blk.N.{{{', '.join(LAYER_NAMES)}}}), got {gguf_name!r}")
    # END SOLUTION


def unpermute_qk(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's permutation of a Q or K projection's rows: `w` (n_heads * head_dim,
    in) as stored in GGUF -> the same rows in Hugging Face's order, same shape and dtype.

    llama.cpp's convert_hf_to_gguf.py stores, per head, the rows of Hugging Face's layout
    (the rotary pairs are (j, j + head_dim/2), `rotate_half`) interleaved, so that its RoPE
    rotates adjacent rows (2j, 2j + 1): GGUF row 2j + k of a head is Hugging Face's row
    k * head_dim/2 + j, for k in {0, 1}. `n_heads` is the head count of THIS projection: the
    query heads for Q, the KV heads for K. ValueError naming n_heads unless it divides the rows
    into heads of even size."""
    rows = w.shape[0]
    if not isinstance(n_heads, int) or isinstance(n_heads, bool) or n_heads < 1 or rows % (2 * n_heads):
        raise ValueError(f"n_heads must be an int >= 1 dividing the {rows} rows into heads of even size, "
                         f"got {n_heads!r}")
    # BEGIN SOLUTION 4.13
    # HINT: The direction: GGUF's row 2j + k goes back to row k * head_dim/2 + j of its head,
    #   the inverse of llama.cpp's `permute`, not a copy of it.
    # HINT: Per head, view the rows as (head_dim/2, 2): index [j, k] is GGUF's row 2j + k.
    # HINT: w.reshape(n_heads, head_dim // 2, 2, *rest), swap axes 1 and 2 (now [k, j]), and
    #   reshape back to w.shape.
    half = rows // n_heads // 2
    return w.reshape(n_heads, half, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
    # END SOLUTION


def llama_state_dict(gguf: GGUFFile, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """Every tensor of a Llama GGUF file dequantised (`dequantize_tensor`), under its `hf_name`, as
    `dtype` on the CPU: exactly the parameters `transformers` loads from the file, the Q and
    K projections' rows in Hugging Face's order (`unpermute_qk`, each over its own heads; the
    metadata has both head counts, as `llama_config` reads them). A file without
    "output.weight" (tied embeddings) gives none: the caller ties "lm_head.weight" to the
    embedding. ValueError for a file whose architecture is not llama."""
    cfg = llama_config(gguf)
    out = {}
    for name, tensor in gguf.tensors.items():
        w = dequantize_tensor(tensor)
        # BEGIN SOLUTION 4.13
        # HINT: Only attn_q (over the query heads, cfg["num_attention_heads"]) and attn_k (over
        #   the KV heads, cfg["num_key_value_heads"]: fewer, with GQA) move; V, the output and
        #   the MLP stay as stored.
        # HINT: The part of the name says which projection it is: ".attn_q." or ".attn_k.".
        # HINT: torch.from_numpy needs a writable array: np.array(w) copies it out of the
        #   read-only file map first; then .to(dtype).
        if ".attn_q." in name:
            w = unpermute_qk(w, cfg["num_attention_heads"])
        elif ".attn_k." in name:
            w = unpermute_qk(w, cfg["num_key_value_heads"])
        out[hf_name(name)] = torch.from_numpy(np.array(w)).to(dtype)
        # END SOLUTION
    return out


def llama_config(gguf: GGUFFile) -> dict[str, Any]:
    """The `transformers.LlamaConfig` fields of a Llama GGUF file, from its metadata (given);
    tied embeddings when it has no "output.weight". ValueError naming the architecture if it
    is not llama, or the key that is missing."""
    metadata = gguf.metadata
    arch = metadata.get("general.architecture")
    if arch != "llama":
        raise ValueError(f"general.architecture must be 'llama', got {arch!r}")

    def key(k: str, default: Any = None) -> Any:
        if f"llama.{k}" in metadata:
            return metadata[f"llama.{k}"]
        if default is None:
            raise ValueError(f"the GGUF metadata has no llama.{k}")
        return default

    n_heads, dim = key("attention.head_count"), key("embedding_length")
    vocab = metadata.get("llama.vocab_size") or len(metadata.get("tokenizer.ggml.tokens", ())) or None
    if vocab is None:
        raise ValueError("the GGUF metadata has no llama.vocab_size and no tokenizer.ggml.tokens")
    return {"vocab_size": int(vocab), "hidden_size": dim, "intermediate_size": key("feed_forward_length"),
            "num_hidden_layers": key("block_count"), "num_attention_heads": n_heads,
            "num_key_value_heads": key("attention.head_count_kv", n_heads),
            "head_dim": key("rope.dimension_count", dim // n_heads),
            "rms_norm_eps": float(key("attention.layer_norm_rms_epsilon")),
            "rope_theta": float(key("rope.freq_base", 10000.0)),
            "max_position_embeddings": key("context_length"),
            "bos_token_id": metadata.get("tokenizer.ggml.bos_token_id"),
            "eos_token_id": metadata.get("tokenizer.ggml.eos_token_id"),
            "tie_word_embeddings": "output.weight" not in gguf.tensors}
