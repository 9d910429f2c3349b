# GENERATED from solutions/train/demo.py by `course stubs --write`.
# Nothing to write here: given code of stage 03 (03_training_loop/03_training_loop.ipynb).
"""`course demo`'s part for stage 03 (given): a few engine steps, then the default GPT's sample."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from solutions.gpt import load_default

from .engine_loop import train_mlp_lm
from .mlp_lm import MLPLanguageModel
from .optim import AdamW
from .sampling import sample_gpt


def demo() -> None:
    """Train the engine's MLP LM for a few steps, then sample the course's default GPT."""
    print("Part 1: a byte-level MLP language model on the stage-01 engine (AdamW, warmup + cosine)")
    source = b"".join(p.read_bytes() for p in sorted(Path(__file__).parent.glob("*.py")))  # this package
    tokens = np.frombuffer(source, dtype=np.uint8).astype(np.int64)
    split = int(0.9 * len(tokens))
    model = MLPLanguageModel(context=8, embed_dim=16, hidden=256, rng=0)
    optimizer = AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    train_mlp_lm(model, optimizer, tokens[:split], tokens[split:], steps=300, batch_size=128, max_lr=1e-2,
                 warmup_steps=20, min_lr=1e-3, eval_every=50)
    print("\nPart 2: the course's default GPT (solutions/assets/gpt_default.pt), continuing 'def '")
    gpt, _ = load_default()
    print(sample_gpt(gpt, "def ", 160, temperature=0.7, seed=0))
