"""Exercise 1.7: softmax, log_softmax and cross_entropy against PyTorch (float64, rtol 1e-9),
finite differences, numerical stability, and bad input (given validation)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import course

ag = course.load("autograd")

SETTINGS = settings(max_examples=30, deadline=None, database=None)
seeds = st.integers(0, 2**32 - 1)


@st.composite
def shape_and_axis(draw):
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, max_side=6))
    return shape, draw(st.integers(-len(shape), len(shape) - 1))


@pytest.mark.exercise("1.7")
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@SETTINGS
@given(case=shape_and_axis(), seed=seeds)
@example(case=((2, 3), -1), seed=0)  # a plain first case: a readable first failure
def test_softmax_and_log_softmax_match_torch(torch_check, name, case, seed):
    shape, axis = case
    x = 3 * np.random.default_rng(seed).standard_normal(shape)
    torch_check(lambda t: getattr(ag, name)(t, axis=axis), lambda t: getattr(F, name)(t, dim=axis), [x], seed=seed,
                rule=f"{name} along axis {axis}: its backward is the product of the upstream gradient with "
                     "the slice's whole Jacobian (every output of a slice depends on every input of it), "
                     "as PyTorch's")


@pytest.mark.exercise("1.7")
@SETTINGS
@given(batch=st.integers(1, 16), classes=st.integers(1, 12), seed=seeds)
@example(batch=4, classes=3, seed=0)
def test_cross_entropy_matches_torch(torch_check, batch, classes, seed):
    rng = np.random.default_rng(seed)
    logits = 3 * rng.standard_normal((batch, classes))
    targets = rng.integers(0, classes, batch)
    torch_check(lambda t: ag.cross_entropy(t, targets),
                lambda t: F.cross_entropy(t, torch.from_numpy(targets)), [logits], seed=seed,
                rule=f"cross_entropy is the MEAN over the batch of {batch} rows of -log softmax at each "
                     "row's target, and its gradient is the gradient of that mean, scaled by the upstream "
                     "gradient, as PyTorch's")


@pytest.mark.exercise("1.7")
def test_cross_entropy_finite_differences(fd_check):
    rng = np.random.default_rng(0)
    targets = np.array([0, 2, 2, 1])
    fd_check(lambda t: ag.cross_entropy(t * 2, targets), [rng.standard_normal((4, 3))])
    fd_check(lambda t: (ag.log_softmax(t, axis=0) * ag.softmax(t, axis=1)).sum(), [rng.standard_normal((3, 4))])


@pytest.mark.exercise("1.7")
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_backward_never_forms_the_jacobian(name):
    """The backward of a slice of C elements is a vector-Jacobian product: O(C) memory, not the
    (C, C) Jacobian (which for 2 rows of 2,000 classes would be 64 MB; the input is 32 kB)."""
    import tracemalloc

    x_np = np.random.default_rng(0).standard_normal((2, 2000))
    x = ag.Tensor(x_np, requires_grad=True)
    out = getattr(ag, name)(x)
    upstream = np.random.default_rng(1).standard_normal(out.shape)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        out.backward(upstream)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2_000_000, (f"{name}'s backward allocated {peak / 1e6:.1f} MB for an input of "
                              f"{x_np.nbytes / 1e3:.0f} kB: it must not form the (C, C) Jacobian, "
                              "only the vector-Jacobian product (elementwise products and a sum)")
    reference = torch.tensor(x_np, requires_grad=True)
    getattr(F, name)(reference, dim=-1).backward(torch.from_numpy(upstream))
    np.testing.assert_allclose(x.grad, reference.grad.numpy(), rtol=1e-9, atol=1e-12)


@pytest.mark.exercise("1.7")
def test_huge_logits_stay_finite():
    big = np.array([[1000.0, 0.0, -1000.0], [5e4, 5e4, 5e4]])
    x = ag.Tensor(big, requires_grad=True)
    with np.errstate(over="raise", invalid="raise"):
        s = ag.softmax(x)
        ls = ag.log_softmax(x)
        loss = ag.cross_entropy(x, np.array([0, 1]))
        loss.backward()
    rows = ("each slice is computed from its own values alone (a constant added to one slice "
            "cancels there, and never reaches another): the rows [1000, 0, -1000] and [5e4, 5e4, 5e4]")
    np.testing.assert_allclose(s.data, [[1, 0, 0], [1 / 3, 1 / 3, 1 / 3]], atol=1e-12,
                               err_msg=f"softmax: {rows} give [1, 0, 0] and [1/3, 1/3, 1/3]")
    np.testing.assert_allclose(ls.data[1], np.log([1 / 3] * 3),
                               err_msg=f"log_softmax: {rows}; the second gives log(1/3) three times")
    np.testing.assert_allclose(ls.data[0], [0.0, -1000.0, -2000.0],
                               err_msg="log_softmax of [1000, 0, -1000] is exactly [0, -1000, -2000]: "
                                       "the log must not be taken of a softmax that underflowed to 0")
    np.testing.assert_allclose(loss.item(), np.log(3) / 2,
                               err_msg=f"cross_entropy: {rows}, targets 0 and 1: mean of 0 and log 3")
    assert np.isfinite(x.grad).all(), "cross_entropy's gradient on huge but finite logits must be finite"
    # shifting every logit of a row by a constant changes nothing
    np.testing.assert_allclose(ag.softmax(ag.Tensor(big[:1] - 999)).data, s.data[:1], atol=1e-12)


@pytest.mark.exercise("1.7")
def test_cross_entropy_keeps_float32_and_is_one_node():
    logits = ag.Tensor(np.random.default_rng(1).standard_normal((8, 5)).astype(np.float32), requires_grad=True)
    loss = ag.cross_entropy(logits, np.arange(8) % 5)
    assert loss.dtype == np.float32 and loss.shape == ()
    assert loss._parents == (logits,), "cross_entropy should be one fused op on the logits"
    loss.backward()
    assert logits.grad.dtype == np.float32
    # each row of the loss's gradient sums to zero: adding a constant to a row changes no loss
    np.testing.assert_allclose(logits.grad.sum(axis=1), 0, atol=1e-7,
                               err_msg="adding one constant to a row of logits changes no loss, so each row "
                                       "of the gradient must sum to 0")


@pytest.mark.given
@pytest.mark.parametrize("logits, targets, error, pattern", [
    (np.zeros((2, 3)), np.array([0.0, 1.0]), TypeError, "integer"),
    (np.zeros((2, 3)), np.array([0, 3]), ValueError, r"3 .*\[0, 3\)"),
    (np.zeros((2, 3)), np.array([-1, 0]), ValueError, "-1"),
    (np.zeros((2, 3)), np.array([0, 1, 2]), ValueError, r"\(2,\)"),
    (np.zeros(3), np.array([0]), ValueError, r"\(3,\)"),
    (np.zeros((2, 3)), "ab", TypeError, "integer"),
])
def test_cross_entropy_bad_input(logits, targets, error, pattern):
    with pytest.raises(error, match=pattern):
        ag.cross_entropy(ag.Tensor(logits), targets)


@pytest.mark.given
def test_bad_input_to_softmax():
    with pytest.raises(TypeError, match="Tensor or an ndarray"):
        ag.softmax([1.0, 2.0])
    with pytest.raises(ValueError, match="axis 2"):
        ag.log_softmax(ag.Tensor(np.zeros((2, 3))), axis=2)
    with pytest.raises(TypeError, match="axis"):
        ag.softmax(ag.Tensor(np.zeros((2, 3))), axis=(0, 1))
    with pytest.raises(TypeError, match="not a Tensor"):
        ag.cross_entropy(ag.Tensor(np.zeros((2, 3))), ag.Tensor(np.array([0, 1])))
