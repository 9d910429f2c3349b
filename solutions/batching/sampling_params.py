"""SamplingParams: how one request picks its tokens."""

from __future__ import annotations

from dataclasses import dataclass

from solutions.checks import check_int, is_int, is_number
from solutions.kv_cache import check_sampling


@dataclass(frozen=True)
class SamplingParams:
    """How a request picks its tokens (stage 04's `sample`): temperature 0 is greedy.
    `seed` seeds the request's own generator, so its draws do not depend on who else is
    in the batch.

    The serving ecosystem's extras, as vLLM takes them (their defaults change nothing):
    `repetition_penalty` (> 0; stage 04's `apply_repetition_penalty` over the request's
    prompt + output before each draw), `min_tokens` (its stop tokens are masked, -inf,
    until it has made that many), `ignore_eos` (its stop tokens do not end it: the
    Request keeps no stop tokens, and makes max_new_tokens tokens); `logprobs` (an int k
    >= 0: each sampled token's log-probability and its k most likely alternatives, kept in
    `Request.logprobs`) and `prompt_logprobs` (k: each prompt token's, in
    `Request.prompt_logprobs`), None for none, the raw model distribution (logprobs.py)."""

    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    repetition_penalty: float = 1.0
    min_tokens: int = 0
    ignore_eos: bool = False
    logprobs: int | None = None
    prompt_logprobs: int | None = None

    def __post_init__(self) -> None:
        check_sampling(self.temperature, self.top_k, self.top_p)
        if self.seed is not None and not is_int(self.seed):
            raise ValueError(f"seed must be None or an int, got {self.seed!r}")
        if not is_number(self.repetition_penalty) or self.repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty must be a finite number > 0 (1 = off), "
                             f"got {self.repetition_penalty!r}")
        check_int("min_tokens", self.min_tokens, 0)
        if not isinstance(self.ignore_eos, bool):
            raise ValueError(f"ignore_eos must be a bool, got {self.ignore_eos!r}")
        for name in ("logprobs", "prompt_logprobs"):
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name), 0)

    @property
    def shapes_logits(self) -> bool:
        """Whether the logits need more than the draw: a penalty or a min_tokens mask."""
        return self.repetition_penalty != 1 or self.min_tokens > 0
