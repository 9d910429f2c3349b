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
    """`batch_size` training windows at random offsets of a token stream: (x, y).

    Args: tokens (N,) integer ids, any integer dtype (not modified); batch_size, block_size
    (T) ints >= 1; generator a torch.Generator, whose state IS the data position.
    Returns: (x, y), both (batch_size, T) int64 whatever the stream's dtype: row i is the
    window at a start s_i and its targets, the same window one token later: x[i] =
    tokens[s_i : s_i+T], y[i] = tokens[s_i+1 : s_i+T+1].
    Starts: every start whose x and y both lie inside the stream can come up, all equally
    likely, the first and the last one included; no other. They are ONE draw
    `torch.randint(0, high, (batch_size,), generator=generator)`, high the count of those
    starts, and nothing else draws from the generator: the same state gives the same batch
    as the reference's, and each call moves it on.
    Raises: TypeError for tokens not a 1-D integer torch.Tensor; ValueError for batch_size or
    block_size not an int >= 1, or fewer than block_size + 1 tokens ("too short").
    """
    check_ints(1, batch_size=batch_size, block_size=block_size)
    _check_stream(tokens)
    if len(tokens) < block_size + 1:
        raise ValueError(f"a stream of {len(tokens)} tokens is too short for windows of {block_size} + 1")
    # BEGIN SOLUTION 3.7
    # DECISION: the shift and the bounds: y is x moved by one token, the largest start leaves T + 1
    #   tokens, one draw from the generator per call, and where to widen to int64 (only the gathered
    #   windows).
    # HINT: One window of T + 1 tokens holds both x and y (they overlap in T - 1 tokens); the
    #   last valid start leaves T + 1 tokens: a stream of 10 and T = 4 starts at 0..5.
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
