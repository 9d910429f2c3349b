"""Exercise 8.4: the knee finder on synthetic curves, and a real (tiny) sweep."""

import numpy as np
import pytest

import course

prof = course.load("profiling")
B = [1, 2, 4, 8, 16, 32, 64]
RULE = ("the knee is the FIRST point i (never the last) such that every later point j is strictly below y_i * (1 + min_gain) ** log2(b_j / b_i), over the points sorted by batch size")


def knee_at(b, y, batch, **kw):
    """find_knee(b, y, **kw), which must be a Knee at `batch`."""
    knee = prof.find_knee(b, y, **kw)
    where = f"find_knee({list(b)}, {list(y)}{''.join(f', {k}={v}' for k, v in kw.items())})"
    assert knee is not None, f"{where} returned None, expected the knee at batch {batch}: {RULE}"
    assert knee.batch == batch, f"{where} found the knee at batch {knee.batch}, expected {batch}: {RULE}"
    return knee


@pytest.mark.exercise("8.4")
def test_saturating_curve():
    # gains per doubling: 100%, 100%, 75%, 7%, 1%, 1%: doubling past 8 stops paying
    knee = knee_at(B, [10, 20, 40, 70, 75, 76, 77], 8, min_gain=0.1)
    assert knee.index == 3 and knee.throughput == 70, (
        f"index is i in the sorted order (3) and throughput y_i (70), got {knee.index}, {knee.throughput}")
    assert knee.gains[0] == pytest.approx(1.0) and knee.gains[3] == pytest.approx(75 / 70 - 1)


@pytest.mark.exercise("8.4")
def test_flat_curve_knees_at_once():
    knee_at(B[:5], [100.0] * 5, 1)


@pytest.mark.exercise("8.4")
def test_linear_curve_has_no_knee():
    knee = prof.find_knee(B, [3.0 * b for b in B])
    assert knee is None, (f"a curve still doubling at its end has no knee (the last point is never one), got "
                          f"batch {knee.batch}: {RULE}")


@pytest.mark.exercise("8.4")
def test_a_noisy_dip_is_not_the_knee():
    # 2 -> 4 dips (noise), but 8 is twice 4: the curve was still paying
    knee_at([1, 2, 4, 8, 16, 32], [10, 20, 19, 40, 42, 43], 8, min_gain=0.1)


@pytest.mark.exercise("8.4")
def test_single_point_has_no_knee():
    assert prof.find_knee([4], [123.0]) is None


@pytest.mark.exercise("8.4")
def test_unsorted_and_uneven_spacing():
    # 3 -> 9 is log2(3) doublings: 10% per doubling would be 30 * 1.1**1.585 = 34.9 > 33
    knee = knee_at([9, 1, 3], [33.0, 10.0, 30.0], 3, min_gain=0.1)
    assert knee.index == 1, f"index is the knee's place in the SORTED order (1), got {knee.index}"
    assert prof.find_knee([9, 1, 3], [36.0, 10.0, 30.0], min_gain=0.1) is None, (
        f"36 at batch 9 is above 30 * 1.1 ** log2(3) = 34.9: batch 3 still pays, and batch 9 is last: no knee. {RULE}")


@pytest.mark.exercise("8.4")
def test_sweep_on_a_real_model(model):
    pts = prof.batch_sweep(model, [4, 1, 2], context=8, repeat=2, warmup=1)
    assert [p.batch for p in pts] == [1, 2, 4]
    for p in pts:
        assert p.step_s > 0 and p.tokens_per_s == pytest.approx(p.batch / p.step_s)


@pytest.mark.given
@pytest.mark.parametrize("b, y, kw", [([1, 2], [1.0], {}), ([1, 1], [1.0, 2.0], {}), ([0, 1], [1.0, 2.0], {}),
                                      ([1, 2], [1.0, float("nan")], {}), ([1, 2], [1.0, 2.0], {"min_gain": 0}),
                                      ([], [], {})])
def test_bad_curves_are_refused(b, y, kw):
    with pytest.raises(ValueError):
        prof.find_knee(b, y, **kw)


@pytest.mark.given
def test_decode_step_fn_keeps_the_cache_in_place(model):
    step = prof.decode_step_fn(model, 2, 5)
    a, b = step(), step()
    assert a.shape == (2, 1, model.config.vocab_size) and (a == b).all()


@pytest.mark.exercise("8.4")
def test_the_knee_needs_strictly_less_than_the_gain():
    # min_gain 0.5: the roof at batch 2 over batch 1 is 2 × 1.5 = 3 exactly; 3 is not below it
    assert prof.find_knee([1, 2], [2.0, 3.0], min_gain=0.5) is None, \
        "a later point exactly ON the roof y_i·(1 + min_gain)**log2(b_j / b_i) still pays: the test is strict (<)"
    knee_at([1, 2], [2.0, 2.9], 1, min_gain=0.5)


@pytest.mark.exercise("8.4")
def test_gains_are_per_doubling_on_uneven_spacing():
    # 1 -> 3 triples the throughput over log2(3) doublings: exactly 2x per doubling
    knee = knee_at([9, 1, 3], [33.0, 10.0, 30.0], 3, min_gain=0.1)
    assert knee.gains[0] == pytest.approx(1.0), \
        "gains[k] = (y[k+1] / y[k]) ** (1 / log2(b[k+1] / b[k])) - 1, over the points sorted by batch"
    assert knee.gains[1] == pytest.approx(1.1 ** (1 / np.log2(3)) - 1)
    assert isinstance(knee.batch, int) and knee.throughput == 30.0


@pytest.mark.exercise("8.4")
def test_sweep_times_each_distinct_size_once_with_the_given_clock(model):
    reads = []

    def clock():  # every read is one second after the last: each run takes exactly 1 s
        reads.append(1)
        return float(len(reads))

    pts = prof.batch_sweep(model, [4, 1, 4, 2, 1], context=4, repeat=3, warmup=1, clock=clock)
    assert [p.batch for p in pts] == [1, 2, 4], "one SweepPoint per DISTINCT batch size, sorted"
    assert len(reads) == 3 * 2 * 3, "batch_sweep must time with time_fn(..., repeat=repeat, clock=clock)"
    assert [(p.step_s, p.tokens_per_s, p.spread) for p in pts] == [(1.0, 1.0, 0.0), (1.0, 2.0, 0.0), (1.0, 4.0, 0.0)]
