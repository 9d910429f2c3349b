# GENERATED from solutions/profiling/cost.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 08_profiling/08_profiling.ipynb. Exercises in this file (line of each hole, then the commands):
#   8.5 The roofline: FLOPs, bytes, regime: line 37; `course check 8.5`, `course hint 8.5`
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
    raise NotImplementedError('Exercise 8.5: The roofline: FLOPs, bytes, regime — see 08_profiling.ipynb')


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
