"""Exercise 5.3 at the boundary: EXACTLY `max_batch_size` waiting requests are a full batch.

The other tests queue more requests than fit (5 for a batch of 4); an off-by-one
(`len(waiting) > max_batch_size`) only shows with exactly as many as fit.
"""

from __future__ import annotations

import pytest

import course

b = course.load("batching")


@pytest.mark.exercise("5.3")
@pytest.mark.parametrize("size", [1, 3, 4])
def test_exactly_a_full_batch_starts_at_once(size):
    sched = b.DynamicBatching(size, max_wait_ms=1000, max_cache_tokens=1000)
    for i in range(size - 1):
        sched.add(b.Request([1 + i], 2, arrival=0.0))
    assert not sched.batch_ready(0.0) or size == 1, f"{size - 1} of {size} waited 0 ms: keep collecting"
    sched.add(b.Request([9], 2, arrival=0.0))
    assert sched.batch_ready(0.0), (f"{size} requests wait for a batch of max_batch_size={size}: the batch "
                                    f"is full and must start now, not after the {sched.max_wait_ms:.0f} ms window")
    out = sched.schedule(0.0)
    assert len(out.admitted) == size


@pytest.mark.exercise("5.3")
def test_the_window_closes_exactly_at_the_deadline():
    sched = b.DynamicBatching(8, max_wait_ms=20)
    sched.add(b.Request([1], 2, arrival=1.0))
    assert not sched.batch_ready(1.0199)
    assert sched.batch_ready(1.020), "at arrival + max_wait_ms the window has closed"
    assert sched.wake_time() == pytest.approx(1.020)
