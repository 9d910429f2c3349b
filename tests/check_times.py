"""A maintainer's measurement (CONTRIBUTING, "How long a check takes"): the wall and CPU
seconds of `course check N.M --impl solution` for every exercise (the command and its test
process: user + system time of the children), with the load average before each; one JSON
line per exercise.

    python tests/check_times.py > check_times.jsonl
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    sys.path.insert(0, str(ROOT))
    from course import manifest

    for st in manifest.STAGES:
        for ex in st.exercises:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            load, t0 = os.getloadavg()[0], time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "course", "check", ex.id, "--impl", "solution"],
                                  cwd=ROOT, capture_output=True, text=True)
            wall = time.perf_counter() - t0
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            print(json.dumps({"ex": ex.id, "rc": proc.returncode, "wall": round(wall, 2), "cpu": round(cpu, 2),
                              "load": round(load, 1)}), flush=True)


if __name__ == "__main__":
    main()
