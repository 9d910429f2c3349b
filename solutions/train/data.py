"""The GPT's data: random windows of a token stream (3.7), and a split read as one stream."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from solutions.checks import check_ints
from solutions.tokenizer import EOT


def get_batch(tokens: torch.Tensor, batch_size: int, block_size: int,
              generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """`batch_size` windows at random offsets of a token stream: (x, y), inputs and targets.

    tokens: (N,) integer ids (any integer dtype). x and y are (batch_size, block_size) int64;
    for a start s, x = tokens[s : s+T] and y = tokens[s+1 : s+T+1] (y is x shifted by one).
    The starts come from ONE call `torch.randint(0, N - T, (batch_size,), generator=generator)`:
    every s in 0 .. N-T-1 equally likely, none past the end, and nothing else draws from the
    generator, so its state IS the data position (the same state gives the same batch, and
    each call moves it on). `tokens` is not modified.
    TypeError: tokens not a 1-D integer torch.Tensor. ValueError: batch_size or block_size
    not an int >= 1; fewer than block_size + 1 tokens ("too short").
    """
    check_ints(1, batch_size=batch_size, block_size=block_size)
    _check_stream(tokens)
    if len(tokens) < block_size + 1:
        raise ValueError(f"a stream of {len(tokens)} tokens is too short for windows of {block_size} + 1")
    # BEGIN SOLUTION 3.7
    # DECISION: the shift and the bounds: y is x moved by one token, the largest start leaves T + 1
    #   tokens, one draw from the generator per call, and where to widen to int64 (only the gathered
    #   windows).
    # HINT: Gather windows of T + 1 tokens at once: starts[:, None] + torch.arange(T + 1)
    #   indexes a (B, T+1) block of the stream; no Python loop.
    # HINT: Widen to int64 (.long()) only the gathered windows; x is all but the last column,
    #   y all but the first.
    starts = torch.randint(0, len(tokens) - block_size, (batch_size,), generator=generator)
    idx = starts[:, None] + torch.arange(block_size + 1)  # (B, T+1)
    windows = tokens[idx].long()
    return windows[:, :-1], windows[:, 1:]
    # END SOLUTION


def _check_stream(tokens: object) -> None:
    if not isinstance(tokens, torch.Tensor):
        raise TypeError(f"tokens must be a 1-D integer torch.Tensor (a token stream), got {type(tokens).__name__}")
    if tokens.dim() != 1 or tokens.is_floating_point():
        raise TypeError(f"tokens must be a 1-D integer torch.Tensor (a token stream), got shape "
                        f"{tuple(tokens.shape)}, dtype {tokens.dtype}")


def load_tokens(path: str | Path) -> torch.Tensor:
    """One split (JSONL records {"id", "text", "source"}) as one token stream.

    Each document's UTF-8 bytes followed by `EOT`, all documents concatenated: shape (N,),
    dtype int16 (ids 0..256 need 9 bits; int16 holds the stream at a quarter of int64's size,
    and `get_batch` widens only the windows it draws).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no token split at {path}")
    parts = []
    eot = np.array([EOT], dtype=np.int16)
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                text = json.loads(line)["text"]
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise ValueError(f"{path}:{n}: not a JSONL record with a 'text' field ({e})") from None
            parts.append(np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int16))
            parts.append(eot)
    if not parts:
        raise ValueError(f"{path} holds no documents")
    return torch.from_numpy(np.concatenate(parts))
