"""Shared checks for stage 01's tests: the engine against PyTorch and against finite differences.

Both run in float64, where the engine and PyTorch agree to rounding error: the tolerances
below (rtol 1e-9) leave room only for a different summation order, not for a wrong formula.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import pytest
import torch

import course

RTOL, ATOL = 1e-9, 1e-11


def _check_against_torch(ours: Callable, theirs: Callable, arrays: Sequence[np.ndarray],
                         seed: int = 0, rtol: float = RTOL, atol: float = ATOL, rule: str = "") -> None:
    """Run `ours` on engine Tensors and `theirs` on torch tensors made from the same float64
    arrays; backpropagate the same random upstream gradient through both and compare the
    outputs and every input's gradient. `rule`, when given, opens every failure message: the
    contract the comparison checks, so that a bare tolerance failure names what was broken."""
    lead = f"{rule} · " if rule else ""
    ag = course.load("autograd")
    arrays = [np.asarray(a, dtype=np.float64) for a in arrays]
    xs = [ag.Tensor(a.copy(), requires_grad=True) for a in arrays]
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    out, ref = ours(*xs), theirs(*ts)
    assert out.shape == tuple(ref.shape), f"output shape {out.shape}, torch gives {tuple(ref.shape)}"
    np.testing.assert_allclose(out.data, ref.detach().numpy(), rtol=rtol, atol=atol, err_msg=f"{lead}forward")
    upstream = np.random.default_rng(seed).standard_normal(out.shape)
    out.backward(upstream)
    ref.backward(torch.from_numpy(upstream))
    for i, (x, t) in enumerate(zip(xs, ts)):
        assert x.grad is not None, f"input {i} got no gradient"
        assert x.grad.shape == x.shape, f"input {i}: gradient shape {x.grad.shape}, input shape {x.shape}"
        np.testing.assert_allclose(x.grad, t.grad.numpy(), rtol=rtol, atol=atol, err_msg=f"{lead}gradient of input {i}")


def _check_finite_differences(f: Callable, arrays: Sequence[np.ndarray], eps: float = 1e-6,
                              rtol: float = 1e-5, atol: float = 1e-7) -> None:
    """Compare the engine's gradient of the scalar f(*tensors) with central differences
    (f(x + eps) - f(x - eps)) / 2 eps, one element at a time, in float64."""
    ag = course.load("autograd")
    arrays = [np.array(a, dtype=np.float64) for a in arrays]
    xs = [ag.Tensor(a.copy(), requires_grad=True) for a in arrays]
    f(*xs).backward()
    for i, a in enumerate(arrays):
        numeric = np.zeros_like(a)
        for j in np.ndindex(a.shape):
            old = a[j]
            a[j] = old + eps
            up = f(*[ag.Tensor(b) for b in arrays]).item()
            a[j] = old - eps
            down = f(*[ag.Tensor(b) for b in arrays]).item()
            a[j] = old
            numeric[j] = (up - down) / (2 * eps)
        np.testing.assert_allclose(xs[i].grad, numeric, rtol=rtol, atol=atol, err_msg=f"gradient of input {i}")


@pytest.fixture(scope="session")
def torch_check() -> Callable:
    return _check_against_torch


@pytest.fixture(scope="session")
def fd_check() -> Callable:
    return _check_finite_differences
