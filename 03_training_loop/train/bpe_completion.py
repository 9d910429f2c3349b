# GENERATED from solutions/train/bpe_completion.py by `course stubs --write`.
# Nothing to write here: given code of stage 03 (03_training_loop/03_training_loop.ipynb).
"""Text from a model on BPE tokens (given code): sampling, and the line-completion set of 3.13.

`complete_lines` (line_completion.py) feeds a byte model bytes; a BPE model reads the same
prefixes encoded by its tokenizer, and its greedy tokens are decoded until the text holds a
newline (the line ends there) or `<|endoftext|>`, or `max_bytes` bytes were produced. The
prefix is encoded as it stands, cut inside a word: the tokens of a cut word are not the tokens
the model saw in training (the reason tokenizers "heal" the last token), which costs a BPE
model some hits a byte model does not lose.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from .line_completion import edit_similarity, exact_match


@torch.no_grad()
def generate_bpe(model: nn.Module, tok, prompt: str, max_new: int, *, block_size: int,
                 temperature: float = 0.0, seed: int = 0) -> str:
    """`prompt` continued by `max_new` tokens (greedy at temperature 0), decoded (prompt included)."""
    ids = tok.encode(prompt)
    g = torch.Generator().manual_seed(seed)
    was = model.training
    model.eval()
    for _ in range(max_new):
        logits = model(torch.tensor([ids[-block_size:]]))[0, -1].float()
        if temperature == 0:
            nxt = int(logits.argmax())
        else:
            nxt = int(torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=g))
        ids.append(nxt)
    model.train(was)
    return tok.decode(ids)


@torch.no_grad()
def complete_lines_bpe(model: nn.Module, tok, prefixes: Sequence[str], *, block_size: int,
                       max_bytes: int = 48) -> list[str]:
    """The greedy completion of the line each prefix ends in (the text before the first newline)."""
    eot = set(tok.special_ids.values())
    out = []
    was = model.training
    model.eval()
    for prefix in prefixes:
        ids = tok.encode(prefix)[-(block_size // 2):]
        made: list[int] = []
        while True:
            nxt = int(model(torch.tensor([(ids + made)[-block_size:]]))[0, -1].argmax())
            if nxt in eot:
                break
            made.append(nxt)
            text = b"".join(tok.token_bytes[i] for i in made)
            if b"\n" in text or len(text) >= max_bytes:
                break
        text = b"".join(tok.token_bytes[i] for i in made).split(b"\n", 1)[0][:max_bytes]
        out.append(text.decode("utf-8", errors="replace"))
    model.train(was)
    return out


def line_completion_bpe(model: nn.Module, tok, examples, *, block_size: int) -> dict:
    """Exact match and edit similarity (3.13's rules), in percent, over `examples` (CompletionExample)."""
    preds = complete_lines_bpe(model, tok, [e.prefix for e in examples], block_size=block_size)
    em = [exact_match(p, e.target) for p, e in zip(preds, examples)]
    es = [edit_similarity(p, e.target) for p, e in zip(preds, examples)]
    return {"n": len(examples), "exact_match": 100 * sum(em) / len(em), "edit_similarity": 100 * sum(es) / len(es),
            "predictions": preds}
