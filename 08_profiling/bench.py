"""Stage 08 benchmark: what profiling costs, and the knee of the throughput curve, in one run.

1. The profiler's own overhead, on the default model's engine (batch 8, continuous
   batching, decoding), by this process's CPU time (time.process_time: what other jobs on a
   shared machine steal is not counted; meaningful with --threads 1):
     a. the fixed price of one profiled window with the schedule the report uses
        (wait=1, warmup=1, active=3, repeat=1): 5 steps run inside the profiler minus the
        same 5 steps without it, back to back on one engine, median of 30 pairs (6 with
        --quick); and what that price is as a share of runs of 100 … 10000 steps;
     b. directly: N = 1000 steps (300 with --quick) with and without the profiler around
        the whole run, median of --repeat interleaved runs, the order alternating (wall
        clock beside: on a busy machine only the CPU-time column means anything, and it is
        still noisier than (a): a drift of a few % between runs is common here);
     c. for contrast, the profiler recording every step (always-on), 50 steps.
   The aim: <= 2% for the scheduled profiler over a run.
2. Decode throughput against batch size (1..256 rows, context 64) and the knee found by
   `find_knee` (doubling the batch adds < 10% throughput), timed by CPU time with
   --threads 1 (`cpu_clock_ok`), else by the wall clock.

    python 08_profiling/bench.py [--impl student|solution] [--quick] [--threads N] [--repeat N]
                                 [--json FILE] [--plot FILE] [--device cpu|cuda]
                                 [--dtype float32|float16|bfloat16]

--impl (default: COURSE_IMPL, else student): whose profiling package does the labelling,
the sweep and the knee; every row runs on it (in a learner's release, the learner's).

--device / --dtype (solutions/device.py): the model (and the engines' KV pools) on that
device in that dtype. Part 1 measures the profiler's CPU-side price (CPU time) wherever the
model runs; on a GPU the sweep is timed by the wall clock, synchronised.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from torch.profiler import ProfilerActivity, profile, schedule

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere in the repo

from course.bench_impl import SMOKE, add_impl_argument, load_impl, run_bench  # noqa: E402
from course.benchmark import Report, bench_args  # noqa: E402
from solutions.device import add_device_arguments, device_or_exit, dtype_name  # noqa: E402

prof = None  # the package measured: `load_impl` in main(), after the arguments (so --help always works)


SCHEDULE = dict(wait=1, warmup=1, active=3, repeat=1)  # what `course profile` records per batch size


def run_steps(model, n: int, mode: str) -> tuple[float, float]:
    """(wall s, CPU s of this process) for n decode steps at batch 8; when the engine's
    requests reach the end of the context a fresh engine takes over (same work in every mode)."""
    engine = None
    w0, c0 = time.perf_counter(), time.process_time()

    def steps(on_step) -> None:
        nonlocal engine
        for _ in range(n):
            if engine is None or not engine.has_unfinished():
                engine = prof.label_engine(prof.decode_engine(model, 8, prompt_len=16))
            engine.step()
            on_step()

    if mode == "plain":
        steps(lambda: None)
    else:
        sched = schedule(**SCHEDULE) if mode == "scheduled" else None
        with profile(activities=[ProfilerActivity.CPU], schedule=sched) as p:
            steps(p.step)
    return time.perf_counter() - w0, time.process_time() - c0


def window_cost(model, pairs: int) -> tuple[float, float]:
    """(median CPU s of 5 plain decode steps, median extra CPU s of the same 5 steps run as one
    profiled window: wait 1 + warmup 1 + active 3, the profiler entered and left) over
    `pairs` back-to-back pairs on the same engine, the order alternating."""
    plain, extra, engine = [], [], None
    for k in range(pairs):
        if engine is None or len(engine.steps) > 180:
            engine = prof.label_engine(prof.decode_engine(model, 8, prompt_len=16))

        def five_plain() -> float:
            c = time.process_time()
            for _ in range(5):
                engine.step()
            return time.process_time() - c

        def five_profiled() -> float:
            c = time.process_time()
            with profile(activities=[ProfilerActivity.CPU], schedule=schedule(**SCHEDULE)) as p:
                for _ in range(5):
                    engine.step()
                    p.step()
            return time.process_time() - c

        if k % 2:
            b, a = five_profiled(), five_plain()
        else:
            a, b = five_plain(), five_profiled()
        plain.append(a)
        extra.append(b - a)
    return statistics.median(plain), statistics.median(extra)


def main() -> None:
    global prof
    args = bench_args("Stage 08: profiler overhead and the throughput knee",
                      extra=lambda p: (add_device_arguments(p), add_impl_argument(p)))
    device, dtype = device_or_exit(args)
    prof = load_impl(args, "profiling")
    rep = Report("08_profiling", args, title="profiler overhead and the throughput knee")
    model, what = prof.default_model(device, dtype)
    what += f" ({device}, {dtype_name(dtype)})"
    n = 20 if SMOKE else 300 if args.quick else 1000  # smoke: COURSE_BENCH_SMOKE=1
    prof._warm_profiler()
    for mode in ("plain", "scheduled", "always-on"):  # warm-up
        run_steps(model, 10, mode)
    plain5, fixed = window_cost(model, 2 if SMOKE else 6 if args.quick else 30)
    step = plain5 / 5
    rep.add("profiled window (5 steps) - the same 5 steps plain, CPU, median of pairs", ms=1e3 * fixed,
            ms_per_step=1e3 * step)
    for steps in (100, 1000, 2000, 10000):
        rep.add(f"  = overhead over a run of {steps} steps (fixed / (steps x step))",
                cpu_overhead_pct=100 * fixed / (steps * step))
    times = {m: [] for m in ("plain", "scheduled")}
    for r in range(args.repeat):
        for m in (("plain", "scheduled") if r % 2 == 0 else ("scheduled", "plain")):  # no order bias
            times[m].append(run_steps(model, n, m))
    short, runs = (10, 1) if SMOKE else (50, 3)
    always = [run_steps(model, short, "always-on") for _ in range(runs)]
    plain_short = [run_steps(model, short, "plain") for _ in range(runs)]
    base = {k: statistics.median(t[k] for t in times["plain"]) for k in (0, 1)}
    for m, ts in times.items():
        wall, cpu = (statistics.median(t[k] for t in ts) for k in (0, 1))
        rep.add(f"{n} decode steps, batch 8: {m}, directly", wall_s=wall, cpu_s=cpu, ms_per_step=1e3 * cpu / n,
                cpu_overhead_pct=100 * (cpu / base[1] - 1), wall_overhead_pct=100 * (wall / base[0] - 1))
    a_cpu, p_cpu = (statistics.median(t[1] for t in ts) for ts in (always, plain_short))
    rep.add(f"{short} decode steps, batch 8: always-on vs plain", cpu_s=a_cpu, ms_per_step=1e3 * a_cpu / short,
            cpu_overhead_pct=100 * (a_cpu / p_cpu - 1))
    batches = [1, 4, 16] if SMOKE else [1, 4, 16, 64] if args.quick else [1, 2, 4, 8, 16, 32, 64, 128, 256]

    clock = time.process_time if prof.cpu_clock_ok(device) else time.perf_counter
    points = prof.batch_sweep(model, batches, context=64, repeat=args.repeat, warmup=args.warmup, clock=clock)
    knee = prof.find_knee([p.batch for p in points], [p.tokens_per_s for p in points], min_gain=0.1)
    for p in points:
        rep.add(f"decode step, batch {p.batch}", step_ms=1e3 * p.step_s, tokens_per_s=p.tokens_per_s,
                vs_batch1=p.tokens_per_s / points[0].tokens_per_s,
                knee="<- knee" if knee and p.batch == knee.batch else "")
    out = rep.finish()
    print(f"\nmodel: {what}; sweep timed by {'CPU time' if clock is time.process_time else 'wall clock'}; "
          "knee (doubling adds < 10%): "
          + (f"batch {knee.batch}" if knee else "none inside the sweep"))
    from course.profile import print_reliability, reliability  # the report's rule for noisy figures

    sweep = {"points": [{"batch": p.batch, "tokens_per_s": p.tokens_per_s, "spread": p.spread} for p in points],
             "knee": {"batch": knee.batch} if knee else None}
    print_reliability(reliability({"sweep": sweep, "environment": {"threads": args.threads}}))
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 3.6))
        ax.plot([p.batch for p in points], [p.tokens_per_s for p in points], "o-")
        if knee:
            ax.axvline(knee.batch, ls=":", color="grey", label=f"knee: batch {knee.batch}")
            ax.legend()
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch")
        ax.set_ylabel("decode tokens/s")
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)
        print(f"wrote {args.plot}")
    return out


if __name__ == "__main__":
    run_bench(main)
