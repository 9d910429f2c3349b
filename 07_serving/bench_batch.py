"""Stage 07 benchmark: how many rows a step, how many tokens a step, how many threads: the
measurements behind the server's defaults (`solutions/server/app.py`: MAX_BATCH_SIZE,
MAX_TOKENS_PER_STEP), and what a second torch thread gives the engine alone.

  sweep    the server's engine offline (stage 06's PagedEngine over continuous batching,
           the default model, KV memory of 64 contexts, ignore_eos) on two bursts, all
           requests at once: 64 requests of 64 prompt / 64 output tokens, and 100 of stage
           05's 6:3:1 mix; output tokens/s for each (max_batch_size, max_tokens_per_step),
           interleaved repeats, medians. A step's rows are bounded by the KV memory and the
           token budget; max_batch_size only caps them.
  split    the same engine with its two length splits off (PAD_TOKENS and PAD_BLOCKS set so
           high that nothing is split): what padding a short row to a long one costs.
  staging  the same engine with stage 06's decode staging off (`DecodeStaging.MIN_RUN` set so
           high that no run is served), on both bursts; and one layer's decode attention
           over 64 rows of 128 tokens (the default model's heads): the gather of every row's
           blocks, the attention on the gathered copy, and a staged call that appends one
           token a row to its copy and attends
  gemm     one `F.linear` of the default model's widest layer (192 -> 768) at M = 1, 16, 64,
           2048 rows, its weight row-major (as `nn.Linear` keeps it) and column-major
           (`gemm_layout`, what the server's engine process runs); and both bursts through
           the engine with the model one way and the other
  forward  one (1, T) forward of the default model at T = 1, 64, 128: its fixed cost and
           its cost a position (what `model_runner.PAD_TOKENS` weighs)
  threads  one decode step of 64 rows (each 128 tokens into its context) of random GPTs of
           widths 128 .. 512 (4 layers), at 1 and 2 torch threads, interleaved: what a second
           intra-op thread gives an engine alone, with a core free for it (the server leaves
           that core to HTTP instead: `engine_threads`, measured in bench_vllm.py).

    python 07_serving/bench_batch.py [--impl student|solution] [--quick] [--repeat N] [--json FILE]

--impl (default: COURSE_IMPL, else student): whose server package builds the engine
(`make_engine`, `gemm_layout`: given code of the stage package), so in a learner's release
it is the learner's; stages 04-06, which the rest measures, are given there.

Every engine here runs on one torch thread except the `threads` rows. The machine is shared:
read the ratios, which one run compares, not the absolute figures.
"""

from __future__ import annotations

import copy
import random
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from anywhere in the repo

from course.bench_impl import SMOKE, add_impl_argument, load_impl, run_bench  # noqa: E402
from course.benchmark import Report, bench_args, measure  # noqa: E402
from solutions.batching import Request, SamplingParams, model_runner  # noqa: E402
from solutions.gpt import load_default, random_gpt  # noqa: E402
from solutions.kv_cache import forward_cached  # noqa: E402
from solutions.paged import DecodeStaging, PagedKVCache, paged_attention  # noqa: E402
from solutions.tokenizer import EOT  # noqa: E402
from solutions.workload import make_trace  # noqa: E402

srv = None  # the server package measured: `load_impl` in main(), after the arguments (so --help always works)


def bursts() -> dict[str, list[tuple[list[int], int]]]:
    rng = random.Random(0)
    if SMOKE:  # COURSE_BENCH_SMOKE=1: the same two kinds of burst, a few requests of a few tokens
        return {"8 x 8/8": [([rng.randrange(32, 127) for _ in range(8)], 8) for _ in range(8)],
                "8 mix": [(list(r.prompt), r.max_new_tokens) for r in make_trace(
                    8, profile="mix", long_prompt=(16, 24), short_output=(2, 4), long_output=(4, 8))]}
    return {"64 x 64/64": [([rng.randrange(32, 127) for _ in range(64)], 64) for _ in range(64)],
            "100 mix": [(list(r.prompt), r.max_new_tokens) for r in make_trace(100, profile="mix")]}


def run_burst(model, load, rows: int, budget: int) -> float:
    """Output tokens/s of one burst through a fresh engine."""
    engine = srv.make_engine(model, max_batch_size=rows, max_tokens_per_step=budget)
    for i, (prompt, out) in enumerate(load):
        engine.add_request(Request(prompt, out, sampling=SamplingParams(ignore_eos=True), stop=[EOT],
                                   request_id=str(i)))
    tokens, start = 0, time.perf_counter()
    while engine.has_unfinished():
        tokens += len(engine.step().tokens)
    return tokens / (time.perf_counter() - start)


def sweep(model, configs, repeat: int) -> dict:
    """{(load, rows, budget): median tok/s}, every config once per repeat, interleaved."""
    loads = bursts()
    run_burst(model, next(iter(loads.values())), 16, 256)  # warm-up

    got: dict = {}
    for _ in range(repeat):
        for name, load in loads.items():
            for rows, budget in configs:
                got.setdefault((name, rows, budget), []).append(run_burst(model, load, rows, budget))
    return {k: statistics.median(v) for k, v in got.items()}


def decode_step_time(width: int, threads: int, repeat: int) -> float:
    """Median seconds of one 64-row decode step, each row 128 tokens into its context."""
    model = random_gpt(256, seed=0, std=0.02, n_layer=4, n_head=max(1, width // 64), n_embd=width)
    cache = PagedKVCache.for_model(model, 64, max_len=256)
    forward_cached(model, torch.randint(32, 127, (64, 128)), cache)
    idx = torch.randint(32, 127, (64, 1))

    def step():
        forward_cached(model, idx, cache)
        cache.lengths -= 1  # the same position again next time

    torch.set_num_threads(threads)
    try:
        return measure(step, repeat=repeat, warmup=2).median
    finally:
        torch.set_num_threads(1)


def attention_parts(model, repeat: int) -> dict[str, float]:
    """Median ms of one layer's decode attention over 64 rows of 128 cached tokens: the
    block gather alone, SDPA on its copy, the whole `paged_attention`, and a staged call
    (one new token a row appended to its copy, then attention over it)."""
    repeat = min(repeat, 100)
    start = 128 - (DecodeStaging.MIN_RUN + 3) - repeat // 2  # the staged calls walk one position a call: median 128
    cfg = model.config
    cache = PagedKVCache.for_model(model, 64, max_len=256)
    forward_cached(model, torch.randint(32, 127, (64, start)), cache)
    rows = torch.arange(64)
    cache.reserve(rows, torch.full((64,), 256))  # blocks for every position the staged calls reach
    bt, nb = cache.block_tables[rows], 128 // cache.block_size
    q = torch.randn(64, cfg.n_head, 1, cfg.head_dim)
    last = torch.full((64, 1), 127)

    def gather():
        ids = bt[:, :nb].reshape(-1)
        return (cache.k[0].index_select(0, ids).view(64, 128, cfg.n_head, cfg.head_dim),
                cache.v[0].index_select(0, ids).view(64, 128, cfg.n_head, cfg.head_dim))

    K, V = gather()
    pos = torch.full((64, 1), start - 1)

    def staged():  # the same rows one position on at every call: a decode run
        pos.add_(1)
        return cache.staging.attend(cache, 0, rows, q, pos, bt)

    for _ in range(DecodeStaging.MIN_RUN + 1):  # the run's first calls, then the one that makes the copy
        staged()
    if cache.staging.builds != 1:
        raise RuntimeError("the staged calls did not make their copy: the figure would time the fallback")
    return {"gather": measure(gather, repeat=repeat, warmup=2).median * 1e3,
            "sdpa": measure(lambda: F.scaled_dot_product_attention(q, K.transpose(1, 2), V.transpose(1, 2)),
                            repeat=repeat, warmup=2).median * 1e3,
            "paged_attention": measure(lambda: paged_attention(q, cache.k[0], cache.v[0], bt, last),
                                       repeat=repeat, warmup=2).median * 1e3,
            "staged": measure(staged, repeat=repeat, warmup=2).median * 1e3}


def linear_us(M: int, column_major: bool, repeat: int) -> float:
    """Median µs of one F.linear of M rows, 192 -> 768 (the default model's c_fc)."""
    x, w, b = torch.randn(M, 192), torch.randn(768, 192), torch.randn(768)
    if column_major:
        w = w.t().contiguous().t()
    n = max(1, (200 if SMOKE else 20_000) // M)  # calls per timed sample: each sample is about a millisecond or more
    with torch.inference_mode():
        def run():
            for _ in range(n):
                F.linear(x, w, b)
        return measure(run, repeat=repeat, warmup=2).median / n * 1e6


def forward_ms(model, T: int, repeat: int) -> float:
    """Median ms of one (1, T) forward of a fresh prompt through a paged cache."""
    def run():
        forward_cached(model, idx, PagedKVCache.for_model(model, 1, max_len=256))

    idx = torch.randint(32, 127, (1, T))
    return measure(run, repeat=repeat, warmup=2).median * 1e3


def main() -> None:
    global srv
    args = bench_args("Stage 07: rows, tokens and threads per engine step", extra=add_impl_argument)
    srv = load_impl(args, "server")
    torch.set_num_threads(1)
    rep = Report("07_serving", args, title="rows and tokens a step (offline engine, 1 thread), threads by width")
    model, _ = load_default()
    configs = ([(16, 256), (64, 1024)] if SMOKE else [(16, 256), (64, 1024), (128, 2048)] if args.quick else
               [(16, 256), (32, 256), (64, 256), (64, 1024), (128, 256), (128, 1024), (128, 2048), (128, 4096),
                (256, 2048)])
    repeat = 1 if args.quick else max(3, args.repeat // 2)
    res = sweep(model, configs, repeat)
    base = {name: res[(name, 16, 256)] for name in bursts()}
    for (name, rows, budget), tok_s in res.items():
        rep.add(f"sweep {name}: rows {rows}, budget {budget}", tok_s=round(tok_s), vs_16_256=round(tok_s / base[name], 2))

    saved = (model_runner.PAD_TOKENS, PagedKVCache.PAD_BLOCKS)
    split_on = {}
    for name, load in bursts().items():
        on, off = [], []
        for _ in range(repeat):
            on.append(run_burst(model, load, 128, 2048))
            model_runner.PAD_TOKENS, PagedKVCache.PAD_BLOCKS = 10**9, 10**9
            try:
                off.append(run_burst(model, load, 128, 2048))
            finally:
                model_runner.PAD_TOKENS, PagedKVCache.PAD_BLOCKS = saved
        split_on[name] = statistics.median(on)
        rep.add(f"split {name}: rows 128, budget 2048", tok_s=round(split_on[name]),
                unsplit_tok_s=round(statistics.median(off)),
                split_vs_unsplit=round(split_on[name] / statistics.median(off), 2))

    min_run = DecodeStaging.MIN_RUN
    for name, load in bursts().items():
        on, off = [], []
        for _ in range(repeat):
            on.append(run_burst(model, load, 128, 2048))
            DecodeStaging.MIN_RUN = 10**9
            try:
                off.append(run_burst(model, load, 128, 2048))
            finally:
                DecodeStaging.MIN_RUN = min_run
        rep.add(f"staging {name}: rows 128, budget 2048", tok_s=round(statistics.median(on)),
                unstaged_tok_s=round(statistics.median(off)),
                staged_vs_unstaged=round(statistics.median(on) / statistics.median(off), 2))
    parts = attention_parts(model, 2 if SMOKE else max(20, args.repeat))
    rounds, repeat_at_least = (1, 1) if SMOKE else (3, 5)  # smoke: COURSE_BENCH_SMOKE=1
    rep.add("staging: one layer's decode attention, 64 rows x 128 tokens",
            **{f"{k}_ms": round(v, 3) for k, v in parts.items()})

    for M in (1, 16, 64, 2048):
        row, col = [], []
        for _ in range(rounds):
            row.append(linear_us(M, False, max(repeat_at_least, args.repeat)))
            col.append(linear_us(M, True, max(repeat_at_least, args.repeat)))
        r, c = statistics.median(row), statistics.median(col)
        rep.add(f"gemm layout: F.linear 192 -> 768, {M} rows", row_major_us=round(r, 1), column_major_us=round(c, 1),
                speedup=round(r / c, 2))
    laid_out = srv.gemm_layout(copy.deepcopy(model))
    for name, load in bursts().items():
        row, col = [], []
        for _ in range(repeat):
            row.append(run_burst(model, load, 128, 2048))
            col.append(run_burst(laid_out, load, 128, 2048))
        rep.add(f"gemm layout {name}: rows 128, budget 2048", tok_s=round(statistics.median(col)),
                row_major_tok_s=round(statistics.median(row)),
                speedup=round(statistics.median(col) / statistics.median(row), 2))

    costs = {T: forward_ms(model, T, max(repeat_at_least, args.repeat)) for T in (1, 64, 128)}
    per_position = (costs[128] - costs[1]) / 127
    rep.add("forward of one row, T = 1 / 64 / 128 positions", ms=" / ".join(f"{costs[T]:.2f}" for T in costs),
            fixed_ms=round(costs[1], 2), us_per_position=round(per_position * 1e3, 1))

    for width in ([128] if args.quick else [128, 256, 512]):
        one, two = [], []
        for _ in range(rounds):

            one.append(decode_step_time(width, 1, args.repeat))
            two.append(decode_step_time(width, 2, args.repeat))
        t1, t2 = statistics.median(one), statistics.median(two)
        rep.add(f"threads: decode step, 64 rows, width {width}", one_thread_ms=round(t1 * 1e3, 2),
                two_threads_ms=round(t2 * 1e3, 2), speedup=round(t1 / t2, 2))
    rep.finish()


if __name__ == "__main__":
    run_bench(main)
