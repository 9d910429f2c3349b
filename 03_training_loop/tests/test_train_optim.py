"""Exercises 3.1–3.4: the optimisers, the schedule and clipping, step by step against PyTorch.

Each test gives an engine parameter and a torch parameter the same values, feeds both the
same gradients for several steps, and compares. Tolerances: float64 arrays, so agreement
to 1e-10 relative is expected (only the order of floating-point operations differs).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import course
from solutions.autograd import Tensor

train = course.load("train")

RTOL, ATOL = 1e-10, 1e-12


def _pair(shapes, seed):
    """Engine parameters and torch twins holding the same float64 values."""
    rng = np.random.default_rng(seed)
    ours = [Tensor(rng.normal(size=s), requires_grad=True) for s in shapes]
    theirs = [torch.tensor(p.data.copy(), requires_grad=True) for p in ours]
    return ours, theirs


def _run(ours, theirs, opt, make_torch_opt, steps, seed, lr_for_step=None):
    """Feed both optimisers the same random gradients; compare after every step.

    Ours runs first (so that an unfinished exercise fails at once, before any torch work).
    """
    rng = np.random.default_rng(seed + 1)
    grads = [[rng.normal(size=p.shape) * rng.choice([1e-3, 1.0, 30.0]) for p in ours] for _ in range(steps)]
    lrs = [lr_for_step(s) for s in range(steps)] if lr_for_step else [None] * steps
    trajectory = []
    for step_grads, lr in zip(grads, lrs):
        if lr is not None:
            opt.lr = lr
        for p, g in zip(ours, step_grads):
            p.grad = g.copy()
        opt.step()
        trajectory.append([p.data.copy() for p in ours])
    torch_opt = make_torch_opt(theirs)
    for step, (step_grads, lr, expected) in enumerate(zip(grads, lrs, trajectory)):
        if lr is not None:
            for group in torch_opt.param_groups:
                group["lr"] = lr
        for q, g in zip(theirs, step_grads):
            q.grad = torch.tensor(g)
        torch_opt.step()
        for mine, q in zip(expected, theirs):
            np.testing.assert_allclose(mine, q.detach().numpy(), rtol=RTOL, atol=ATOL,
                                       err_msg=f"parameters differ from torch after step {step + 1}")


shapes = st.lists(st.tuples(st.integers(1, 5), st.integers(1, 4)), min_size=1, max_size=3)


@pytest.mark.exercise("3.1")
@settings(max_examples=20, deadline=None)
@given(shapes=shapes, momentum=st.sampled_from([0.0, 0.5, 0.9, 0.99]), lr=st.floats(1e-3, 0.5),
       wd=st.sampled_from([0.0, 1e-2, 0.3]), seed=st.integers(0, 10**6))
def test_sgd_momentum_matches_torch(shapes, momentum, lr, wd, seed):
    ours, theirs = _pair(shapes, seed)
    opt = train.SGD(ours, lr=lr, momentum=momentum, weight_decay=wd)
    _run(ours, theirs, opt, lambda ps: torch.optim.SGD(ps, lr=lr, momentum=momentum, weight_decay=wd),
         steps=6, seed=seed)


@pytest.mark.exercise("3.1")
def test_sgd_momentum_builds_speed_and_skips_missing_grads():
    p, q = Tensor(np.zeros(3), requires_grad=True), Tensor(np.ones(2), requires_grad=True)
    opt = train.SGD([p, q], lr=0.1, momentum=0.9)
    for _ in range(3):  # a constant gradient: steps of 0.1, 0.19, 0.271 (velocity 1, 1.9, 2.71)
        p.grad = np.ones(3)
        opt.step()
    np.testing.assert_allclose(p.data, -(0.1 + 0.19 + 0.271) * np.ones(3), rtol=1e-12,
                               err_msg="the velocity must carry over from step to step (v = momentum * v + g)")
    np.testing.assert_array_equal(q.data, np.ones(2))  # no gradient: untouched
    w = Tensor(np.full(2, 2.0), requires_grad=True)
    opt = train.SGD([w], lr=0.1, momentum=0.5, weight_decay=0.1)
    w.grad = np.array([1.0, -1.0])
    opt.step()
    np.testing.assert_array_equal(w.grad, [1.0, -1.0], err_msg="SGD.step must not modify the gradients "
                                  "(the decayed gradient g = grad + weight_decay * p is a new array)")
    np.testing.assert_allclose(w.data, [2.0 - 0.1 * 1.2, 2.0 - 0.1 * -0.8], rtol=1e-12)


@pytest.mark.exercise("3.2")
@settings(max_examples=20, deadline=None)
@given(shapes=shapes, lr=st.floats(1e-4, 0.1), wd=st.sampled_from([0.0, 0.01, 0.1, 1.0]),
       betas=st.sampled_from([(0.9, 0.999), (0.9, 0.95), (0.5, 0.9)]), eps=st.sampled_from([1e-8, 1e-3]),
       seed=st.integers(0, 10**6))
def test_adamw_matches_torch(shapes, lr, wd, betas, eps, seed):
    ours, theirs = _pair(shapes, seed)
    opt = train.AdamW(ours, lr=lr, betas=betas, eps=eps, weight_decay=wd)
    _run(ours, theirs, opt, lambda ps: torch.optim.AdamW(ps, lr=lr, betas=betas, eps=eps, weight_decay=wd),
         steps=8, seed=seed)


@pytest.mark.exercise("3.2")
def test_adamw_with_a_changing_learning_rate_matches_torch():
    ours, theirs = _pair([(4, 3), (3,)], seed=7)
    opt = train.AdamW(ours, lr=1e-2, weight_decay=0.1)
    _run(ours, theirs, opt, lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1), steps=10, seed=7,
         lr_for_step=lambda s: 1e-2 * (s + 1) / 10)


@pytest.mark.exercise("3.2")
def test_adamw_bias_correction_and_decoupled_decay():
    # bias correction: the first step moves every weight by about lr, whatever the gradient's scale
    p = Tensor(np.zeros(4), requires_grad=True)
    opt = train.AdamW([p], lr=0.01, weight_decay=0.0)
    p.grad = np.array([1e-4, -1.0, 50.0, -3e3])
    opt.step()
    np.testing.assert_allclose(p.data, -0.01 * np.sign(p.grad), rtol=1e-3)
    # decoupled decay: with zero gradients, weights shrink by exactly (1 - lr * wd) per step
    w = Tensor(np.array([2.0, -4.0]), requires_grad=True)
    opt = train.AdamW([w], lr=0.1, weight_decay=0.5)
    for _ in range(3):
        w.grad = np.zeros(2)
        opt.step()
    np.testing.assert_allclose(w.data, np.array([2.0, -4.0]) * 0.95**3, rtol=1e-12,
                               err_msg="decoupled decay: p *= 1 - lr * weight_decay, outside m and v")
    # a parameter without a gradient is skipped entirely: no decay, no step
    frozen, live = Tensor(np.ones(2), requires_grad=True), Tensor(np.ones(2), requires_grad=True)
    opt = train.AdamW([frozen, live], lr=0.1, weight_decay=0.5)
    live.grad = np.ones(2)
    opt.step()
    np.testing.assert_array_equal(frozen.data, np.ones(2), err_msg="a parameter whose grad is None must "
                                  "not change (no decay either)")


@pytest.mark.exercise("3.1")
@pytest.mark.parametrize("kwargs", [dict(lr=0.0), dict(lr=0.1, momentum=1.0), dict(lr=0.1, momentum=-0.1),
                                    dict(lr=0.1, weight_decay=-1.0)])
def test_sgd_rejects_bad_settings(kwargs):
    with pytest.raises(ValueError):
        train.SGD([Tensor(np.zeros(2), requires_grad=True)], **kwargs)
    train.SGD([Tensor(np.zeros(2), requires_grad=True)], lr=0.1).step()  # (no grad: a no-op)


@pytest.mark.exercise("3.2")
@pytest.mark.parametrize("kwargs", [dict(betas=(0.9, 1.0)), dict(eps=0.0), dict(weight_decay=-0.1)])
def test_adamw_rejects_bad_settings(kwargs):
    with pytest.raises(ValueError):
        train.AdamW([Tensor(np.zeros(2), requires_grad=True)], **kwargs)
    train.AdamW([Tensor(np.zeros(2), requires_grad=True)]).step()


# ---------------------------------------------------------------------------- 3.3 schedule

def _torch_schedule(max_lr, min_lr, warmup, total, steps):
    """PyTorch's LinearLR warmup then CosineAnnealingLR: the lr used at each step."""
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=max_lr)
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total - warmup, eta_min=min_lr)
    if warmup:
        warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1 / warmup, end_factor=1.0,
                                                 total_iters=max(warmup - 1, 1))
        sched = torch.optim.lr_scheduler.SequentialLR(opt, [warm, cosine], milestones=[warmup])
    else:
        sched = cosine
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


@pytest.mark.exercise("3.3")
@pytest.mark.filterwarnings("ignore::UserWarning")
@settings(max_examples=25, deadline=None)
@given(warmup=st.integers(2, 30), cosine=st.integers(1, 200), max_lr=st.floats(1e-4, 1.0),
       floor=st.floats(0.0, 0.5))
def test_schedule_matches_torch_linear_then_cosine(warmup, cosine, max_lr, floor):
    total, min_lr = warmup + cosine, max_lr * floor
    ours = [train.lr_schedule(s, max_lr=max_lr, warmup_steps=warmup, total_steps=total, min_lr=min_lr)
            for s in range(total + 1)]
    ref = _torch_schedule(max_lr, min_lr, warmup, total, total + 1)
    bad = [k for k, (a, b) in enumerate(zip(ours, ref)) if not np.isclose(a, b, rtol=1e-9, atol=1e-12)]
    assert not bad, (f"lr at step {bad[0]} is {ours[bad[0]]!r}, expected {ref[bad[0]]!r} (torch's schedule; warmup "
                     f"{warmup}, total {total}): a linear rise to max_lr over the warmup steps, then a half cosine "
                     "from max_lr down to min_lr spread over the steps AFTER warmup, min_lr from total_steps on")


@pytest.mark.exercise("3.3")
def test_schedule_shape():
    lr = [train.lr_schedule(s, max_lr=1.0, warmup_steps=10, total_steps=110, min_lr=0.1) for s in range(150)]
    assert lr[0] == pytest.approx(0.1) and lr[9] == pytest.approx(1.0), \
        f"warmup of 10 steps: step 0 gets 1/10 of max_lr, step 9 all of it; got {lr[0]}, {lr[9]}"
    assert all(a < b for a, b in zip(lr[:9], lr[1:10])), f"the rate rises during warmup: {lr[:10]}"
    assert all(a >= b for a, b in zip(lr[10:110], lr[11:111])), "after warmup the rate never rises"
    assert lr[60] == pytest.approx(0.55), (
        f"step 60 is halfway through the cosine (steps 10-110, after warmup), so its rate is the mean of max_lr "
        f"and min_lr, 0.55; got {lr[60]}: the cosine spans total_steps - warmup_steps, not total_steps")
    assert lr[110:] == [pytest.approx(0.1)] * 40, "from total_steps on the rate stays at min_lr"
    assert train.lr_schedule(0, max_lr=0.5, warmup_steps=0, total_steps=10) == pytest.approx(0.5)


@pytest.mark.exercise("3.3")
@pytest.mark.parametrize("kwargs", [dict(step=-1), dict(step=1.5), dict(warmup_steps=20), dict(min_lr=2.0),
                                    dict(total_steps=0, warmup_steps=0)])
def test_schedule_rejects_bad_input(kwargs):
    args = dict(step=0, max_lr=1.0, warmup_steps=5, total_steps=10, min_lr=0.0) | kwargs
    with pytest.raises(ValueError):
        train.lr_schedule(args.pop("step"), **args)
    assert train.lr_schedule(4, max_lr=1.0, warmup_steps=5, total_steps=10) == pytest.approx(1.0)


# ---------------------------------------------------------------------------- 3.4 clipping

@pytest.mark.exercise("3.4")
@settings(max_examples=30, deadline=None)
@given(shapes=shapes, scale=st.sampled_from([1e-3, 0.1, 1.0, 10.0, 1e3]), max_norm=st.floats(0.05, 5.0),
       seed=st.integers(0, 10**6))
def test_clip_grad_norm_matches_torch(shapes, scale, max_norm, seed):
    ours, theirs = _pair(shapes, seed)
    rng = np.random.default_rng(seed)
    for p, q in zip(ours, theirs):
        g = rng.normal(size=p.shape) * scale
        p.grad, q.grad = g.copy(), torch.tensor(g)
    norm = train.clip_grad_norm(ours, max_norm)  # ours first: a stub fails before any torch work
    ref = torch.nn.utils.clip_grad_norm_(theirs, max_norm)
    assert norm == pytest.approx(float(ref), rel=1e-10)
    for p, q in zip(ours, theirs):
        np.testing.assert_allclose(p.grad, q.grad.numpy(), rtol=1e-10, atol=1e-15)
    after = math.sqrt(sum((p.grad**2).sum() for p in ours))
    assert after <= max_norm * (1 + 1e-9)
    if norm <= max_norm:  # under the limit: nothing changes
        assert after == pytest.approx(norm, rel=1e-12)


@pytest.mark.exercise("3.4")
def test_clip_keeps_direction_and_skips_missing_grads():
    a, b, c = (Tensor(np.zeros(2), requires_grad=True) for _ in range(3))
    a.grad, b.grad = np.array([3.0, 0.0]), np.array([0.0, 4.0])  # global norm 5; c has no grad
    assert train.clip_grad_norm(iter([a, b, c]), 1.0) == pytest.approx(5.0)
    np.testing.assert_allclose(np.concatenate([a.grad, b.grad]), [0.6, 0.0, 0.0, 0.8], rtol=1e-5,
                               err_msg="one factor for ALL gradients (their global norm), not a norm per parameter")
    assert c.grad is None
    small = Tensor(np.zeros(2), requires_grad=True)
    small.grad = np.array([0.3, 0.4])  # norm 0.5, under the limit
    assert train.clip_grad_norm([small], 1.0) == pytest.approx(0.5)
    np.testing.assert_array_equal(small.grad, [0.3, 0.4], err_msg="under max_norm the gradients must not "
                                  "change (clipping only ever scales down)")
    with pytest.raises(ValueError):
        train.clip_grad_norm([a], 0.0)
