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
    assert t.times == (1.0, 2.0, 3.0, 4.0, 100.0)
    assert t.median == 3.0
    assert t.spread == pytest.approx(99.0 / 3.0)


@pytest.mark.exercise("8.1")
def test_number_gives_the_time_per_call():
    clk = FakeClock()
    fn = worker(clk, [9.0, 1.0, 3.0, 2.0, 2.0, 5.0, 7.0])
    t = prof.time_fn(fn, warmup=1, repeat=3, number=2, clock=clk, sync=lambda: None)
    assert t.times == (2.0, 2.0, 6.0)
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
    assert t.times == (5.0, 6.0, 7.0)
    assert prof.time_naive(lambda: pending.append(3.0), clock=clk) == 0.0


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
