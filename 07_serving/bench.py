"""Stage 07 benchmark: the server under a bounded Poisson load on loopback, with and
without admission control, against the engine offline at the same load.

The server runs as its own process (`course --impl IMPL serve`: the server package of
`--impl`, default COURSE_IMPL, else student, so in a learner's release it is the learner's
own; stage 06's PagedEngine, given there, is the offline baseline. 1 torch thread, the
default model, batch 16, a KV pool of --num-blocks blocks of 16 tokens); this process
is the load generator: Poisson arrivals of the 6:3:1 mix of stage 05 (prompts cut from
real Python source, sent as token ids), each request a streaming completion
(`include_usage`), temperature 0. A refused request (503) is not retried.

  idle      one request at a time: the idle TTFT (client side: request sent -> first
            streamed token; the server starts its response with the first token)
  saturation  requests/s an all-at-once trace completes, through HTTP (the rates below
            are multiples of it) and through the engine alone
  offline   the same engine in this process, `replay` of the same trace (stage 05):
            the engine's own TTFT / TPOT at each rate — what HTTP costs on top
  engine    the server engine's own TTFT of the same requests (its request log: arrival
            at the handler -> first token), so client TTFT / engine TTFT is what the HTTP
            path adds on top of the engine inside one run
  rates     0.25x .. 2x the saturation rate, each with admission control (a bounded
            queue of --max-queue-tokens beyond the KV memory; 503 beyond it) and without
            (everything queues); with `--degrade W`, also admission with degradation
            before refusal (the server's `--degrade-watermark W`: past W of the KV memory
            a new request gets `--degraded-max-tokens`, default 8 here)

Per run: throughput (output tokens/s, first arrival -> last finish), TTFT and TPOT
p50 / p99 of the completed requests, refused requests, and goodput: completed requests
whose TTFT met the target (default 5x the idle TTFT) per second.

With `--first-token-deadline S`, every loaded request carries its own `first_token_timeout`:
the runs then count the admitted requests that still came late (504) beside those refused
at admission (503, among them those whose deadline the queue ahead could not meet).

Aims (issue 10): at 2x saturation, admitted p99 TTFT <= 5x idle TTFT, and goodput with
admission >= 1.5x goodput without; HTTP TTFT <= 1.2x the engine's offline TTFT at low
load (0.25x saturation). With `--degrade`: goodput with degradation / admission alone at
2x saturation, and the requests each refused (no aim: measured).

    python 07_serving/bench.py [--impl student|solution] [--quick] [--requests N] [--num-blocks B]
                               [--max-queue-tokens T] [--degrade W] [--degraded-max-tokens N]
                               [--first-token-deadline S]
                               [--json FILE] [--plot FILE] [--device cpu|cuda]
                               [--dtype float32|float16|bfloat16]

--device / --dtype (solutions/device.py): the servers (`--device D --dtype T`) and the
offline engine run the model there, in that dtype.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from anywhere in the repo

import course  # noqa: E402
from course.bench_impl import SMOKE, add_impl_argument, load_impl, raise_todo, run_bench  # noqa: E402
from course.benchmark import Report, bench_args  # noqa: E402
from solutions.batching import ContinuousBatching, percentile, replay, request_metrics  # noqa: E402
from solutions.device import add_device_arguments, device_or_exit, dtype_name  # noqa: E402
from solutions.gpt import load_default  # noqa: E402
from solutions.paged import PagedEngine  # noqa: E402
from solutions.tokenizer import EOT, ByteTokenizer  # noqa: E402
from solutions.workload import make_trace  # noqa: E402

BATCH = 16
MODEL = "course-gpt"


def source_tokens() -> list[int]:
    import asyncio as mod  # prompts cut from real Python source (the standard library's)

    return ByteTokenizer().encode(Path(mod.__file__).parent.joinpath("base_events.py").read_text(encoding="utf-8"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """`course --impl IMPL serve` on a free loopback port, up until `close()`: the server
    package of the current implementation (`course.current_impl()`, which `load_impl` sets),
    the learner's or the reference's. `start_timeout`: seconds it may take to become healthy
    (SmolLM2 takes about 45 s to load on a loaded 2-core machine)."""

    def __init__(self, *args: str, log_dir: str, start_timeout: float = 90):
        self.port = free_port()
        self.log = Path(log_dir) / f"requests-{self.port}.jsonl"
        self.read = 0
        args = (*args, "--request-log", str(self.log))
        self.url = f"http://127.0.0.1:{self.port}"
        impl = course.current_impl()
        cmd = [sys.executable, "-m", "course", "--impl", impl, "serve", "--model", "default", "--port", str(self.port),
               "--threads", "1",
               "--max-batch-size", str(BATCH), "--grace", "5", *args,
               *(("--in-process",) if SMOKE else ())]  # smoke: one process a server, not two

        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT), COURSE_IMPL=impl),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # given code of the package served (serve.py), the learner's or the reference's
        if not course.load("server", impl=impl).serve.wait_until_healthy(self.url, self.proc, timeout=start_timeout):
            self.close()
            raise RuntimeError(f"the server did not start: {' '.join(cmd)}")
        try:
            self.probe()
        except BaseException:
            self.close()
            raise

    def probe(self) -> None:
        """One short request before any load: a learner's server that stops at an exercise
        still to do (a 500 carrying its NotImplementedError) stops the bench there, with
        that exercise's line (`run_bench`), instead of a load of failures. The probe's log
        line is not counted."""
        name = httpx.get(f"{self.url}/v1/models", timeout=30).json()["data"][0]["id"]
        r = httpx.post(f"{self.url}/v1/completions", json={"model": name, "prompt": "x", "max_tokens": 1}, timeout=120)
        raise_todo(r.text)
        end = time.monotonic() + 5  # the log line is written off the request's path (log_writer.py)
        while r.status_code == 200 and not self.new_lines() and time.monotonic() < end:
            time.sleep(0.01)

    def new_lines(self) -> list[dict]:
        """The request-log lines written since the last call (one per finished request)."""
        lines = self.log.read_text(encoding="utf-8").splitlines() if self.log.exists() else []
        new, self.read = lines[self.read:], len(lines)
        return [json.loads(ln) for ln in new]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


_TEXT_EVENT = re.compile(rb'"text": ?"[^"]')  # an SSE event that carries text (not an empty delta)


async def one_request(client: httpx.AsyncClient, prompt: list[int], max_tokens: int, t_start: float,
                      offset: float, extra: dict | None = None) -> dict:
    """One streamed completion; `ttft` is at the response headers (the course server sends
    them with its first token), `ttft_text` at the first SSE event that carries text (the
    same for every server: vLLM sends its headers at once). `extra`: more body fields."""
    await asyncio.sleep(max(0.0, t_start + offset - time.perf_counter()))
    sent = time.perf_counter()
    body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}, **(extra or {})}
    try:
        async with client.stream("POST", "/v1/completions", json=body) as r:
            first = time.perf_counter()  # the server answers with its first token
            if r.status_code != 200:
                await r.aread()
                return {"status": r.status_code, "sent": sent}
            tail, last, text_at = b"", first, None
            async for chunk in r.aiter_bytes():
                if text_at is None and _TEXT_EVENT.search(tail[-16:] + chunk):
                    text_at = time.perf_counter()
                tail = (tail + chunk)[-4096:]
                if b'"finish_reason":"' in chunk:
                    last = time.perf_counter()
            end = time.perf_counter()
    except httpx.HTTPError as e:
        return {"status": -1, "sent": sent, "error": repr(e)}
    events = [e[6:] for e in tail.split(b"\n\n") if e.startswith(b"data: {")]
    usage = json.loads(events[-1])["usage"]
    n = usage["completion_tokens"]
    return {"status": 200, "sent": sent, "ttft": first - sent, "end": end, "tokens": n,
            "tpot": (last - first) / (n - 1) if n > 1 else None, "ttft_text": (text_at or end) - sent}


async def load(url: str, trace, time_limit: float, extra: dict | None = None) -> tuple[list[dict], float]:
    limits = httpx.Limits(max_connections=len(trace) + 8, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(time_limit), limits=limits) as client:
        t0 = time.perf_counter()
        tasks = [one_request(client, list(r.prompt), r.max_new_tokens, t0, r.arrival, extra) for r in trace]
        results = await asyncio.wait_for(asyncio.gather(*tasks), time_limit)
    return results, t0


def summarize_http(results: list[dict], t0: float, target: float) -> dict:
    ok = [r for r in results if r["status"] == 200]
    span = (max(r["end"] for r in ok) - t0) if ok else float("nan")
    ttft = [r["ttft"] for r in ok]
    tpot = [r["tpot"] for r in ok]
    return {"sent": len(results), "done": len(ok), "refused": sum(r["status"] == 503 for r in results),
            "late": sum(r["status"] == 504 for r in results),  # past its own --first-token-deadline
            "failed": sum(r["status"] not in (200, 503, 504) for r in results),
            "tok_s": sum(r["tokens"] for r in ok) / span if ok else 0.0,
            "ttft_p50_ms": 1e3 * percentile(ttft, 50), "ttft_p99_ms": 1e3 * percentile(ttft, 99),
            "tpot_p50_ms": 1e3 * percentile(tpot, 50), "tpot_p99_ms": 1e3 * percentile(tpot, 99),
            "goodput_rps": sum(t <= target for t in ttft) / span if ok else 0.0}


def offline(model, trace, num_blocks: int) -> dict:
    engine = PagedEngine(model, ContinuousBatching(BATCH, max_tokens_per_step=256), num_blocks=num_blocks)
    res = replay(engine, trace, stop=(EOT,))
    ms = [request_metrics(r) for r in res.requests]
    span = res.end - res.start
    return {"done": len(ms), "seconds": span, "tok_s": sum(m.output_tokens for m in ms) / span,
            "ttft_p50_ms": 1e3 * percentile([m.ttft for m in ms], 50),
            "ttft_p99_ms": 1e3 * percentile([m.ttft for m in ms], 99),
            "tpot_p50_ms": 1e3 * percentile([m.tpot for m in ms], 50),
            "tpot_p99_ms": 1e3 * percentile([m.tpot for m in ms], 99)}


def main() -> None:
    def extra(p):
        p.add_argument("--requests", type=int, default=160, help="requests per load run")
        p.add_argument("--num-blocks", type=int, default=64, help="the server's KV pool, blocks of 16 tokens")
        p.add_argument("--max-queue-tokens", type=int, default=0, help="admission: queue bound beyond memory")
        p.add_argument("--ttft-target-ms", type=float, default=None, help="goodput target (default 5x idle)")
        p.add_argument("--factors", default="0.25,0.5,1,1.5,2", help="rates, as multiples of saturation")
        p.add_argument("--first-token-deadline", type=float, default=None, metavar="S",
                       help="each loaded request's own first_token_timeout: a 504 when late, a 503 at admission "
                            "when the queue ahead cannot meet it (default: none)")
        p.add_argument("--degrade", type=float, default=None, metavar="W",
                       help="also a server with admission and --degrade-watermark W (default: none)")
        p.add_argument("--degraded-max-tokens", type=int, default=8, metavar="N",
                       help="that server's --degraded-max-tokens (default 8)")
        add_device_arguments(p)
        add_impl_argument(p)

    args = bench_args("Stage 07: serving under load, with and without admission control", extra=extra)
    device, dtype = device_or_exit(args)
    load_impl(args, "server")  # the servers run this package (`course --impl IMPL serve`)
    on = ("--device", str(device), "--dtype", dtype_name(dtype))
    if args.threads != 1:
        print("note: the server and the offline engine both run on 1 torch thread; --threads is ignored")
    torch.set_num_threads(1)
    n = 4 if SMOKE else 60 if args.quick else args.requests
    factors = [float(f) for f in args.factors.split(",")]
    # smoke (COURSE_BENCH_SMOKE=1): a few requests of a few tokens, at the lowest and highest rate (the aims' rows)
    tiny = dict(long_prompt=(16, 24), short_output=(2, 4), long_output=(4, 8)) if SMOKE else {}
    if SMOKE:
        factors = sorted({min(factors), max(factors)})
    model, _ = load_default(device=device, dtype=dtype)
    src = source_tokens()

    tmp = tempfile.TemporaryDirectory(prefix="bench07-")
    servers = {"admission": ServerProcess("--num-blocks", str(args.num_blocks), "--max-queue-tokens",
                                          str(args.max_queue_tokens), "--max-queue-wait", "0",  # the fixed bound
                                          *on, log_dir=tmp.name),
               "no admission": ServerProcess("--num-blocks", str(args.num_blocks), "--no-admission", *on,
                                             log_dir=tmp.name)}
    if args.degrade is not None:  # admission as above, and degradation before refusal
        servers["degraded"] = ServerProcess("--num-blocks", str(args.num_blocks), "--max-queue-tokens",
                                            str(args.max_queue_tokens), "--max-queue-wait", "0",
                                            "--degrade-watermark", str(args.degrade), "--degraded-max-tokens",
                                            str(args.degraded_max_tokens), *on, log_dir=tmp.name)
    results: dict = {"runs": {}}
    deadline = {"first_token_timeout": args.first_token_deadline} if args.first_token_deadline else None
    try:
        # saturation: an all-at-once trace, through the engine alone and through HTTP (the
        # server without admission control); the load runs are scaled to the HTTP one
        off_sat, http_sat = [], []
        for i in range(max(1, args.repeat // 3)):
            burst = make_trace(n, profile="mix", rate=None, seed=100 + i, source=src, **tiny)
            off = offline(model, burst, args.num_blocks)
            off_sat.append(off["done"] / off["seconds"])
            res, t0 = asyncio.run(load(servers["no admission"].url, burst, time_limit=600))
            http_sat.append(sum(r["status"] == 200 for r in res) / (max(r["end"] for r in res) - t0))
        servers["no admission"].new_lines()
        sat = statistics.median(http_sat)
        print(f"saturation, all at once (median of {len(off_sat)}): offline engine {statistics.median(off_sat):.1f}, "
              f"HTTP {sat:.1f} requests/s")
        results.update(saturation_rps=sat, offline_saturation_rps=statistics.median(off_sat))
        rep = Report("07_serving", args, title=f"serving under Poisson load; HTTP saturation {sat:.1f} req/s; "
                                              f"batch {BATCH}, {args.num_blocks} KV blocks")
        # idle TTFT: one request at a time (short prompts, short answers)
        idle_trace = make_trace(3 if SMOKE else 24 if not args.quick else 8, profile="uniform", rate=None, seed=7,
                                source=src,
                                short_prompt=(8, 32), short_output=(8, 16), long_output=(8, 16))
        idle = []
        for r in idle_trace:
            res, _ = asyncio.run(load(servers["admission"].url, type(idle_trace)((r,)), 60))
            idle.append(res[0]["ttft"])
        servers["admission"].new_lines()
        for other in [s for name, s in servers.items() if name != "admission"]:  # warm the others up too
            for r in list(idle_trace)[:4]:
                asyncio.run(load(other.url, type(idle_trace)((r,)), 60))
            other.new_lines()
        idle_ttft = statistics.median(idle[2:] if len(idle) > 4 else idle)
        target = args.ttft_target_ms / 1e3 if args.ttft_target_ms else 5 * idle_ttft
        print(f"idle TTFT (HTTP, median of {len(idle)}): {idle_ttft * 1e3:.1f} ms; goodput target "
              f"TTFT <= {target * 1e3:.0f} ms")
        results.update(idle_ttft_ms=idle_ttft * 1e3, target_ms=target * 1e3)
        for f in factors:
            rate = f * sat
            trace = make_trace(n, profile="mix", rate=rate, seed=int(f * 1000), source=src, **tiny)

            off = offline(model, trace, args.num_blocks)
            rep.add(f"{f:g}x offline engine", rate_rps=rate, **{k: off[k] for k in
                    ("tok_s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms")})
            results["runs"][f"{f:g}x offline"] = off
            for name, server in servers.items():
                res, t0 = asyncio.run(load(server.url, trace, time_limit=120 + 4 * n / rate, extra=deadline))
                s = summarize_http(res, t0, target)
                engine_ttft = [ln["ttft_s"] for ln in server.new_lines() if ln["ttft_s"] is not None]
                s["engine_ttft_p50_ms"] = 1e3 * percentile(engine_ttft, 50)
                results["runs"][f"{f:g}x {name}"] = s
                rep.add(f"{f:g}x HTTP, {name}", rate_rps=rate, **{k: s[k] for k in (
                    "tok_s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "done", "refused", "late",
                    "goodput_rps", "engine_ttft_p50_ms")})
    finally:
        for s in servers.values():
            s.close()
        tmp.cleanup()
    rep.finish()

    # the aims
    top = f"{max(factors):g}x"
    low = f"{min(factors):g}x"
    adm, free = results["runs"][f"{top} admission"], results["runs"][f"{top} no admission"]
    ratio_ttft = adm["ttft_p99_ms"] / results["idle_ttft_ms"]
    ratio_good = adm["goodput_rps"] / free["goodput_rps"] if free["goodput_rps"] else float("inf")
    http_vs = results["runs"][f"{low} admission"]["ttft_p50_ms"] / results["runs"][f"{low} offline"]["ttft_p50_ms"]
    print(f"\naims at {top} saturation: admitted p99 TTFT / idle TTFT = {ratio_ttft:.2f} (aim <= 5): "
          f"{'met' if ratio_ttft <= 5 else 'MISSED'}; goodput admission / none = {ratio_good:.2f} (aim >= 1.5): "
          f"{'met' if ratio_good >= 1.5 else 'MISSED'}")
    print(f"at {low} saturation: HTTP TTFT p50 / offline engine TTFT p50 = {http_vs:.2f} (aim <= 1.2): "
          f"{'met' if http_vs <= 1.2 else 'MISSED'}")
    low_run = results["runs"][f"{low} admission"]
    inside = low_run["ttft_p50_ms"] / low_run["engine_ttft_p50_ms"]
    print(f"at {low} saturation, the same requests: client-side TTFT p50 / the server engine's own TTFT p50 "
          f"(its request log) = {inside:.2f}")
    failed = sum(r.get("failed", 0) for r in results["runs"].values())
    if deadline is not None:
        for name in servers:
            r = results["runs"][f"{top} {name}"]
            print(f"at {top} saturation, {name}, each request's first-token deadline {args.first_token_deadline:g} "
                  f"s: served {r['done']}, refused (503) {r['refused']}, admitted but late (504) {r['late']} "
                  f"of {r['sent']}")
    if args.degrade is not None:
        deg = results["runs"][f"{top} degraded"]
        ratio_deg = deg["goodput_rps"] / adm["goodput_rps"] if adm["goodput_rps"] else float("inf")
        print(f"at {top} saturation, degradation past {args.degrade:g} of the KV memory to "
              f"{args.degraded_max_tokens} tokens: goodput degraded / admission alone = {ratio_deg:.2f}; "
              f"refused {deg['refused']} against {adm['refused']} of {deg['sent']}; output tokens/s "
              f"{deg['tok_s']:.0f} against {adm['tok_s']:.0f}")
    print(f"requests that failed (neither 200, 503 nor 504): {failed}")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rep.rows, **results}, indent=1, default=float))
    if args.plot:
        plot(rep.rows, args.plot)


def plot(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for label in ("offline engine", "HTTP, admission", "HTTP, no admission", "HTTP, degraded"):
        rs = [r for r in rows if r["name"].endswith(label)]
        if not rs:
            continue
        x = [r["rate_rps"] for r in rs]
        axes[0].plot(x, [r["ttft_p99_ms"] for r in rs], "o-", label=label)
        axes[1].plot(x, [r["tpot_p99_ms"] for r in rs], "o-", label=label)
        if "goodput_rps" in rs[0]:
            axes[2].plot(x, [r["goodput_rps"] for r in rs], "o-", label=label)
    for ax, t in zip(axes, ("TTFT p99 (ms)", "TPOT p99 (ms)", "goodput (requests/s within target)")):
        ax.set_xlabel("offered rate (requests/s)")
        ax.set_title(t)
        ax.legend()
    axes[0].set_yscale("log")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    run_bench(main)
