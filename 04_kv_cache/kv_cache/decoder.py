# GENERATED from solutions/kv_cache/decoder.py by `course stubs --write`.
# Nothing to write here: given code of stage 04 (04_kv_cache/04_kv_cache.ipynb).
"""Given code: what the engines of stages 04-08 need of a decoder, and the two that have it.

Stage 03 built two decoders: the course's `GPT` (learned positions added to the embedding,
one K/V head per query head) and `Llama` (RoPE rotating q and k, fewer K/V heads than query
heads: grouped-query attention), which is SmolLM2-135M-Instruct's architecture. The engines
run either, through the same pieces:

    model.embed(idx, pos)             (B, T, C); pos (B, T) absolute positions
    block.ln_1, block.attn.qkv(x, pos)  q (B, H, T, D), k and v (B, H_kv, T, D); rotated where
                                       the model uses RoPE (GPT: pos is already in x, H_kv = H)
    block.attn.out(y), block.ln_2, block.mlp, model.head(x)
    model.config.n_layer, .block_size, .head_dim, .vocab_size

and the cache of a layer holds `kv_heads(model)` heads per token, not the query heads: for
SmolLM2 3, not 9, a third of the bytes.
"""

from __future__ import annotations

import torch

from solutions.gpt import GPT
from solutions.train import Llama

DECODERS = (GPT, Llama)
Decoder = GPT | Llama


def check_decoder(model, who: str = "model") -> None:
    """TypeError unless `model` is one of the course's decoders (a GPT or a Llama)."""
    if not isinstance(model, DECODERS):
        raise TypeError(f"{who} must be a solutions.gpt.GPT or a solutions.train.Llama, got {type(model).__name__}")


def kv_heads(model: Decoder) -> int:
    """K/V heads per layer: what a cache stores per token (n_head for GPT, n_kv_heads for Llama)."""
    if isinstance(model, Llama):
        return model.config.n_kv_heads
    return model.config.n_head


def embedding(model: Decoder) -> torch.Tensor:
    """The token embedding's weight (V, C): the model's dtype and device."""
    emb = model.model["embed_tokens"] if isinstance(model, Llama) else model.transformer["wte"]
    assert isinstance(emb, torch.nn.Embedding)
    return emb.weight
