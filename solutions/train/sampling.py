"""Sampling text from the trained models (given): the MLP LM byte by byte, and a GPT the plain
way, re-reading the whole window for every new token (stage 04's KV cache removes that)."""

from __future__ import annotations

import numpy as np
import torch

from solutions.autograd import no_grad
from solutions.gpt import GPT
from solutions.tokenizer import EOT, ByteTokenizer

from .mlp_lm import MLPLanguageModel


def pick_next(logits: np.ndarray, temperature: float, rng: np.random.Generator) -> int:
    """Sample one token id from (V,) logits at `temperature` (0: the most likely one)."""
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if temperature == 0:
        return int(np.argmax(logits))
    z = logits.astype(np.float64) / temperature
    p = np.exp(z - z.max())
    return int(rng.choice(len(p), p=p / p.sum()))


def sample_mlp_lm(model: MLPLanguageModel, prompt: str, max_new_tokens: int = 200,
                  temperature: float = 0.8, seed: int = 0) -> str:
    """Continue `prompt` byte by byte with the MLP LM (prompt left-padded with EOT)."""
    tok, rng = ByteTokenizer(), np.random.default_rng(seed)
    ids = [EOT] * model.context + tok.encode(prompt)
    start = len(ids)
    with no_grad():
        for _ in range(max_new_tokens):
            logits = model(np.array([ids[-model.context:]])).data[0]
            ids.append(pick_next(logits, temperature, rng))
    return prompt + tok.decode(ids[start:])


@torch.no_grad()
def generate(model: GPT, prompt_ids: list[int], max_new_tokens: int, *, temperature: float = 0.8,
             seed: int = 0) -> list[int]:
    """Sample a continuation from a GPT, re-reading the (cropped) context each step.

    The plain way: O(T) work per new token over the whole window. Stage 04's KV cache
    removes the re-reading.
    """
    if not prompt_ids:
        raise ValueError("generate needs a non-empty prompt (start with [EOT] for none)")
    rng = np.random.default_rng(seed)
    ids = list(prompt_ids)
    was_training = model.training
    model.eval()
    for _ in range(max_new_tokens):
        window = torch.tensor([ids[-model.config.block_size:]])
        ids.append(pick_next(model(window)[0, -1].numpy(), temperature, rng))
    model.train(was_training)
    return ids[len(prompt_ids):]


def sample_gpt(model: GPT, prompt: str, max_new_tokens: int = 200, temperature: float = 0.8, seed: int = 0) -> str:
    """Continue `prompt` (text) with a GPT: prompt + the sampled bytes, decoded."""
    tok = ByteTokenizer()
    ids = [EOT] + tok.encode(prompt)
    return prompt + tok.decode(generate(model, ids, max_new_tokens, temperature=temperature, seed=seed),
                               stop_at_eot=True)
