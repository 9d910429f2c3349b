"""Stage 04 benchmark: what grouped-query attention saves, measured on SmolLM2-135M-Instruct.

SmolLM2's 9 query heads share 3 K/V heads (GQA), so its cache stores 3 heads a token, not 9.
This bench compares it with its multi-head twin: the same model with each K/V head's
projection rows copied to the 3 query heads that read it (`mha_twin`: 9 K/V heads, the same
function, so the same logits up to float32 rounding). Rows, each for both models:

  kv KB/token     `KVCache.bytes_per_token()`: 2 x layers x K/V heads x head_dim x 4 bytes
  kv MB @ ctx     the cache of one sequence at the model's whole context (`block_size`)
  ms/step B@P     one decode step of B sequences whose caches hold P tokens (`forward_cached`,
                  preallocated cache, median of the timed steps; the cached values are zeros:
                  the time does not depend on them, and no P-token prefill is paid)
  same tokens     whether greedy `generate` gives the same 16 tokens on a chat prompt

The two models are timed in alternation (a step of one, then of the other), medians kept, so
that a change of load falls on both. The implementation measured is `course.load("kv_cache")`:
the learner's package by default, the reference with --impl solution (or COURSE_IMPL=solution).
In smoke mode (COURSE_BENCH_SMOKE=1) a tiny random Llama (4 query heads over 2 K/V heads)
stands in for SmolLM2, at small sizes.

    python 04_kv_cache/bench_gqa.py [--impl student|solution] [--threads N] [--repeat N] [--json FILE]
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere in the repo

from course.bench_impl import add_impl_argument, apply_smoke, load_impl, run_bench  # noqa: E402
from course.benchmark import Report, bench_args  # noqa: E402

BATCHES, POSITIONS, STEPS = (1, 8), (32, 1024), 8


def mha_twin(model):
    """A copy of the Llama `model` with as many K/V heads as query heads: K/V head j's
    projection rows repeated for each query head of its group (query head h reads K/V head
    h // group, as grouped-query attention does), so that it computes the same function."""
    from solutions.train import Llama, LlamaConfig

    cfg = model.config
    group = cfg.n_heads // cfg.n_kv_heads
    twin = Llama(LlamaConfig(**{**vars(cfg), "n_kv_heads": cfg.n_heads})).to(model.model.embed_tokens.weight.dtype)
    sd = model.state_dict()
    for name, w in list(sd.items()):
        if name.endswith(("k_proj.weight", "v_proj.weight")):  # (H_kv * D, C) -> (H * D, C)
            sd[name] = w.view(cfg.n_kv_heads, cfg.head_dim, -1).repeat_interleave(group, 0).reshape(-1, w.shape[1])
    twin.load_state_dict(sd)
    return twin.eval()


def load_model(kc, smoke: bool):
    """(model, prompt ids): SmolLM2 and a chat prompt (the package's given `load_smollm2`,
    which reads it with 4.11-4.13), or a tiny random Llama in smoke mode."""
    if smoke:
        from solutions.train import random_llama

        return random_llama(vocab_size=64, n_heads=4, n_kv_heads=2, max_seq_len=128, std=0.3), [1, 5, 9, 3, 7]
    model, tok = kc.load_smollm2()
    return model, tok.encode(kc.render_chat([{"role": "user", "content": "What is the capital of France?"}]))


def step_seconds(kc, model, batch: int, position: int) -> float:
    """Seconds per decode step of `batch` rows with `position` tokens cached (zeros)."""
    cache = kc.KVCache.for_model(model, batch, max_len=position + STEPS)
    cache.lengths[:] = position
    token = torch.zeros(batch, 1, dtype=torch.long)
    t0 = time.perf_counter()
    for _ in range(STEPS):
        kc.forward_cached(model, token, cache)
    return (time.perf_counter() - t0) / STEPS


def main(argv=None) -> dict:
    args = bench_args("Stage 04: grouped-query attention against its multi-head twin", argv,
                      extra=add_impl_argument)
    smoke = apply_smoke(args)
    kc = load_impl(args, "kv_cache")
    model, prompt = load_model(kc, smoke)
    models = {"GQA (as shipped)": model, "MHA twin": mha_twin(model)}
    positions = (8, 32) if smoke else POSITIONS
    cells = [(b, p) for b in BATCHES for p in positions if p + STEPS <= model.config.block_size]
    samples: dict[tuple[str, int, int], list[float]] = {(m, b, p): [] for m in models for b, p in cells}
    with torch.no_grad():
        for r in range(args.warmup + args.repeat):
            for b, p in cells:
                for name, m in models.items():
                    t = step_seconds(kc, m, b, p)
                    if r >= args.warmup:
                        samples[name, b, p].append(t)
        tokens = {name: kc.generate(m, [prompt], 16).tokens[0] for name, m in models.items()}
    report = Report("04_kv_cache", args, "grouped-query attention (SmolLM2) against its multi-head twin")
    for name, m in models.items():
        cache = kc.KVCache.for_model(m, 1, max_len=1)
        per_token = cache.bytes_per_token()
        row = {"kv heads": m.config.n_kv_heads, "kv KB/token": per_token / 1e3,
               f"kv MB @ {m.config.block_size}": per_token * m.config.block_size / 1e6}
        for b, p in cells:
            row[f"ms/step {b}@{p}"] = 1e3 * statistics.median(samples[name, b, p])
        row["same tokens"] = tokens[name] == tokens["GQA (as shipped)"]
        report.add(name, **row)
    return report.finish()


if __name__ == "__main__":
    run_bench(main)
