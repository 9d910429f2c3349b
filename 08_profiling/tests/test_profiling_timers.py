"""Exercise 8.1: honest timers — checked with a fake clock (exact), a fake asynchronous
device (what synchronising changes) and real sleeps (a lower bound, never an upper one)."""

import time

import pytest

import course

prof = course.load("profiling")


class FakeClock:
    """A clock that moves only when work is done: `work(d)` advances it by d."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def worker(clock, durations):
    it = iter(durations)

    def fn():
        clock.now += next(it)

    return fn


@pytest.mark.exercise("8.1")
def test_warmup_runs_are_not_timed_and_the_median_is_kept():
    clk = FakeClock()
    fn = worker(clk, [50.0, 40.0, 1.0, 2.0, 3.0, 4.0, 100.0])
    t = prof.time_fn(fn, warmup=2, repeat=5, clock=clk, sync=lambda: None)
    assert t.times == (1.0, 2.0, 3.0, 4.0, 100.0), \
        f"the 2 warm-up calls are not timed; then one time per run, in run order: got {t.times}"
    assert t.median == 3.0, \
        f"Timing.median is the runs' median (robust to the one slow run), not the mean: got {t.median}"
    assert t.spread == pytest.approx(99.0 / 3.0)


@pytest.mark.exercise("8.1")
def test_number_gives_the_time_per_call():
    clk = FakeClock()
    fn = worker(clk, [9.0, 1.0, 3.0, 2.0, 2.0, 5.0, 7.0])
    t = prof.time_fn(fn, warmup=1, repeat=3, number=2, clock=clk, sync=lambda: None)
    assert t.times == (2.0, 2.0, 6.0), \
        (f"a run is `number` calls between two clock reads, its time their difference / number (per call): "
         f"got {t.times}")
    assert t.median == 2.0


@pytest.mark.exercise("8.1")
def test_synchronising_charges_queued_work_to_the_right_run():
    """A fake GPU: fn only QUEUES its work; sync() waits for it (advances the clock).
    Honest timing sees each call's own work; warm-up work is not charged to run 1;
    a naive timer sees nothing at all."""
    clk = FakeClock()
    pending = []
    work = iter([100.0, 5.0, 6.0, 7.0])

    def launch():
        pending.append(next(work))

    def sync():
        clk.now += sum(pending)
        pending.clear()

    t = prof.time_fn(launch, warmup=1, repeat=3, clock=clk, sync=sync)
    assert t.times == (5.0, 6.0, 7.0), \
        ("each run is charged the work its own calls queued (5, 6, 7 s), none of the warm-up's 100 s: "
         f"got {t.times}")
    assert prof.time_naive(lambda: pending.append(3.0), clock=clk) == 0.0, \
        "time_naive reads the clock around one call and waits for nothing (the queued 3 s are not seen)"


@pytest.mark.exercise("8.1")
def test_time_naive_is_one_call():
    clk = FakeClock()
    calls = []

    def fn():
        calls.append(1)
        clk.now += 0.25

    assert prof.time_naive(fn, clock=clk) == 0.25
    assert len(calls) == 1


@pytest.mark.exercise("8.1")
def test_sleeps_are_measured_at_least_as_long_as_they_sleep():
    t = prof.time_fn(lambda: time.sleep(0.004), warmup=1, repeat=3)
    assert len(t.times) == 3 and all(x >= 0.004 for x in t.times)
    assert t.median >= 0.004


@pytest.mark.exercise("8.1")
def test_timing_pitfalls_show_the_cold_call():
    state = {"first": True}

    def fn():
        if state["first"]:
            state["first"] = False
            time.sleep(0.02)  # a one-off cost: allocation, compilation, a cold cache

    out = prof.timing_pitfalls(fn, repeat=3)
    assert out["cold_s"] >= 0.02
    assert out["honest_s"] < out["cold_s"]


@pytest.mark.given
@pytest.mark.parametrize("kw", [dict(repeat=0), dict(warmup=-1), dict(number=0), dict(repeat=2.5)])
def test_bad_counts_are_refused(kw):
    with pytest.raises(ValueError, match=next(iter(kw))):
        prof.time_fn(lambda: None, **kw)


@pytest.mark.exercise("8.1")
def test_the_calls_come_in_the_order_the_contract_states():
    """warm-up: fn, sync (each); a run: sync, clock, fn × number, sync, clock. Nothing else."""
    log = []
    clk = FakeClock()

    def clock():
        log.append("clock")
        return clk()

    t = prof.time_fn(lambda: log.append("fn"), warmup=2, repeat=2, number=3, clock=clock,
                     sync=lambda: log.append("sync"))
    broken = _broken_rule(log, warmup=2, repeat=2, number=3)
    assert broken is None, f"{broken}; the calls were {log}"
    assert t.times == (0.0, 0.0)


def _broken_rule(log: list[str], *, warmup: int, repeat: int, number: int) -> str | None:
    """The first rule of time_fn's contract that the call log breaks (None: it keeps them all)."""
    if log.count("sync") != warmup + 2 * repeat:
        return (f"sync() is the only wait: once per warm-up call and twice per run ({warmup} + 2·{repeat} = "
                f"{warmup + 2 * repeat} here), got {log.count('sync')}")
    if log.count("clock") != 2 * repeat or log.count("fn") != warmup + number * repeat:
        return (f"{warmup} warm-up calls, then {repeat} runs of {number} calls between two clock reads each: got "
                f"{log.count('fn')} calls and {log.count('clock')} clock reads")
    first = log.index("clock")
    if first == 0:
        return "run 1: work queued before it must not be charged to it (wait before its first clock read)"
    if log[:first - 1] != ["fn", "sync"] * warmup or log[first - 1] != "sync":
        return ("each warm-up call is waited for before anything else happens, and a run's first clock read "
                "waits for all work queued before it")
    runs, size = log[first - 1:], number + 4  # a run: sync, clock, its calls, sync, clock
    for k in range(repeat):
        run = runs[k * size:(k + 1) * size]
        inside = run[2:2 + number + 1]
        if run[:2] != ["sync", "clock"]:
            return f"run {k + 1}: work queued before it must not be charged to it (wait before its first clock read)"
        if inside != ["fn"] * number + ["sync"] or run[2 + number + 1] != "clock":
            return (f"run {k + 1}: it must be charged all the work its own {number} calls queued (wait for it "
                    "before its second clock read), and nothing else happens between its clock reads")
    return None


@pytest.mark.exercise("8.1")
def test_work_queued_before_timing_is_not_charged_to_the_first_run():
    """With warmup=0 the sync right BEFORE the first clock read is what keeps work queued
    earlier (by someone else) out of the first run."""
    clk = FakeClock()
    pending = [50.0]  # queued before time_fn was called
    work = iter([1.0, 2.0])

    def launch():
        pending.append(next(work))

    def sync():
        clk.now += sum(pending)
        pending.clear()

    t = prof.time_fn(launch, warmup=0, repeat=2, clock=clk, sync=sync)
    assert t.times == (1.0, 2.0), ("sync() must run before each run's first clock read, so work queued "
                                   f"earlier is not charged to the run; got {t.times}")


@pytest.mark.exercise("8.1")
def test_synchronized_says_whether_anything_was_waited_for(monkeypatch):
    clk = FakeClock()
    assert prof.time_fn(lambda: None, repeat=1, clock=clk).synchronized is False, \
        "on the CPU with no sync given, Timing.synchronized must be False"
    assert prof.time_fn(lambda: None, repeat=1, clock=clk, sync=lambda: None).synchronized is True, \
        "with a sync given, Timing.synchronized must be True"
    waited = []
    monkeypatch.setattr(prof.timers, "synchronize", lambda device=None: waited.append(str(device)))
    t = prof.time_fn(lambda: None, warmup=1, repeat=2, clock=clk, device="cuda")  # no GPU needed: sync is faked
    assert t.synchronized is True, "on a cuda device Timing.synchronized must be True"
    assert waited and set(waited) == {"cuda"}, \
        f"with no sync given, time_fn must wait through synchronize(device); it called it with {waited}"
    assert len(waited) == 1 + 2 * 2, "synchronize(device) after the warm-up call and twice per run"
