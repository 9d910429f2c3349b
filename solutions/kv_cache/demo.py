"""Given code: `demo()`, the default model generating with the cache next to recompute."""

from __future__ import annotations

import torch

from solutions.gpt import load_default, on_one_thread

from .generation import generate


@on_one_thread
def demo(device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> None:
    """Generate from the course's default model (on `device`, in `dtype`) with the cache, next
    to the recompute baseline."""
    model, tok = load_default(device=device, dtype=dtype)
    prompts = ["def fibonacci(n):\n", "import os\n", "class Stack:\n    def push(self"]
    ids = [tok.encode(p) for p in prompts]
    n_new = 256 - max(map(len, ids))
    for cache in ("prealloc", None):
        generate(model, ids, 8, cache=cache)  # warm-up
    results = {cache: generate(model, ids, n_new, cache=cache) for cache in ("prealloc", "int8", None)}
    seeded = torch.Generator(device=device).manual_seed(0)
    sampled = generate(model, ids, 120, temperature=0.8, top_p=0.95, generator=seeded)
    for p, out in zip(prompts, sampled.tokens):
        print(f"{p + tok.decode(out)!r}")
    print(f"\n(sampled: temperature 0.8, top-p 0.95; below: greedy, {n_new} new tokens per prompt)\n")
    for cache, res in results.items():
        n = sum(map(len, res.tokens))
        same = res.tokens == results[None].tokens
        print(f"{str(cache or 'recompute'):>9}: {n} tokens in {res.seconds:.2f} s = {n / res.seconds:5.0f} tokens/s"
              f"{'  (same tokens as recompute)' if same else ''}")
    speedup = results[None].seconds / results["prealloc"].seconds
    print(f"speed-up of the preallocated cache over recompute: {speedup:.1f}x")
