"""Stage 07 benchmark: the host work of one server step — what the engine thread does
around the model — measured with stage 08's profiler and by timing the engine loop itself.

The server runs in this process (`serve_in_thread`, the engine of `make_engine` with
`--rows` rows, 1 torch thread); a burst of `--requests` streaming requests of 64 prompt /
64 output tokens (token ids, `ignore_eos`, temperature 0) comes from a client in a second
process. Reported, medians over the steps that ran at least `--rows // 2` rows:

  step_ms      `engine.step()` (scheduling, slot mapping, the forward, sampling)
  host_ms      the rest of one engine-loop iteration: commands, deadlines, turning tokens
               into text, handing them to the event loop, retiring finished requests
  tok_s        the burst's output tokens / its wall time, at the client

and, from stage 08's `profile_engine` on the same engine shape offline (rows decoding at
position ~100): aten operators per step, top-level ones (the dispatcher round trips Python
pays for), and the step's time outside operators (Python).

The script only uses APIs the server had before issue 21's changes, so the same file run
in a checkout of an older commit measures "before" (there, without `course.bench_impl`, it
measures the reference, `solutions.server`, as it did then):

    python 07_serving/bench_host.py [--impl student|solution] [--rows 64] [--requests 64] [--slow-log-ms MS]

`--slow-log-ms MS` puts a sink on the server's logger that takes MS milliseconds a line (a
saturated disk, a terminal nobody reads: the source's case of latency jitter from synchronous
log writes) and reports the longest host gap between two steps, `max_host_ms`, and the 99th
percentile, `host_p99_ms`. Run on the commit before the request log went through a queue
(cdd49a7) and after it, as below, it measures what the queue (log_writer.py) buys.
    git worktree add /tmp/before e285b54 && cp 07_serving/bench_host.py /tmp/before/07_serving/ \\
        && (cd /tmp/before && python 07_serving/bench_host.py)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from anywhere in the repo

from solutions.batching import Request, SamplingParams  # noqa: E402
from solutions.gpt import load_default  # noqa: E402
from solutions.tokenizer import EOT  # noqa: E402

try:  # --impl: the learner's server package or the reference's (course/bench_impl.py)
    from course.bench_impl import SMOKE, add_impl_argument, load_impl, raise_todo, run_bench, skip_without
except ImportError:  # an older checkout (the "before" run above): the reference, as then
    add_impl_argument = skip_without = None
    SMOKE = False

    def raise_todo(text: str) -> None:
        return None

srv = None  # the server package measured (make_engine, serve.serve_in_thread: given code), set in main()

CLIENT = r"""
import asyncio, json, random, sys, time, httpx
url, n = sys.argv[1], int(sys.argv[2])
async def one(c, prompt):
    body = {"model": "course-gpt", "prompt": prompt, "max_tokens": 64, "temperature": 0, "stream": True,
            "ignore_eos": True, "stream_options": {"include_usage": True}}
    async with c.stream("POST", "/v1/completions", json=body) as r:
        data = await r.aread()
    return json.loads(data.split(b"\n\n")[-3][6:])["usage"]["completion_tokens"]
async def main():
    rng = random.Random(0)
    prompts = [[rng.randrange(32, 127) for _ in range(64)] for _ in range(n)]
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=httpx.Limits(max_connections=n + 4)) as c:
        await one(c, prompts[0])
        t0 = time.perf_counter()
        tokens = sum(await asyncio.gather(*(one(c, p) for p in prompts)))
    print(json.dumps({"tok_s": tokens / (time.perf_counter() - t0)}))
asyncio.run(main())
"""


def slow_log_sink(ms: float) -> None:
    """A handler on the server's logger that takes `ms` milliseconds a record."""
    import logging

    class Slow(logging.Handler):
        def emit(self, record):
            time.sleep(ms / 1e3)

    logger = logging.getLogger("course.server")
    logger.setLevel(logging.INFO)
    logger.addHandler(Slow())


def serve_burst(model, rows: int, requests: int) -> dict:
    engine = srv.make_engine(model, max_batch_size=rows, max_tokens_per_step=2048,
                         num_blocks=-(-rows * model.config.block_size // 16))
    steps: list[tuple[float, float, int]] = []  # (start, seconds, rows) of each step that ran
    inner = engine.step

    def step():
        t = time.perf_counter()
        out = inner()
        if out.ran:
            steps.append((t, time.perf_counter() - t, len(out.tokens)))
        return out

    engine.step = step
    handle = srv.serve.serve_in_thread(engine)
    try:  # first one short request: a learner's server at an exercise still to do stops here, naming it
        raise_todo(httpx.post(f"{handle.url}/v1/completions", json={"model": "course-gpt", "prompt": "x",
                                                                     "max_tokens": 1}, timeout=120).text)
        for _ in range(2):  # a warm-up burst, then the measured one
            steps.clear()
            out = subprocess.run([sys.executable, "-c", CLIENT, handle.url, str(requests)], capture_output=True,
                                 text=True, timeout=300)
            if out.returncode:
                raise RuntimeError(f"the load client failed (exit {out.returncode}):\n{out.stderr[-2000:]}")
    finally:
        handle.stop()
    # one engine-loop iteration runs from one step's start to the next one's: step + host work
    full = [i for i in range(len(steps) - 1) if steps[i][2] >= rows // 2]
    gaps = sorted(steps[i + 1][0] - steps[i][0] - steps[i][1] for i in range(len(steps) - 1))
    return {"steps": len(steps), "full_steps": len(full),
            "step_ms": statistics.median(steps[i][1] for i in full) * 1e3,
            "host_ms": statistics.median(steps[i + 1][0] - steps[i][0] - steps[i][1] for i in full) * 1e3,
            "host_p99_ms": gaps[min(len(gaps) - 1, int(0.99 * len(gaps)))] * 1e3, "max_host_ms": gaps[-1] * 1e3,
            "tok_s": json.loads(out.stdout)["tok_s"]}


def profile_decode(model, rows: int) -> dict:
    from solutions.profiling import profile_engine  # stage 08's profiler (main() checks it is here)

    engine = srv.make_engine(model, max_batch_size=rows, max_tokens_per_step=2048,
                         num_blocks=-(-rows * model.config.block_size // 16))
    for i in range(rows):
        engine.add_request(Request([32 + (i + j) % 90 for j in range(96)], 64, sampling=SamplingParams(ignore_eos=True),
                                   stop=[EOT], request_id=str(i)))
    while any(r.num_pending > 1 for r in engine.requests.values()) or not engine.steps:
        engine.step()  # prefill everything first
    prof = profile_engine(engine, wait=1, warmup=2, active=8, record_shapes=False)
    op_s = sum(o.step_self_s for o in prof.ops)
    return {"ops_per_step": prof.ops_per_step, "top_level_ops_per_step": prof.top_level_ops_per_step,
            "profiled_step_ms": prof.labels.get("step", 0) * 1e3, "outside_ops_ms": (prof.labels.get("step", 0) - op_s) * 1e3,
            **{f"{k}_ms": v * 1e3 for k, v in prof.labels.items() if k != "step"}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # smoke (COURSE_BENCH_SMOKE=1, course/bench_impl.py): 4 rows and 4 requests unless given
    p.add_argument("--rows", type=int, default=4 if SMOKE else 64)
    p.add_argument("--requests", type=int, default=4 if SMOKE else 64)

    p.add_argument("--slow-log-ms", type=float, default=0.0, metavar="MS",
                   help="a log sink that takes MS ms a line on the server's logger (default: none)")
    p.add_argument("--json", default=None, metavar="FILE")
    if add_impl_argument is not None:
        add_impl_argument(p)
    args = p.parse_args()
    global srv
    if add_impl_argument is not None:
        srv = load_impl(args, "server")
        profiled = skip_without("profiling", "the profile rows (ops_per_step, top_level_ops_per_step, "
                                "profiled_step_ms, outside_ops_ms: stage 08's profile_engine)")
    else:
        import solutions.server.serve  # noqa: F401 - the older checkout's own reference
        srv = solutions.server
        profiled = True
    torch.set_num_threads(1)
    sys.setswitchinterval(0.0005)  # as `course serve` does
    model, _ = load_default()
    if args.slow_log_ms > 0:
        slow_log_sink(args.slow_log_ms)
    row = {**serve_burst(model, args.rows, args.requests), **(profile_decode(model, args.rows) if profiled else {})}
    for k, v in row.items():
        print(f"{k:>24}: {v:.2f}" if isinstance(v, float) else f"{k:>24}: {v}")
    if args.json:
        tmp = Path(f"{args.json}.partial")
        tmp.write_text(json.dumps(row, indent=1), encoding="utf-8")
        tmp.replace(args.json)


if __name__ == "__main__":
    run_bench(main) if add_impl_argument is not None else main()
