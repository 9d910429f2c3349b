"""A byte-level MLP language model on the stage-01 engine (Bengio et al., 2003), its batches,
and its PyTorch twin (an oracle, and the other side of bench.py's comparison)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from solutions.autograd import Linear, Module, Tensor
from solutions.checks import check_ints
from solutions.tokenizer import VOCAB_SIZE


def sample_contexts(tokens: np.ndarray, batch_size: int, context: int,
                    rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """`batch_size` random (context, next token) pairs cut from a token stream.

    Args: tokens (N,) integer ids (any integer dtype; not modified); batch_size, context
    ints >= 1; rng a numpy Generator, the only source of randomness.
    Returns: (X, Y), X (batch_size, context) int64, Y (batch_size,) int64: row i is the
    window at an offset s_i and the token right after it, X[i] = tokens[s_i : s_i+context],
    Y[i] = tokens[s_i+context].
    Offsets: every offset whose window AND target lie inside the stream can come up, all
    equally likely, the first and the last one included; no other. They are ONE draw
    `rng.integers(0, high, size=batch_size)`, high the count of those offsets, and nothing
    else draws from rng: the same seed gives the same batch as the reference's.
    Raises: ValueError for batch_size or context not an int >= 1, tokens not a 1-D integer
    array, fewer than context + 1 tokens.
    """
    check_ints(1, batch_size=batch_size, context=context)
    tokens = np.asarray(tokens)
    if tokens.ndim != 1 or tokens.dtype.kind not in "iu":
        raise ValueError(f"tokens must be a 1-D integer stream, got shape {tokens.shape}, dtype {tokens.dtype}")
    if len(tokens) < context + 1:
        raise ValueError(f"a stream of {len(tokens)} tokens is too short for a context of {context} + 1")
    # BEGIN SOLUTION 3.5
    # DECISION: the gather's index arithmetic (the highest offset that leaves a context and its
    #   target inside the stream; one window per row, without a loop) and how a window's embeddings
    #   become one input vector (concatenated in order, through the engine's differentiable
    #   indexing).
    # HINT: Count the valid offsets on a small case: a stream of 6 tokens and a context of 2
    #   has windows at 0..3 (offset 3: tokens 3, 4, target 5); offset 4 has no target.
    # HINT: Draw all batch_size offsets at once with rng.integers (its high is exclusive);
    #   the highest offset must leave room for context tokens plus the one that follows.
    # HINT: One fancy-indexing gather builds X: tokens[starts[:, None] + np.arange(context)];
    #   Y is tokens[starts + context]. Cast both to int64.
    starts = rng.integers(0, len(tokens) - context, size=batch_size)
    X = tokens[starts[:, None] + np.arange(context)].astype(np.int64)
    Y = tokens[starts + context].astype(np.int64)
    return X, Y
    # END SOLUTION


class MLPLanguageModel(Module):
    """The previous `context` tokens predict the next: an engine Module.

        idx (B, context) -> embedding rows (B, context, embed_dim) -> concatenated in window
        order (B, context * embed_dim) -> tanh(hidden) (B, hidden) -> out (B, vocab_size) logits

    Attributes: `embedding`, a (vocab_size, embed_dim) float32 Tensor (a learned table);
    `hidden` and `out`, stage-01 Linear layers ((in, out) weights); `context`, `vocab_size`. Initialised from
    `rng` (a Generator, seed or None), so the same seed gives the same model.
    ValueError: context, embed_dim, hidden or vocab_size not an int >= 1.
    """

    def __init__(self, context: int = 8, embed_dim: int = 16, hidden: int = 256,
                 vocab_size: int = VOCAB_SIZE, *, rng: np.random.Generator | int | None = 0) -> None:
        check_ints(1, context=context, embed_dim=embed_dim, hidden=hidden, vocab_size=vocab_size)
        rng = np.random.default_rng(rng)
        self.context, self.vocab_size = context, vocab_size
        self.embedding = Tensor(rng.normal(0.0, 1.0, (vocab_size, embed_dim)).astype(np.float32),
                                requires_grad=True)
        self.hidden = Linear(context * embed_dim, hidden, rng=rng)
        self.out = Linear(hidden, vocab_size, rng=rng)

    def forward(self, idx: np.ndarray) -> Tensor:
        """The next-token logits of each window.

        Args: idx (B, context) integer ids in [0, vocab_size).
        Returns: (B, vocab_size) float32 logits, a Tensor in the engine's graph (backward
        reaches `embedding`, `hidden` and `out`). The function is the class's: equal to
        `TorchMLPLanguageModel.from_engine(self)` (float32, 1e-5), gradients included; a
        window's vectors are concatenated in window order, and a token used twice in a
        window adds both gradients into its embedding row.
        Raises: ValueError for idx not integers of shape (B, context), or an id outside
        [0, vocab_size) (given).
        """
        idx = np.asarray(idx)
        if idx.ndim != 2 or idx.shape[1] != self.context or idx.dtype.kind not in "iu":
            raise ValueError(f"idx must be integer ids of shape (batch, {self.context}), "
                             f"got shape {idx.shape}, dtype {idx.dtype}")
        if idx.size and (idx.min() < 0 or idx.max() >= self.vocab_size):
            raise ValueError(f"token ids must be in [0, {self.vocab_size}), got {idx.min()}..{idx.max()}")
        # BEGIN SOLUTION 3.5
        # HINT: Looking tokens up is indexing the embedding Tensor with idx (the engine
        #   differentiates indexing): shape (B, context, embed_dim).
        # HINT: Reshape to (B, context * embed_dim) to concatenate a window's vectors, then
        #   out(hidden(x).tanh()).
        x = self.embedding[idx]              # (B, context, embed_dim)
        x = x.reshape(idx.shape[0], -1)      # (B, context * embed_dim): the concatenation
        return self.out(self.hidden(x).tanh())
        # END SOLUTION


class TorchMLPLanguageModel(nn.Module):
    """The same MLP language model in PyTorch (for the speed comparison and as an oracle).

    `from_engine(model)` copies an engine model's weights, so both compute the same
    function; the engine's Linear weight is (in, out), PyTorch's is its transpose.
    """

    def __init__(self, context: int = 8, embed_dim: int = 16, hidden: int = 256, vocab_size: int = VOCAB_SIZE):
        super().__init__()
        self.context = context
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        self.hidden = nn.Linear(context * embed_dim, hidden)
        self.out = nn.Linear(hidden, vocab_size)

    @classmethod
    def from_engine(cls, model: MLPLanguageModel) -> TorchMLPLanguageModel:
        vocab, embed = model.embedding.shape
        twin = cls(model.context, embed, model.hidden.weight.shape[1], vocab)
        with torch.no_grad():
            twin.embedding.weight.copy_(torch.from_numpy(model.embedding.data))
            for ours, theirs in ((model.hidden, twin.hidden), (model.out, twin.out)):
                theirs.weight.copy_(torch.from_numpy(ours.weight.data.T))
                theirs.bias.copy_(torch.from_numpy(ours.bias.data))
        return twin

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embedding(idx).flatten(1)
        return self.out(torch.tanh(self.hidden(x)))
