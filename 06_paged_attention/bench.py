"""Stage 06 benchmark: paged KV memory against stage 05's contiguous cache, in one run.

Four parts (ratios within one run; the machine is shared and noisy):

  memory      At ONE KV memory budget (8 rows x 256 positions = 2048 tokens, the default
              model's context), stage 05's contiguous cache (one max_len row per running
              request: max-length reservation) against PagedEngine (the same 2048 tokens as
              blocks, up to 64 rows per step), on stage 05's traces: the long-tail trace
              (128 requests at once) and the online 6:3:1 mix (96 requests, Poisson 30/s).
              Share of allocated KV slots holding real tokens (averaged over steps; for the
              contiguous cache the reserved rows of the running requests), peak running
              requests, output tokens/s. Block sizes 4 / 8 / 16 / 32 for the utilisation.
  decode      One decode step of the default model with B rows of 128 cached
              tokens, B = 1 / 8 / 32: the contiguous KVCache (attention reads a view, no
              copy), the paged cache through `attend` (paged_attention: gathers whole blocks)
              and through `view` (a dense gather token by token, what `forward_cached` does
              without `attend`).
  prefix      24 requests = one shared 128-token prefix + a 8-24-token question, 16 new
              tokens each, Poisson 20/s: prefill tokens computed and TTFT, paged with and
              without prefix caching (and stage 05's engine).
  gpu         Only where CUDA is available: the Triton decode kernels (6.5's textbook one and
              6.9's split-K one) against paged_attention and against
              scaled_dot_product_attention on contiguous K/V (fp16, 32 heads of 128, block
              size 16, B = 1 / 8 / 32 / 128 rows of L = 512 / 2048 tokens), medians of
              CUDA-synchronised timings, GB/s of K + V read, ratios to SDPA.

Every engine here is checked to give every request the same tokens as stage 05's.

    python 06_paged_attention/bench.py [--impl student|solution] [--quick] [--threads N] [--repeat N]
                         [--parts memory,decode,prefix,gpu] [--json FILE] [--plot FILE]
                         [--device cpu|cuda] [--dtype float32|float16|bfloat16]

--impl (default: COURSE_IMPL, else student): whose paged package is measured; every part
runs on the learner's package (stage 05's engine, the baseline, is given in a release).

--device / --dtype (solutions/device.py) put the default model of the memory, decode and
prefix parts on that device in that dtype (the KV pools follow it); the gpu part always
runs on CUDA in fp16.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere in the repo

import course  # noqa: E402
from course.bench_impl import SMOKE, add_impl_argument, load_impl, run_bench  # noqa: E402
from course.benchmark import Report, bench_args, fmt_seconds, measure  # noqa: E402
from solutions.batching import ContinuousBatching, Engine, default_model, replay  # noqa: E402
from solutions.device import add_device_arguments, device_or_exit, dtype_name  # noqa: E402
from solutions.kv_cache import KVCache, forward_cached  # noqa: E402
from solutions.tokenizer import ByteTokenizer  # noqa: E402
from solutions.workload import Trace, TraceRequest, make_trace  # noqa: E402

p = None  # the package measured: `load_impl` in main() (after the arguments, so --help always works),
# or `course.load("paged")` of the current impl in speed_check()
BUDGET_ROWS, MAX_LEN = 8, 256
PARTS = ("memory", "decode", "prefix", "gpu")

# `course check 6.4` (and `course check 06`) calls `speed_check()` once 6.4's tests pass.
SPEED_CHECKED = "6.4"
REFERENCE_DECODE_RATIO = 1.15  # the reference's paged `attend` / contiguous decode step, batch 8 (README.md)
SLOW_DECODE_RATIO = 1.6        # above this, the learner's step is slower than it needs to be


def decode_step_ratio(model=None, batch: int = 8, cached: int = 128, rounds: int = 9, steps: int = 6) -> float:
    """The bench's decode case, small: one decode step of the default model over `batch`
    rows of `cached` tokens on the paged cache (its `attend`: `paged_attention`, block 16)
    divided by the same step on the contiguous KVCache; the median over `rounds`
    interleaved rounds of `steps` steps each (so a change of load falls on both alike).
    Runs on the calling thread's torch settings (speed_check uses one thread)."""
    if model is None:
        model, _ = default_model()
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, 256, (batch, cached), generator=g)
    tok = torch.randint(0, 256, (batch, 1), generator=g)
    caches = [KVCache.for_model(model, batch, max_len=MAX_LEN),
              p.PagedKVCache.for_model(model, batch, max_len=MAX_LEN, block_size=16)]
    with torch.inference_mode():
        for cache in caches:
            forward_cached(model, prompt, cache)

        def run(cache) -> float:
            t0 = time.perf_counter()
            for _ in range(steps):
                forward_cached(model, tok, cache)
                cache.lengths -= 1  # the same step again (its block stays allocated)
            return time.perf_counter() - t0

        for cache in caches:  # warm-up
            run(cache)
        ratios = []
        for _ in range(rounds):
            contiguous, paged = run(caches[0]), run(caches[1])
            ratios.append(paged / contiguous)
    return statistics.median(ratios)


def speed_check() -> str | None:
    """A quick, honest look at 6.4's speed (about a second; one torch thread): the paged
    decode step against the contiguous one, the bench's batch-8 case. A line when it is
    more than SLOW_DECODE_RATIO x the contiguous step (measured twice before saying so, the
    machine may be busy), else None. Correctness is the tests' business, not this."""
    global p
    if p is None:
        p = course.load("paged")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model, _ = default_model()
        ratio = decode_step_ratio(model)
        if ratio > SLOW_DECODE_RATIO:
            ratio = min(ratio, decode_step_ratio(model))
    finally:
        torch.set_num_threads(threads)
    if ratio <= SLOW_DECODE_RATIO:
        return None
    return (f"6.4 is correct but your paged decode step is {ratio:.1f}x the contiguous one (the reference's is "
            f"about {REFERENCE_DECODE_RATIO:.2f}x): see bench.py (`python 06_paged_attention/bench.py --parts decode`)")


class Watch:
    """Per-step memory statistics of an engine (wraps its `step`)."""

    def __init__(self, engine):
        self.engine, self.filled, self.slots, self.peak = engine, 0, 0, 0
        inner = engine.step

        def step():
            out = inner()
            if out.ran:
                self.sample()
            return out

        engine.step = step

    def sample(self) -> None:
        e = self.engine
        if isinstance(e, p.PagedEngine):
            filled, slots = e.cache.slot_usage()
        else:  # max-length reservation: every running request holds a whole row
            filled, slots = int(e.cache.lengths.sum()), len(e.scheduler.running) * e.max_len
        self.filled += filled
        self.slots += slots
        self.peak = max(self.peak, len(e.scheduler.running))

    @property
    def utilisation(self) -> float:
        return self.filled / self.slots if self.slots else float("nan")


def run_engine(make, trace) -> tuple[dict, list]:
    engine = make()
    watch = Watch(engine)
    res = replay(engine, trace)
    s = res.summary()
    s.update(utilisation=watch.utilisation, peak_running=watch.peak,
             preemptions=getattr(engine, "num_preemptions", sum(r.preemptions for r in res.requests)),
             prefill_tokens=sum(st.prefill_tokens for st in engine.steps))
    return s, [r.output for r in res.requests]


def medians(runs: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def part_memory(model, rep: Report, args) -> dict:
    """Paged vs contiguous at one memory budget on stage 05's traces."""
    q = args.quick
    # smoke (COURSE_BENCH_SMOKE=1): a few requests of a few tokens, both traces still
    tiny = dict(short_prompt=(4, 8), long_prompt=(16, 24), short_output=(2, 4), long_output=(4, 8)) if SMOKE else {}
    traces = {
        "longtail": make_trace(6 if SMOKE else 32 if q else 128, profile="longtail", seed=0,
                               **{"short_output": (8, 16), "long_output": (32, 200), **tiny}, tail_alpha=1.0),
        "mix": make_trace(6 if SMOKE else 24 if q else 96, profile="mix", rate=30.0, seed=1, **tiny),
    }
    budget = BUDGET_ROWS * MAX_LEN
    out = {}
    for tname, trace in traces.items():
        print(f"memory / {tname}: {trace.describe()}", flush=True)
        engines = {"contiguous (8 rows x 256)": lambda: Engine(model, ContinuousBatching(BUDGET_ROWS))}
        for bs in ((16,) if q else (4, 8, 16, 32)):
            engines[f"paged, block {bs}"] = (lambda bs=bs: lambda: p.PagedEngine(
                model, ContinuousBatching(64), block_size=bs, num_blocks=budget // bs))()
        runs = {name: [] for name in engines}
        outputs = {}
        for _ in range(args.repeat):
            for name, make in engines.items():
                s, outs = run_engine(make, trace)
                runs[name].append(s)
                outputs[name] = outs
        base_out = outputs["contiguous (8 rows x 256)"]
        res = {name: medians(r) for name, r in runs.items()}
        base = res["contiguous (8 rows x 256)"]
        for name, s in res.items():
            rep.add(f"memory {tname}: {name}", real_tokens_share=round(s["utilisation"], 3),
                    peak_running=int(s["peak_running"]), x_peak=round(s["peak_running"] / base["peak_running"], 2),
                    tokens_per_s=round(s["tokens_per_s"], 1), x_throughput=round(s["tokens_per_s"] / base["tokens_per_s"], 2),
                    preemptions=int(s["preemptions"]), same_tokens=outputs[name] == base_out)
        out[tname] = res
    return out


def part_decode(model, rep: Report, args) -> dict:
    L = 32 if SMOKE else 128  # smoke: COURSE_BENCH_SMOKE=1
    out = {}
    torch.manual_seed(0)

    class ViewOnly(p.PagedKVCache):
        attend = None

    device = model.transformer.wte.weight.device
    for B in (1, 8, 32):
        prompt = torch.randint(0, 256, (B, L)).to(device)
        caches = {"contiguous": KVCache.for_model(model, B, max_len=MAX_LEN),
                  "paged attend": p.PagedKVCache.for_model(model, B, max_len=MAX_LEN, block_size=16),
                  "paged view (dense gather)": ViewOnly.for_model(model, B, max_len=MAX_LEN, block_size=16)}
        tok = torch.randint(0, 256, (B, 1)).to(device)
        logits = {}
        for cache in caches.values():
            forward_cached(model, prompt, cache)

        def step(cache):
            y = forward_cached(model, tok, cache)
            cache.lengths -= 1  # the same step again next time (its block stays allocated)
            if device.type == "cuda":
                torch.cuda.synchronize(device)  # the time of the work, not of queueing it
            return y

        times = {name: [] for name in caches}
        for name, cache in caches.items():
            logits[name] = step(cache)
            for _ in range(args.warmup):
                step(cache)
        for _ in range(args.repeat):  # interleaved, so load changes fall on all alike
            for name, cache in caches.items():
                times[name].append(measure(lambda c=cache: step(c), repeat=1, warmup=0,
                                           number=2 if SMOKE else 20).median)
        med = {name: statistics.median(t) for name, t in times.items()}
        for name in caches:
            err = float((logits[name] - logits["contiguous"]).abs().max())
            rep.add(f"decode step, batch {B}, {L} cached: {name}", time=fmt_seconds(med[name]),
                    x_contiguous=round(med[name] / med["contiguous"], 2), max_logit_diff=f"{err:.1e}")
        out[B] = med
    return out


def prefix_trace(n: int, seed: int = 0) -> Trace:
    tok = ByteTokenizer()
    text = tok.encode(Path(statistics.__file__).read_text(encoding="utf-8"))
    g = torch.Generator().manual_seed(seed)
    shared = tuple(text[1000:1128])
    reqs, t = [], 0.0
    for i in range(n):
        start = int(torch.randint(2000, len(text) - 100, (1,), generator=g))
        k = int(torch.randint(8, 25, (1,), generator=g))
        reqs.append(TraceRequest(t, shared + tuple(text[start:start + k]), 16, "shared prefix"))
        t += float(torch.empty(1).exponential_(20.0, generator=g))
    return Trace(tuple(reqs), f"{n} requests sharing a 128-token prefix, Poisson 20/s")


def part_prefix(model, rep: Report, args) -> dict:
    trace = prefix_trace(4 if SMOKE else 12 if args.quick else 24)
    print(f"prefix: {trace.describe()}", flush=True)
    engines = {
        "stage 05 contiguous": lambda: Engine(model, ContinuousBatching(8)),
        "paged, no prefix cache": lambda: p.PagedEngine(model, ContinuousBatching(8), enable_prefix_caching=False),
        "paged + prefix cache": lambda: p.PagedEngine(model, ContinuousBatching(8)),
    }
    runs = {name: [] for name in engines}
    outputs = {}
    for _ in range(args.repeat):
        for name, make in engines.items():
            s, outputs[name] = run_engine(make, trace)
            runs[name].append(s)
    res = {name: medians(r) for name, r in runs.items()}
    base = res["paged, no prefix cache"]
    for name, s in res.items():
        rep.add(f"prefix: {name}", prefill_tokens=int(s["prefill_tokens"]),
                fewer_prefill=f"{1 - s['prefill_tokens'] / base['prefill_tokens']:.0%}",
                ttft_p50_ms=round(s["ttft_p50_ms"], 1), ttft_p99_ms=round(s["ttft_p99_ms"], 1),
                x_ttft_p50=round(s["ttft_p50_ms"] / base["ttft_p50_ms"], 2), tokens_per_s=round(s["tokens_per_s"], 1),
                same_tokens=outputs[name] == outputs["stage 05 contiguous"])
    return res


def part_gpu(rep: Report, args) -> dict:
    import torch.nn.functional as F

    if not torch.cuda.is_available():
        print("gpu: no CUDA device here; the GPU part (6.5's kernel, 6.9's split kernel, paged_attention, SDPA) "
              "is skipped", flush=True)
        return {}
    dev, dt, H, D, bs = "cuda", torch.float16, 32, 128, 16
    out = {}
    name = torch.cuda.get_device_name()
    kernels = {"triton paged decode": p.paged_decode_triton, "triton split-K decode (6.9)": p.paged_decode_split}
    for kname, kernel in list(kernels.items()):  # the learner's package may not have them yet
        try:
            one = torch.zeros(1, bs, H, D, device=dev, dtype=dt)
            kernel(torch.zeros(1, H, 1, D, device=dev, dtype=dt), one, one, torch.zeros(1, 1, dtype=torch.long,
                   device=dev), torch.zeros(1, 1, dtype=torch.long, device=dev))
        except NotImplementedError as e:
            print(f"gpu: {kname} skipped ({e})", flush=True)
            del kernels[kname]
    for L in (512, 2048):
        for B in (1, 8, 32, 128):
            nb = B * L // bs
            k_pool = torch.randn(nb + 1, bs, H, D, device=dev, dtype=dt)
            v_pool = torch.randn_like(k_pool)
            tables = torch.randperm(nb, device=dev)[:nb].view(B, L // bs)
            q = torch.randn(B, H, 1, D, device=dev, dtype=dt)
            q_pos = torch.full((B, 1), L - 1, device=dev)
            K = k_pool[tables].view(B, L, H, D).transpose(1, 2).contiguous()
            V = v_pool[tables].view(B, L, H, D).transpose(1, 2).contiguous()
            fns = {kname: (lambda kernel=kernel: kernel(q, k_pool, v_pool, tables, q_pos))
                   for kname, kernel in kernels.items()}
            fns["paged_attention (PyTorch)"] = lambda: p.paged_attention(q, k_pool, v_pool, tables, q_pos)
            fns["sdpa, contiguous K/V"] = lambda: F.scaled_dot_product_attention(q, K, V)
            ref = fns["sdpa, contiguous K/V"]().float()
            med = {}
            for fname, fn in fns.items():
                err = float((fn().float() - ref).abs().max())

                def timed(fn=fn):
                    fn()
                    torch.cuda.synchronize()

                med[fname] = measure(timed, repeat=args.repeat, warmup=max(2, args.warmup), number=20).median
                kv_bytes = 2 * B * L * H * D * 2
                rep.add(f"gpu {name}: B={B}, L={L}: {fname}", time=fmt_seconds(med[fname]),
                        GB_per_s=round(kv_bytes / med[fname] / 1e9, 1), max_abs_diff=f"{err:.1e}")
            for fname in fns:
                rep.rows[-len(fns) + list(fns).index(fname)]["x_sdpa"] = round(med[fname] / med["sdpa, contiguous K/V"], 2)
            out[(B, L)] = med
            del k_pool, v_pool, K, V
    split = "triton split-K decode (6.9)"
    if split in kernels:  # issue 19's aim: <= 1.25x SDPA at every (B, L), <= 1.5x at B = 1, L = 2048
        ratios = {bl: med[split] / med["sdpa, contiguous K/V"] for bl, med in out.items()}
        worst = max(ratios, key=ratios.get)
        print(f"split-K kernel / SDPA on contiguous K/V: {min(ratios.values()):.2f}x to {ratios[worst]:.2f}x "
              f"(worst at B={worst[0]}, L={worst[1]}); aim <= 1.25x everywhere: "
              f"{'met' if ratios[worst] <= 1.25 else 'NOT met'}; at B=1, L=2048 {ratios[(1, 2048)]:.2f}x (aim <= 1.5x)")
    return {f"{b}x{l}": v for (b, l), v in out.items()}


def main() -> None:
    global p
    args = bench_args("Stage 06: paged vs contiguous KV memory", extra=lambda a: (a.add_argument(
        "--parts", default=",".join(PARTS), help=f"comma-separated subset of {','.join(PARTS)}"),
        add_device_arguments(a), add_impl_argument(a)))
    device, dtype = device_or_exit(args)
    parts = [x.strip() for x in args.parts.split(",") if x.strip()]
    bad = [x for x in parts if x not in PARTS]
    if bad or not parts:
        print(f"error: --parts must name some of {', '.join(PARTS)}, got {args.parts!r}", file=sys.stderr)
        raise SystemExit(2)
    p = load_impl(args, "paged")
    if args.quick:
        args.repeat = min(args.repeat, 2)
    reps = {part: Report("06_paged_attention") for part in parts}
    results: dict = {}
    if any(x in parts for x in ("memory", "decode", "prefix")):
        model, what = default_model(device, dtype)
        print(f"model: {what} ({device}, {dtype_name(dtype)}); torch threads {torch.get_num_threads()}; "
              f"repeat {args.repeat}", flush=True)
        t0 = time.perf_counter()
        if "memory" in parts:
            results["memory"] = part_memory(model, reps["memory"], args)
        if "decode" in parts:
            results["decode"] = part_decode(model, reps["decode"], args)
        if "prefix" in parts:
            results["prefix"] = part_prefix(model, reps["prefix"], args)
        print(f"(CPU parts took {time.perf_counter() - t0:.0f} s)")
    if "gpu" in parts:
        results["gpu"] = part_gpu(reps["gpu"], args)
    finish(reps, args)
    summary(results)
    if args.plot and "memory" in results:
        plot(results["memory"], args.plot)
        print(f"wrote {args.plot}")


def finish(reps: dict[str, Report], args) -> None:
    """One table per part (their columns differ), one JSON file for all."""
    env = Report("06_paged_attention").environment()
    print(f"\n06_paged_attention: paged vs contiguous KV memory (medians of {args.repeat})")
    print(f"python {env['python']}, torch {env.get('torch', '-')}, threads {env.get('torch_threads', '-')}, "
          f"{env['cpus']} cpus; command: {env['argv']}")
    for part, rep in reps.items():
        if rep.rows:
            print(f"\n[{part}]\n{rep.table()}")
    if args.json:
        import json

        tmp = f"{args.json}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"stage": "06_paged_attention", "environment": env,
                       "parts": {part: rep.rows for part, rep in reps.items()}}, f, indent=1)
        os.replace(tmp, args.json)
        print(f"\nwrote {args.json}")


def summary(results: dict) -> None:
    print()
    if "memory" in results:
        mix, lt = results["memory"]["mix"], results["memory"]["longtail"]
        for bs in (4, 8, 16, 32):
            key = f"paged, block {bs}"
            if key in mix:
                print(f"block {bs:2d}: real-token share of allocated slots on the 6:3:1 mix {mix[key]['utilisation']:.1%} "
                      f"(contiguous {mix['contiguous (8 rows x 256)']['utilisation']:.1%}; aim >= 90%); peak running "
                      f"on the long tail {lt[key]['peak_running'] / lt['contiguous (8 rows x 256)']['peak_running']:.1f}x "
                      f"contiguous (aim >= 3.5x), throughput {lt[key]['tokens_per_s'] / lt['contiguous (8 rows x 256)']['tokens_per_s']:.2f}x")
    if "decode" in results and 8 in results["decode"]:
        d = results["decode"][8]
        print(f"decode step at batch 8: paged attend {d['paged attend'] / d['contiguous']:.2f}x contiguous "
              f"(aim <= 1.5x); paged through a dense view {d['paged view (dense gather)'] / d['contiguous']:.2f}x")
    if "prefix" in results:
        r = results["prefix"]
        cut = 1 - r["paged + prefix cache"]["prefill_tokens"] / r["paged, no prefix cache"]["prefill_tokens"]
        print(f"shared 128-token prefix: {cut:.0%} fewer prefill tokens (aim >= 70%), TTFT p50 "
              f"{r['paged + prefix cache']['ttft_p50_ms']:.1f} ms vs {r['paged, no prefix cache']['ttft_p50_ms']:.1f} ms")


def plot(memory: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    for ax, (tname, res) in zip(axes, memory.items()):
        names = list(res)
        ax.barh(names, [100 * res[n]["utilisation"] for n in names], color="tab:blue")
        ax.set_xlabel("% of allocated KV slots holding real tokens")
        ax.set_xlim(0, 100)
        ax.set_title(f"{tname} (peak running in red)")
        ax2 = ax.twiny()
        ax2.plot([res[n]["peak_running"] for n in names], names, "o", color="tab:red")
        ax2.set_xlabel("peak running requests")
    fig.tight_layout()
    tmp = f"{path}.tmp.png"
    fig.savefig(tmp, dpi=120)
    os.replace(tmp, path)


if __name__ == "__main__":
    run_bench(main)
