"""How much slower this machine is than the course's reference, now: the factor every test's
time limit is multiplied by (`course.runner`'s kill deadline, `course.time_limit`'s alarm),
and the words a time-out uses. It imports nothing of the course, so the test process's
plugin and the parent's runner share it without importing each other.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

MAX_SLOWDOWN = 10.0  # a limit grows with the machine's measured slowdown up to this factor

# A test's time limit is `--timeout` seconds on a quiet machine of the course's reference
# speed, times this machine's slowdown now: its CPU speed (a short pure-Python loop's CPU
# time against the reference's) times the contention for its cores (the load average per
# CPU, or the loop's wall time over its CPU time, whichever is larger), at least 1 and at
# most MAX_SLOWDOWN. Correct code on a busy machine (load 8 on 2 cores: about 4x) is not
# timed out; a loop still is, within MAX_SLOWDOWN x the limit.

CALIBRATION_LOOPS = 200_000
CALIBRATION_REFERENCE_S = 0.025  # its CPU time on the course's 2-core dev machine (measured 0.0225 s)
_speed: float | None = None  # this machine's CPU slowdown (measured once a process)


@dataclass(frozen=True)
class Slowdown:
    factor: float  # the limit's multiplier (1 ... MAX_SLOWDOWN)
    load: float  # the 1-minute load average
    cpus: int
    speed: float  # CPU time of the calibration loop / the reference's

    def describe(self) -> str:
        return (f"load average {self.load:.1f} on {self.cpus} CPU{'s' if self.cpus != 1 else ''}"
                + (f", CPU {self.speed:.1f}x slower than the reference" if self.speed > 1.05 else ""))


def _calibration_loop() -> tuple[float, float]:
    """(CPU seconds, wall seconds) of a fixed pure-Python loop."""
    c0, w0 = time.process_time(), time.perf_counter()
    x = 0
    for i in range(CALIBRATION_LOOPS):
        x = (x * 31 + i) & 0xFFFF
    return max(time.process_time() - c0, 1e-6), time.perf_counter() - w0


def _cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def machine_slowdown(measure: bool = True) -> Slowdown:
    """This machine's slowdown now (see above). `measure=False` uses the CPU speed measured
    before (or 1) and only the load average: microseconds, for every test's timer."""
    global _speed
    cpus = _cpus()
    if os.environ.get("COURSE_FIXED_TIMEOUT"):  # limits as given, whatever the machine
        return Slowdown(1.0, 0.0, cpus, 1.0)
    forced = os.environ.get("COURSE_SLOWDOWN", "")  # a known factor (an instructor's runner, the tests)
    try:
        if forced and float(forced) >= 1:
            return Slowdown(min(MAX_SLOWDOWN, float(forced)), float(forced) * cpus, cpus, 1.0)
    except ValueError:
        pass
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        load = 0.0
    contention = max(1.0, load / cpus)
    if measure or _speed is None:
        if measure:
            cpu, wall = _calibration_loop()
            _speed = max(1.0, cpu / CALIBRATION_REFERENCE_S)
            contention = max(contention, wall / cpu)
        else:
            _speed = _speed or 1.0
    factor = min(MAX_SLOWDOWN, max(1.0, _speed * contention))
    return Slowdown(round(factor, 2), load, cpus, round(_speed, 2))


def timeout_message(ran: float, base: float, slowdown: Slowdown, who: str = "") -> str:
    """What a time-out says: which limit, from what, and how to raise it; it is the
    harness's clock, and it blames no file of the learner's."""
    limit = base * slowdown.factor
    return (f"Timeout{who}: the test ran {ran:.0f} s, past its limit of {limit:.0f} s (--timeout {base:g} x "
            f"{slowdown.factor:g} for this machine: {slowdown.describe()}). A limit of the harness, not a "
            f"wrong answer: if the code is right, raise it with --timeout {int(base * 2)}")
