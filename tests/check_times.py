"""A maintainer's measurement (CONTRIBUTING, "How long a check takes"): the wall and CPU
seconds of `course check N.M --impl solution` for every exercise (the command, its test
process and, with the warm worker, the worker's fork that ran the tests: user + system time),
with the load average before each; one JSON line per exercise.

    python tests/check_times.py > check_times.jsonl            # with a warm worker (course.worker)
    python tests/check_times.py --cold > check_times.jsonl     # a new test process per check
    python tests/check_times.py 1.1 2.9                        # those exercises only

With the worker, it is started first and waited for (its own warm-up, a few seconds of CPU once,
is printed as the first line and not counted in any check), then stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _start_worker(env: dict) -> dict:
    """Start the worker for the environment `course check` gives its test process, wait until
    it listens, and say what its warm-up cost (its CPU time so far, from /proc)."""
    from course import worker

    child_env = dict(env, PYTHONUNBUFFERED="1")
    path = worker.socket_path(child_env)
    load, t0 = os.getloadavg()[0], time.perf_counter()
    proc = worker.ensure_started(child_env)
    while not worker._listening(path):  # (a dead worker's file is replaced by ensure_started)
        if time.perf_counter() - t0 > 300:
            raise SystemExit("the worker did not start in 300 s")
        time.sleep(0.2)
    out = {"worker_warmup_wall": round(time.perf_counter() - t0, 2), "load": round(load, 1)}
    if proc is not None:
        fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        out["worker_warmup_cpu"] = round((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), 2)
    else:
        out["note"] = "a worker was already running"
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("exercises", nargs="*", help="N.M ids (default: all)")
    ap.add_argument("--cold", action="store_true", help="no worker: a new test process per check")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from course import manifest, worker

    env = dict(os.environ, COURSE_NO_RECORD="1", COURSE_WORKER="0" if args.cold else "1")
    stats = Path(tempfile.mkdtemp(prefix="check-times-")) / "worker_cpu.txt"
    env["COURSE_WORKER_STATS"] = str(stats)
    os.environ.update(env)
    if not args.cold:
        print(json.dumps(_start_worker(env)), flush=True)
    ids = args.exercises or [ex.id for st in manifest.STAGES for ex in st.exercises]
    try:
        for ex_id in ids:
            stats.write_text("", encoding="utf-8")
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            load, t0 = os.getloadavg()[0], time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "course", "check", ex_id, "--impl", "solution"],
                                  cwd=ROOT, env=env, capture_output=True, text=True)
            wall = time.perf_counter() - t0
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            forks = [float(x) for x in stats.read_text(encoding="utf-8").split()]
            print(json.dumps({"ex": ex_id, "rc": proc.returncode, "wall": round(wall, 2),
                              "cpu": round(cpu + sum(forks), 2), "worker_forks": len(forks),
                              "load": round(load, 1)}), flush=True)
    finally:
        if not args.cold:
            worker.stop(dict(env, PYTHONUNBUFFERED="1"))


if __name__ == "__main__":
    main()
