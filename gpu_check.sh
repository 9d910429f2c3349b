#!/usr/bin/env bash
# The course on one CUDA machine, in one go (issue 19), from the repository root:
#
#     OUT=/some/folder bash gpu_check.sh          # default OUT=/tmp/gpu_check
#
# Within about 4 minutes (BUDGET seconds, default 235: each step's time limit is cut to what
# is left, a step with under 10 s left is skipped; every step runs under `timeout` and the
# script goes on when one fails), writing everything under $OUT:
#   1. environment.txt   nvidia-smi, Python / torch / triton / CUDA versions, the commit;
#      serving.txt       where the serving packages (fastapi, uvicorn, httpx, openai,
#                        prometheus-client) are missing and a wheel folder WHEELS (default
#                        out/wheels, git-ignored: fill it here with `pip download` of the
#                        `serving` extra's pins for the device's Python, and carry it there)
#                        holds them, they are installed from it, offline (--no-index)
#   2. stage06/          06_paged_attention/gpu_check.sh: `pip install --no-deps -e .`, every
#                        `gpu`-marked test of the course (`pytest -m gpu` on each test file that
#                        has one), the stage 06 GPU bench (6.5's textbook kernel, 6.9's split-K
#                        kernel, paged_attention, SDPA on contiguous K/V) -> bench_gpu.json
#   3. serve/            `course serve --device cuda --dtype bfloat16` and `course serve --device
#                        cpu` (float32, SERVE_CPU_DTYPE), both under the same Poisson load of
#                        stage 07's load generator (07_serving/bench.py: the 6:3:1 mix, streamed
#                        completions, SERVE_RATE requests/s for SERVE_SECONDS s, default 20/s for
#                        30 s) at the same time, one torch thread each: TTFT, ITL (a request's mean
#                        time per output token after the first), tokens/s -> serve.json
#                        (SERVE_GPU_ARGS / SERVE_GPU_NAME replace the first server's arguments
#                        and name: a dry run of the script on a CPU-only machine)
#   4. stage08/          08_profiling/gpu_report.sh: `course profile --device cuda` -> report/
#   5. summary.txt       each step's exit status and time, and the key lines of each
set -u
cd "$(dirname "$0")" || exit 1
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 COURSE_IMPL=solution OUT
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # the course importable even if `pip install -e .` fails
START=$(date +%s)
BUDGET=${BUDGET:-235}
SUMMARY="$OUT/summary.txt"
echo "gpu_check.sh: started $(date -u +%FT%TZ), budget ${BUDGET} s" >"$SUMMARY"

step() {  # step NAME MAX_SECONDS LOG COMMAND...: run under timeout (cut to the budget left), log, record
  local name=$1 want=$2 log=$3 left t0 rc
  shift 3
  left=$((BUDGET - ($(date +%s) - START)))
  ((left < want)) && want=$left
  if ((want < 10)); then
    echo "$name: SKIPPED (${left} s of the budget left)" | tee -a "$SUMMARY"
    return
  fi
  echo "== $name (limit ${want} s): $*"
  t0=$(date +%s)
  timeout "$want" "$@" >"$log" 2>&1
  rc=$?
  echo "$name: exit $rc$([ $rc = 124 ] && echo ' (timed out)') after $(($(date +%s) - t0)) s (limit ${want} s); log $(basename "$log")" \
    | tee -a "$SUMMARY"
}

environment() {
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || echo "nvidia-smi failed"
  python3 -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'NO CUDA')"
  python3 -c "import triton; print('triton', triton.__version__)" || echo "no triton"
  python3 -c "import fastapi, uvicorn, httpx, openai; print('serving: fastapi', fastapi.__version__, 'uvicorn', uvicorn.__version__, 'httpx', httpx.__version__, 'openai', openai.__version__)" \
    || echo "the serving packages (fastapi, uvicorn, httpx, openai) are missing: step serve will fail"
  git rev-parse HEAD 2>/dev/null || echo "no git metadata (a copied working tree)"
}

serving() {
  local pins  # pyproject.toml's `serving` extra, as pinned there
  pins=$(python3 -c "import tomllib; print(' '.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['serving']))")
  if python3 -c "import fastapi, uvicorn, httpx, openai, prometheus_client" 2>/dev/null; then
    echo "the serving packages are there"
  elif compgen -G "${WHEELS:-out/wheels}/*.whl" >/dev/null; then
    # shellcheck disable=SC2086  # pins: a list
    python3 -m pip install -q --no-index --find-links "${WHEELS:-out/wheels}" $pins && echo "installed from ${WHEELS:-out/wheels}: $pins"
  else
    echo "the serving packages are missing and ${WHEELS:-out/wheels} holds no wheels: course serve will fail"
  fi
}

export -f environment serving
step environment 20 "$OUT/environment.txt" bash -c environment
cat "$OUT/environment.txt"
step "serving packages" 40 "$OUT/serving.txt" bash -c serving
cat "$OUT/serving.txt"

# every test file with a `gpu` test: stage tests and the course-level ones
GPU_TEST_PATHS=$(grep -l "mark.gpu" -- [0-9][0-9]_*/tests/test_*.py tests/test_*.py 2>/dev/null | tr '\n' ' ')
export GPU_TEST_PATHS TESTS_TIMEOUT=75 BENCH_TIMEOUT=55
mkdir -p "$OUT/stage06"
step "stage 06: install, gpu tests, GPU bench" 140 "$OUT/stage06.log" \
  env OUT="$OUT/stage06" bash 06_paged_attention/gpu_check.sh

# stage 07's load generator against `course serve` on CUDA (bf16) and on the CPU, the same trace
mkdir -p "$OUT/serve"
cat >"$OUT/serve/serve_load.py" <<'PY'
"""Two `course serve` processes (CUDA bf16, CPU) under one Poisson trace of stage 07's load generator."""
import asyncio
import importlib.util
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path.cwd()
sys.path.insert(0, str(ROOT))
spec = importlib.util.spec_from_file_location("bench07", ROOT / "07_serving" / "bench.py")
bench07 = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench07)  # load(), summarize_http(), source_tokens(), free_port()
from solutions.server.serve import wait_until_healthy  # noqa: E402
from solutions.workload import make_trace  # noqa: E402

OUT = Path(os.environ["OUT"]) / "serve"
SECONDS, RATE = float(os.environ.get("SERVE_SECONDS", 30)), float(os.environ.get("SERVE_RATE", 20))
CONFIGS = {os.environ.get("SERVE_GPU_NAME", "cuda bfloat16"): tuple(
               os.environ.get("SERVE_GPU_ARGS", "--device cuda --dtype bfloat16").split()),
           f"cpu {os.environ.get('SERVE_CPU_DTYPE', 'float32')}": (
               "--device", "cpu", "--dtype", os.environ.get("SERVE_CPU_DTYPE", "float32"))}


def trace():
    return make_trace(int(RATE * SECONDS), profile="mix", rate=RATE, seed=19, source=bench07.source_tokens())


def drive(url):
    results, t0 = asyncio.run(bench07.load(url, trace(), time_limit=SECONDS + 40))
    return bench07.summarize_http(results, t0, target=1.0)


def main():
    servers = {}
    try:
        for name, args in CONFIGS.items():
            port = bench07.free_port()
            tag = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")
            cmd = [sys.executable, "-m", "course", "serve", "--port", str(port), "--threads", "1",
                   "--max-batch-size", "16", "--grace", "5", "--request-log", str(OUT / f"requests_{tag}.jsonl"), *args]
            log = open(OUT / f"server_{tag}.log", "w")
            servers[name] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), f"http://127.0.0.1:{port}", cmd)
        for name, (proc, url, cmd) in servers.items():
            if not wait_until_healthy(url, proc, timeout=45):
                raise SystemExit(f"{name}: the server did not start ({' '.join(cmd)}); see its log in serve/")
            warm = make_trace(4, profile="uniform", rate=None, seed=7, source=bench07.source_tokens(),
                              short_prompt=(8, 32), short_output=(8, 16), long_output=(8, 16))
            asyncio.run(bench07.load(url, warm, 60))  # compiles (Triton on CUDA) and first-call costs, not measured
            print(f"{name}: up at {url}, warmed up by {len(warm)} requests", flush=True)
        print(f"load: the 6:3:1 mix, Poisson {RATE:g} requests/s for {SECONDS:g} s, streamed, temperature 0; "
              f"both servers at once", flush=True)
        with ProcessPoolExecutor(len(servers)) as pool:
            futures = {name: pool.submit(drive, url) for name, (_, url, _) in servers.items()}
            rows = {name: f.result() for name, f in futures.items()}
    finally:
        for proc, _, _ in servers.values():
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
    for name, s in rows.items():
        print(f"serve {name}: {s['done']}/{s['sent']} done, {s['refused']} refused, {s['failed']} failed; "
              f"{s['tok_s']:.0f} output tokens/s; TTFT p50 {s['ttft_p50_ms']:.1f} ms, p99 {s['ttft_p99_ms']:.1f} ms; "
              f"ITL p50 {s['tpot_p50_ms']:.2f} ms, p99 {s['tpot_p99_ms']:.2f} ms", flush=True)
    (OUT / "serve.json").write_text(json.dumps({"rate_rps": RATE, "seconds": SECONDS, "runs": rows}, indent=1,
                                               default=float))


if __name__ == "__main__":
    main()
PY
step "serve: course serve cuda bf16 vs cpu, ${SERVE_SECONDS:-30} s of stage 07 load" 80 "$OUT/serve.log" \
  python3 "$OUT/serve/serve_load.py"

mkdir -p "$OUT/stage08"
step "stage 08: course profile --device cuda (gpu_report.sh)" 120 "$OUT/stage08.log" \
  env OUT="$OUT/stage08" bash 08_profiling/gpu_report.sh

{
  echo
  echo "-- key lines"
  tail -n 3 "$OUT/stage06/gpu_tests.txt" 2>/dev/null
  grep -h "split-K kernel / SDPA\|skipped" "$OUT/stage06/bench_gpu.txt" 2>/dev/null
  grep -h "^serve \|error" "$OUT/serve.log" 2>/dev/null
  grep -h "course profile: exit" "$OUT/stage08/profile.log" 2>/dev/null
  echo "finished $(date -u +%FT%TZ), $(($(date +%s) - START)) s in all"
} >>"$SUMMARY"
cat "$SUMMARY"
