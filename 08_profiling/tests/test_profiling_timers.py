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
    run = ["sync", "clock", "fn", "fn", "fn", "sync", "clock"]
    want = ["fn", "sync"] * 2 + run * 2
    assert log == want, ("time_fn must call: after every warm-up call sync(); in each run sync(), clock(), "
                         f"fn() `number` times, sync(), clock() — and nothing else; got {log}")
    assert t.times == (0.0, 0.0)


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
