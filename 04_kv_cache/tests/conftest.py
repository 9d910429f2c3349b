"""Shared fixtures of stage 04's tests: the models the caches are checked on.

- `tiny`: a small random GPT (2 layers, 2 heads of 16, context 64). Its logits come from
  the same code as the default model's; it keeps the many small property tests fast.
- `trained`: the course's default model (`solutions.gpt.load_default()`), for the checks
  whose numbers only mean something on a trained model (INT8 agreement, transformers).

These models run thousands of tiny matrix products, where a second torch thread only adds
synchronisation (and, on a busy shared machine, waiting for a core): the stage's tests run
single-threaded, and put the thread count back afterwards.
"""

from __future__ import annotations

import pytest
import torch

from solutions.gpt import GPT, GPTConfig, load_default


@pytest.fixture(scope="module", autouse=True)
def _single_threaded(one_thread):
    """Every test module here runs on one torch thread (the course plugin's `one_thread`)."""


@pytest.fixture(scope="session")
def tiny() -> GPT:
    torch.manual_seed(1234)
    return GPT(GPTConfig(block_size=64, n_layer=2, n_head=2, n_embd=32)).eval()


@pytest.fixture(scope="session")
def trained() -> GPT:
    model, _ = load_default()
    return model
