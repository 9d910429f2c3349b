"""Stage 05 benchmark: static, dynamic and continuous batching (and chunked prefill) on
the same seeded traces, in one run, on the real model and the real clock.

Three scenarios:

  longtail   128 requests at once (an offline job), short prompts, Pareto-tailed answers
             (most are short, a few run to 200 tokens). Default model, batch 16.
  online     96 requests of the 6:3:1 mix (short/short, short/long, long/short) arriving
             as a Poisson process at 30/s. Default model, batch 16.
  long-prompt  8 requests decode 200 tokens each while four 512-token prompts arrive
             among them (at 0.05, 0.15, 0.25 and 0.35 s). The default model's context is 256, so this one uses a
             RANDOM-INIT model of the same width and depth with block_size=640 (the time
             per step does not depend on what the weights are). Batch 12.

Policies: static (fixed-shape: finished rows are still computed until the batch ends, as
stage 04's generate does), static with finished rows skipped, dynamic (20 ms window),
continuous, and continuous with chunked prefill (token budget per step). Every number is
the median over --repeat runs (policies interleaved); throughput = output tokens / (first
arrival -> last finish). Ratios are against the fixed-shape static baseline, and, for
the chunked runs, against continuous without chunking.

--clock wall (default): the engine's clock is time.monotonic, as a server's would be.
--clock process: time.process_time, this process's CPU time, and idle waits spin instead
of sleeping: on a machine shared with other jobs, time they steal is not counted. Only
meaningful with --threads 1 (CPU time adds up over threads).

    python 05_batching/bench.py [--impl student|solution] [--quick] [--threads N] [--repeat N]
                                [--clock wall|process] [--json FILE] [--plot FILE] [--device cpu|cuda]
                                [--dtype float32|float16|bfloat16]

--impl (default: COURSE_IMPL, else student): whose batching package runs every policy, the
static baseline included (all of them are exercises or given code of the stage package), so
in a learner's release every row measures the learner's code.

--device / --dtype (solutions/device.py): both models on that device in that dtype (the
KV caches follow the model); --clock process is for the CPU only.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere in the repo

from course.bench_impl import SMOKE, add_impl_argument, load_impl, run_bench  # noqa: E402
from course.benchmark import Report, bench_args  # noqa: E402
from solutions.device import add_device_arguments, device_or_exit, dtype_name  # noqa: E402
from solutions.gpt import GPT, GPTConfig  # noqa: E402

b = None  # the package measured: `load_impl` in main(), after the arguments (so --help always works)
KEYS = ("tokens_per_s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "itl_p50_ms", "itl_p99_ms",
        "occupancy")


def spin(seconds: float) -> None:
    """Wait by burning CPU, so that time.process_time advances while we wait."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


CLOCKS = {"wall": dict(clock=time.monotonic, sleep=time.sleep), "process": dict(clock=time.process_time, sleep=spin)}


def run_policies(model: GPT, trace, policies: dict, repeat: int, clock: str) -> dict[str, dict[str, float]]:
    """{policy: median summary} over `repeat` interleaved runs (fresh scheduler each run)."""
    runs: dict[str, list[dict]] = {name: [] for name in policies}
    for _ in range(repeat):
        for name, make in policies.items():
            runs[name].append(b.serve(model, trace, make(), **CLOCKS[clock]).summary())
    return {name: {k: statistics.median(s[k] for s in ss) for k in ss[0]} for name, ss in runs.items()}


def warm_up(model: GPT, n: int) -> None:
    for _ in range(n):
        b.serve(model, b.make_trace(8, seed=99, short_output=(2, 8), long_output=(8, 16)),
                b.ContinuousBatching(4, max_tokens_per_step=16))


def main() -> None:
    global b
    args = bench_args("Stage 05: static vs dynamic vs continuous batching", extra=lambda p: (p.add_argument(
        "--clock", choices=sorted(CLOCKS), default="wall", help="wall: time.monotonic; process: CPU time"),
        add_device_arguments(p), add_impl_argument(p)))
    device, dtype = device_or_exit(args)
    if args.clock == "process" and args.threads != 1:
        raise SystemExit("--clock process measures CPU time, which adds up over threads: use it with --threads 1")
    if args.clock == "process" and device.type != "cpu":
        raise SystemExit("error: --clock process measures this process's CPU time, not a GPU's: use --clock wall")
    b = load_impl(args, "batching")
    torch.manual_seed(0)
    model, what = b.default_model(device, dtype)
    what += f" ({device}, {dtype_name(dtype)})"
    q = args.quick
    if q:
        args.repeat = min(args.repeat, 2)
    rep = Report("05_batching", args, f"batching policies on seeded traces (medians; times in ms, {args.clock} clock)")
    print(f"model: {what}; torch threads {torch.get_num_threads()}; repeat {args.repeat}; clock {args.clock}",
          flush=True)
    warm_up(model, max(1, args.warmup))
    batch = 16
    request_level = {
        "static": lambda: b.StaticBatching(batch),
        "static, finished rows skipped": lambda: b.StaticBatching(batch, fixed_shape=False),
        "dynamic 20 ms": lambda: b.DynamicBatching(batch, max_wait_ms=20),
        "continuous": lambda: b.ContinuousBatching(batch),
        "continuous + chunked 64": lambda: b.ContinuousBatching(batch, max_tokens_per_step=64),
    }
    # smoke (COURSE_BENCH_SMOKE=1): a few requests of a few tokens, every policy and trace still
    tiny = dict(short_prompt=(4, 8), long_prompt=(16, 24), short_output=(2, 4), long_output=(4, 8)) if SMOKE else {}
    traces = {
        "longtail": b.make_trace(6 if SMOKE else 32 if q else 128, profile="longtail", seed=0,
                                 **{"short_output": (8, 16), "long_output": (32, 200), **tiny}, tail_alpha=1.0),
        "online": b.make_trace(6 if SMOKE else 16 if q else 96, profile="mix", rate=30.0, seed=1, **tiny),
    }
    results: dict[str, dict] = {}
    for tname, trace in traces.items():
        print(f"{tname}: {trace.describe()}", flush=True)
        policies = {k: v for k, v in request_level.items() if not (tname == "longtail" and k.startswith("dynamic"))}
        res = run_policies(model, trace, policies, args.repeat, args.clock)
        base = res["static"]["tokens_per_s"]
        for name, s in res.items():
            rep.add(f"{tname}: {name}", **{k: round(s[k], 3) for k in KEYS},
                    **{"x static": round(s["tokens_per_s"] / base, 2)})
        results[tname] = res

    # chunked prefill: 512-token prompts arriving among running decodes
    torch.manual_seed(0)
    wide = GPT(GPTConfig(block_size=640)).to(device=device, dtype=dtype).eval()
    warm_up(wide, max(1, args.warmup))
    trace = (b.long_prompt_trace(n_decodes=2, decode_len=8, n_long=1, long_len=96, first=0.01, every=0.1) if SMOKE
             else b.long_prompt_trace(n_decodes=4 if q else 8, decode_len=200, n_long=3 if q else 4,
                                      long_len=512, first=0.05, every=0.1))
    print(f"long-prompt (random-init, block_size 640): {trace.describe()}", flush=True)
    budgets = (64,) if q else (32, 64, 128)
    policies = {"continuous": lambda: b.ContinuousBatching(12)}
    for budget in budgets:
        policies[f"continuous + chunked {budget}"] = (lambda n=budget: lambda: b.ContinuousBatching(12, max_tokens_per_step=n))()
    res = run_policies(wide, trace, policies, args.repeat, args.clock)
    base = res["continuous"]
    for name, s in res.items():
        rep.add(f"long-prompt: {name}", **{k: round(s[k], 3) for k in KEYS},
                **{"p99 ITL cut": round(base["itl_p99_ms"] / s["itl_p99_ms"], 2),
                   "x continuous": round(s["tokens_per_s"] / base["tokens_per_s"], 2)})
    results["long-prompt"] = res
    rep.finish(plot=lambda plt: plot(plt, results))

    lt, lp = results["longtail"], results["long-prompt"]
    print(f"\ncontinuous / static throughput, longtail: {lt['continuous']['tokens_per_s'] / lt['static']['tokens_per_s']:.2f}x "
          f"(aim >= 1.8x); vs static with finished rows skipped: "
          f"{lt['continuous']['tokens_per_s'] / lt['static, finished rows skipped']['tokens_per_s']:.2f}x")
    for budget in budgets:
        s = lp[f"continuous + chunked {budget}"]
        print(f"chunked {budget}: p99 inter-token latency cut {lp['continuous']['itl_p99_ms'] / s['itl_p99_ms']:.2f}x "
              f"(aim >= 2.5x), throughput {s['tokens_per_s'] / lp['continuous']['tokens_per_s']:.2f}x of continuous "
              f"(aim >= 0.85x)")


def plot(plt, results: dict):
    """The figure of `--plot` (saved by `Report.plot`): throughput and p99 latency per scheduler."""
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    for ax, (tname, res) in zip(axes, results.items()):
        names = list(res)
        ax.barh(names, [res[n]["tokens_per_s"] for n in names], color="tab:blue")
        ax.set_xlabel("output tokens / s")
        ax2 = ax.twiny()
        ax2.plot([res[n]["itl_p99_ms"] for n in names], names, "o", color="tab:red")
        ax2.set_xlabel("p99 inter-token latency, ms (red)")
        ax2.set_xlim(left=0)
        ax.set_title(tname)
    fig.tight_layout()
    return fig


if __name__ == "__main__":
    run_bench(main)
