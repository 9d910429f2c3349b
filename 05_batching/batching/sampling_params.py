# GENERATED from solutions/batching/sampling_params.py by `course stubs --write`.
# Nothing to write here: given code of stage 05 (05_batching/05_batching.ipynb).
"""SamplingParams: how one request picks its tokens."""

from __future__ import annotations

from dataclasses import dataclass

from solutions.checks import is_int
from solutions.kv_cache import check_sampling


@dataclass(frozen=True)
class SamplingParams:
    """How a request picks its tokens (stage 04's `sample`): temperature 0 is greedy.
    `seed` seeds the request's own generator, so its draws do not depend on who else is
    in the batch."""

    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        check_sampling(self.temperature, self.top_k, self.top_p)
        if self.seed is not None and not is_int(self.seed):
            raise ValueError(f"seed must be None or an int, got {self.seed!r}")
