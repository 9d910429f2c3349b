# GENERATED from solutions/kv_cache/options.py by `course stubs --write`.
# Nothing to write here: given code of stage 04 (04_kv_cache/04_kv_cache.ipynb).
"""Given code: what `generate` accepts and returns — the cache names, its argument checks, its result."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from solutions.checks import check_int, is_int

from .concat_cache import ConcatKVCache
from .decoder import check_decoder
from .int8_cache import QuantizedKVCache
from .prealloc_cache import KVCache
from .sampling import check_sampling

CACHES = {"prealloc": KVCache, "concat": ConcatKVCache, "int8": QuantizedKVCache}


@dataclass
class GenerationResult:
    """tokens[i]: the new tokens of prompt i, Python ints (the stop token, if one ended it, not
    included); finish_reasons[i]: "stop" (a stop token came) or "length" (max_new_tokens reached)."""

    tokens: list[list[int]]
    finish_reasons: list[str]
    seconds: float = field(default=0.0, compare=False)  # wall time of the whole call


def check_generate(model, prompts, max_new_tokens, stop, cache, temperature, top_k, top_p) -> list[int]:
    """Validate generate's arguments (TypeError for a model that is not a course decoder, a
    GPT or a Llama; ValueError naming the argument otherwise); return the stop ids as ints."""
    check_decoder(model)
    if not isinstance(prompts, (list, tuple)) or not prompts:
        raise ValueError(f"prompts must be a non-empty list of token-id lists, got {prompts!r:.80}")
    vocab, context = model.config.vocab_size, model.config.block_size
    check_int("max_new_tokens", max_new_tokens, 0)
    for i, p in enumerate(prompts):
        if not isinstance(p, (list, tuple)) or not p:
            raise ValueError(f"prompt {i} must be a non-empty list of token ids, got {p!r:.80}")
        if not all(is_int(t) and 0 <= t < vocab for t in p):
            raise ValueError(f"prompt {i} holds ids outside 0..{vocab - 1} or non-ints: {list(p)!r:.80}")
        if len(p) + max_new_tokens > context:
            raise ValueError(f"prompt {i} has {len(p)} tokens; with max_new_tokens={max_new_tokens} it "
                             f"would exceed the model's context of {context}")
    if cache is not None and cache not in CACHES:
        raise ValueError(f"cache must be one of {sorted(CACHES)} or None (recompute), got {cache!r}")
    if stop is not None and not is_int(stop) and not isinstance(stop, Iterable):
        raise ValueError(f"stop must be None, a token id or a list of token ids in 0..{vocab - 1}, got {stop!r}")
    stop_ids = [] if stop is None else [stop] if is_int(stop) else list(stop)
    if not all(is_int(s) and 0 <= s < vocab for s in stop_ids):
        raise ValueError(f"stop must be None, a token id or a list of token ids in 0..{vocab - 1}, got {stop!r}")
    check_sampling(temperature, top_k, top_p)
    return [int(s) for s in stop_ids]
