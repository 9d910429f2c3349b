"""FLOPs and bytes of one model step, from the model's shapes (8.5, the roofline's x-axis)."""

from __future__ import annotations

from dataclasses import dataclass, field

from solutions.checks import check_int, check_ints
from solutions.gpt import GPTConfig


def step_cost(config: GPTConfig, *, batch: int, new_tokens: int, context: int, dtype_bytes: int = 4) -> Cost:
    """FLOPs and bytes of one `forward_cached` call: `batch` rows, each running `new_tokens`
    new tokens after `context` cached ones (decode: new_tokens=1). N = batch × new_tokens
    tokens, each attending to L = context + new_tokens keys; C = n_embd, V = vocab_size; a
    multiply-add is 2 FLOPs (an (m×k) @ (k×n) product is 2·m·k·n). Returns Cost(flops =
    matmul + attention, bytes = weights + kv_read + kv_write, detail = exactly these five
    keys, as floats):
      "matmul": every Linear of every block (qkv C->3C, projection C->C, MLP C->4C->C) and
                the tied head, on the N new tokens (torch's FlopCounterMode's count);
      "attention": per layer Q·Kᵀ and P·V, all heads (H·D = C), each new token x L keys;
      "weights": every parameter (`weight_count`) read once; of wpe only the looked-up rows;
      "kv_read": per layer every key and value of every ROW, once (not once per new token);
      "kv_write": per layer the new tokens' K and V;
    bytes = values × dtype_bytes. Not counted: LayerNorm, GELU, softmax, biases, adds, activations.
    Raises ValueError: ints batch, new_tokens, dtype_bytes >= 1 and context >= 0, and
    context + new_tokens <= block_size.
    """
    check_ints(1, batch=batch, new_tokens=new_tokens)
    check_int("context", context, 0)
    check_int("dtype_bytes", dtype_bytes, 1)
    if context + new_tokens > config.block_size:
        raise ValueError(f"context {context} + new_tokens {new_tokens} exceeds the model's context "
                         f"{config.block_size}")
    # BEGIN SOLUTION 8.5
    # DECISION: how to count: each term derived from the shapes (which matmuls, whose rows, per row
    #   or per token), the peaks measured so the FLOPs and bytes per timed call are known, and the
    #   regime's boundaries (overhead first, strict; the ridge goes to compute).
    # HINT: Count each product as 2·m·k·n with m the rows that go through it: every new token (N =
    #   batch * new_tokens) for the Linears and the head; attention pairs each new token with L =
    #   context + new_tokens keys.
    # HINT: Per layer the four Linears are 2·N·(3C² + C² + 4C² + 4C²) = 24·N·C²; the head is
    #   2·N·C·V; attention is 2 · (2·N·L·C); n_layer multiplies every per-layer term.
    # HINT: Bytes: the weights are sum(weight_count(config).values()) - wpe + N·C values; K and V
    #   read 2·batch·L·C values a layer, written 2·N·C; all times dtype_bytes.
    C, V, n_layer = config.n_embd, config.vocab_size, config.n_layer
    N, L = batch * new_tokens, context + new_tokens
    matmul = n_layer * 24 * N * C * C + 2 * N * C * V
    attention = n_layer * 2 * (2 * N * L * C)
    w = weight_count(config)
    weights = (sum(w.values()) - w["wpe"] + N * C) * dtype_bytes
    kv_read = n_layer * 2 * batch * L * C * dtype_bytes
    kv_write = n_layer * 2 * N * C * dtype_bytes
    detail = {"matmul": float(matmul), "attention": float(attention), "weights": float(weights),
              "kv_read": float(kv_read), "kv_write": float(kv_write)}
    return Cost(float(matmul + attention), float(weights + kv_read + kv_write), detail)
    # END SOLUTION


@dataclass(frozen=True)
class Cost:
    """FLOPs and bytes of memory traffic of one model step. `detail` names the terms."""

    flops: float
    bytes: float
    detail: dict[str, float] = field(default_factory=dict)

    @property
    def intensity(self) -> float:
        """Arithmetic intensity: FLOPs per byte moved."""
        return self.flops / self.bytes if self.bytes else float("inf")


def weight_count(config: GPTConfig) -> dict[str, int]:
    """The model's parameters by role, from its config (tied head counted once, in wte)."""
    C, V, P, L = config.n_embd, config.vocab_size, config.block_size, config.n_layer
    per_layer = (2 * C) + (3 * C * C + 3 * C) + (C * C + C) + (2 * C) + (4 * C * C + 4 * C) + (4 * C * C + C)
    return {"wte": V * C, "wpe": P * C, "blocks": L * per_layer, "ln_f": 2 * C}
