"""Stage 07 benchmark: fairness between clients. A quiet client's time to first token alone,
and while another client floods the server, under each scheduling policy.

The server runs as its own process (`course --impl IMPL serve --scheduling-policy P`,
1 thread, `--model` default or smollm2, --rows rows (default 128), --budget tokens a step
(default: the server's 2048), its default KV memory and admission). The
quiet client is a second process, so that this process's flood of streams cannot delay its
clock. It sends --quiet requests one at a time, 50 ms apart, after one it does not count: 32 prompt tokens cut from real
Python source (token ids), 8 out, temperature 0, `user` "quiet". The flood is this process:
--flood connections, each sending its next request as soon as its last one ends (100
prompt tokens, 140 out, `user` "flood"; the source's outage was one user's 1,000 concurrent
requests).

Per policy (fair, then fcfs), the quiet client's TTFT p50 / p99 (client side: request sent
-> response headers, which the server sends with the first token) alone and under the flood,
its requests refused (503), its engine-side TTFT p99 under the flood (request log: arrival
at the handler -> first token), and the flood's output tokens/s over --window seconds from
the quiet client's start, and the engine's preemptions during the flood. `--steps` adds
why a step in flight costs what it does: one engine step of the served model offline, at
the budget and at 2048 tokens (`step_times`).

    python 07_serving/bench_fair.py [--impl student|solution] [--model default|smollm2] [--flood 200]
                                    [--quiet 40] [--rows 128] [--budget T] [--window 20]
                                    [--policies fair,fcfs] [--steps] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from bench import ServerProcess, one_request, source_tokens

from course.bench_impl import SMOKE, add_impl_argument, load_impl, run_bench
from solutions.batching import percentile

QUIET_PROMPT, QUIET_OUT, FLOOD_PROMPT, FLOOD_OUT = 32, 8, 100, 140


def body_extra(url: str, user: str) -> dict:
    """The body fields beside the prompt: the model the server serves (GET /v1/models), the client."""
    return {"model": httpx.get(f"{url}/v1/models", timeout=30).json()["data"][0]["id"], "user": user}


async def quiet_client(url: str, n: int) -> list[dict]:
    """n quiet requests, one at a time, 50 ms apart (the quiet client's process), after one
    that is not counted (it opens the connection)."""
    toks, extra = source_tokens(), body_extra(url, "quiet")
    async with httpx.AsyncClient(base_url=url, timeout=300) as client:
        out = []
        for i in range(-1, n):
            prompt = toks[7 * (i + 1):7 * (i + 1) + QUIET_PROMPT]
            out.append(await one_request(client, prompt, QUIET_OUT, time.perf_counter(), 0.0, extra))
            await asyncio.sleep(0.05)
    return out[1:]


def run_quiet(url: str, n: int) -> list[dict]:
    """The quiet client in a process of its own; its results."""
    done = subprocess.run([sys.executable, __file__, "--quiet-client", url, str(n)], capture_output=True, text=True,
                          timeout=3600, check=True)
    return json.loads(done.stdout.splitlines()[-1])


async def flood_and_quiet(url: str, flood: int, warm_s: float, quiet: int,
                          window_s: float) -> tuple[list[dict], float]:
    """Keep `flood` requests in flight, wait warm_s, run the quiet client beside them; the
    quiet results, and the flood's output tokens/s over the `window_s` seconds from the
    quiet client's start (one window for every policy)."""
    toks, tokens, stop, extra = source_tokens(), [0], asyncio.Event(), body_extra(url, "flood")
    limits = httpx.Limits(max_connections=flood + 8, max_keepalive_connections=flood + 8)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:
        async def worker(j: int) -> None:
            i = 0
            while not stop.is_set():
                start = (31 * j + 13 * i) % (len(toks) - FLOOD_PROMPT)
                r = await one_request(client, toks[start:start + FLOOD_PROMPT], FLOOD_OUT, time.perf_counter(), 0.0,
                                      extra)
                tokens[0] += r.get("tokens", 0) if not stop.is_set() else 0
                if r["status"] != 200:
                    await asyncio.sleep(0.05)  # refused: the flood tries again at once, as the outage's user did
                i += 1

        workers = [asyncio.create_task(worker(j)) for j in range(flood)]
        await asyncio.sleep(warm_s)
        tokens[0] = 0

        async def rate() -> float:  # the flood's tokens/s over the window's first window_s seconds
            await asyncio.sleep(window_s)
            return tokens[0] / window_s

        flood_rate = asyncio.create_task(rate())
        results = await asyncio.to_thread(run_quiet, url, quiet)
        rate_s = await flood_rate
        stop.set()
        for w in workers:
            w.cancel()  # the server aborts a request whose client went away (7.4)
        await asyncio.gather(*workers, return_exceptions=True)
    return results, rate_s


def summary(results: list[dict]) -> dict:
    ttft = [r["ttft"] for r in results if r["status"] == 200]
    return {"p50_ms": 1e3 * percentile(ttft, 50), "p99_ms": 1e3 * percentile(ttft, 99),
            "refused": sum(r["status"] == 503 for r in results), "failed": sum(r["status"] not in (200, 503)
                                                                               for r in results)}


def measure(policy: str, args: argparse.Namespace, log_dir: str) -> dict:
    budget = ("--max-tokens-per-step", str(args.budget)) if args.budget else ()
    server = ServerProcess("--max-batch-size", str(args.rows), *budget, "--scheduling-policy", policy,
                           "--model", args.model, log_dir=log_dir, start_timeout=300)
    try:
        alone = summary(run_quiet(server.url, args.quiet))
        server.new_lines()
        preempted = httpx.get(f"{server.url}/health", timeout=30).json()["preemptions"]
        results, rate = asyncio.run(flood_and_quiet(server.url, args.flood, args.warm, args.quiet, args.window))
        time.sleep(0.5)  # the request log is written off the hot path (log_writer.py)
        quiet_log = [ln for ln in server.new_lines()
                     if ln["prompt_tokens"] == QUIET_PROMPT and ln["output_tokens"] == QUIET_OUT]
        flooded = summary(results)
        preempted = httpx.get(f"{server.url}/health", timeout=30).json()["preemptions"] - preempted
    finally:
        server.close()
    return {"policy": policy, "alone_p50_ms": alone["p50_ms"], "alone_p99_ms": alone["p99_ms"],
            "flood_p50_ms": flooded["p50_ms"], "flood_p99_ms": flooded["p99_ms"],
            "p99_ratio": flooded["p99_ms"] / alone["p99_ms"], "refused": flooded["refused"] + alone["refused"],
            "failed": flooded["failed"] + alone["failed"],
            "engine_p99_ms": 1e3 * percentile([ln["ttft_s"] for ln in quiet_log], 99), "flood_tok_s": rate,
            "preemptions": preempted}


def step_times(srv, model_name: str, rows: int, budgets: list[int]) -> dict:
    """Why a step in flight costs what it does: one engine step of the served model offline
    (`make_engine` of the measured package, `gemm_layout` as the engine process runs it, one
    torch thread), `rows` rows decoding (100-token prompts) plus waiting 100-token prompts
    that fill the rest of each budget; `rows` decode rows alone; one 32-token prefill alone.
    Seconds, the median of three steps each."""
    import torch

    from solutions.batching import Request

    torch.set_num_threads(1)
    model = srv.gemm_layout(srv.load_served(model_name).model)

    def step(budget: int, prefills: int, prompt: int = 100) -> float:
        vocab = model.config.vocab_size
        engine = srv.make_engine(model, max_batch_size=rows + 3 * prefills, max_tokens_per_step=budget)
        for i in range(rows):
            engine.add_request(Request([(i + j) % vocab for j in range(prompt)], 64, stop=()))
        while not engine.scheduler.running or any(r.phase == "prefill" for r in engine.scheduler.running):
            engine.step()
        times = []
        for k in range(3):
            for i in range(prefills):
                first = rows + 1 + 3 * (k * prefills + i)  # a prompt of its own: no prefix-cache hit
                engine.add_request(Request([(first + j) % vocab for j in range(prompt)], 64, stop=()))
            t = time.perf_counter()
            engine.step()
            times.append(time.perf_counter() - t)
        return sorted(times)[1]

    out = {f"step_{b}_tokens_s": step(b, -(-b // 100)) for b in budgets}
    out[f"step_{rows}_decodes_s"] = step(rows, 0)
    engine = srv.make_engine(model, max_batch_size=1)
    times = []
    for k in range(3):
        engine.add_request(Request(range(50 + k, 82 + k), 1, stop=()))  # ids < 257: every model's
        t = time.perf_counter()
        engine.step()
        times.append(time.perf_counter() - t)
        while engine.has_unfinished():
            engine.step()
    out["prefill_32_alone_s"] = sorted(times)[1]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=("default", "smollm2"), default="default", help="the model served")
    # smoke (COURSE_BENCH_SMOKE=1, course/bench_impl.py): fair only unless given, at most a flood of 4 and 3 quiet
    p.add_argument("--flood", type=int, default=200, help="the flood's requests in flight")
    p.add_argument("--quiet", type=int, default=40, help="the quiet client's requests")
    p.add_argument("--warm", type=float, default=5.0, metavar="S",
                   help="seconds the flood runs before the quiet client starts")
    p.add_argument("--rows", type=int, default=128, help="the server's --max-batch-size (its default 128)")
    p.add_argument("--budget", type=int, default=None, help="the server's --max-tokens-per-step (default: its own)")
    p.add_argument("--window", type=float, default=20.0, metavar="S",
                   help="seconds over which the flood's tokens/s is measured, from the quiet client's start")
    p.add_argument("--policies", default="fair" if SMOKE else "fair,fcfs",
                   help="scheduling policies to compare, in order (default fair,fcfs; \"\": none)")
    p.add_argument("--steps", action="store_true",
                   help="also time one engine step offline at --budget (or 256) and 2048 tokens (see step_times)")
    p.add_argument("--json", default=None, metavar="FILE", help="also write the rows here (atomically)")
    add_impl_argument(p)
    args = p.parse_args()
    if SMOKE:  # a README command's own sizes too: a smoke run shows the code path, not the figure
        args.flood, args.quiet, args.warm, args.window = min(args.flood, 4), min(args.quiet, 3), 0.5, 1.0
    srv = load_impl(args, "server")  # the servers run this package (`course --impl IMPL serve`)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as log_dir:
        for policy in filter(None, args.policies.split(",")):  # --policies "": only --steps
            rows.append(measure(policy, args, log_dir))
            print("  ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in rows[-1].items()),
                  flush=True)
    if args.steps:
        rows.append(step_times(srv, args.model, min(args.rows, 16), [args.budget or 256, 2048]))
        print("  ".join(f"{k} {v:.3f}" for k, v in rows[-1].items()), flush=True)
    if args.json:
        tmp = Path(f"{args.json}.partial")
        tmp.write_text(json.dumps(rows, indent=1), encoding="utf-8")
        tmp.replace(args.json)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--quiet-client"]:
        print(json.dumps(asyncio.run(quiet_client(sys.argv[2], int(sys.argv[3])))))
    else:
        run_bench(main)
