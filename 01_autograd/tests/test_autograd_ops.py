"""Exercises 1.2-1.6: every operation against PyTorch in float64 on Hypothesis-made shapes,
plus finite-difference checks and the bad-input cases.

Tolerance: rtol 1e-9 (see conftest.py): the same formula in float64 agrees to rounding.
"""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import course

ag = course.load("autograd")

SETTINGS = settings(max_examples=30, deadline=None, database=None)
seeds = st.integers(0, 2**32 - 1)
pairs = hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, max_side=4)
shapes = hnp.array_shapes(min_dims=1, max_dims=4, max_side=5)
# Each property test first runs one plain explicit @example: a readable first failure.
ROW_PLUS_MATRIX = hnp.BroadcastableShapes(input_shapes=((2, 3), (3,)), result_shape=(2, 3))


def randn(rng, shape):
    return rng.standard_normal(shape)


def away_from_zero(rng, shape):
    """Values with |v| in [0.5, 2], for divisors."""
    return rng.choice([-1.0, 1.0], shape) * rng.uniform(0.5, 2.0, shape)


# ---------------------------------------------------------------------- 1.2 arithmetic
BINARY = {
    "+": (lambda a, b: a + b),
    "-": (lambda a, b: a - b),
    "*": (lambda a, b: a * b),
    "/": (lambda a, b: a / b),
}


@pytest.mark.exercise("1.2")
@pytest.mark.parametrize("op", list(BINARY))
@SETTINGS
@given(shapes=pairs, seed=seeds)
@example(shapes=ROW_PLUS_MATRIX, seed=0)
def test_binary_ops_broadcast_both_ways(torch_check, op, shapes, seed):
    rng = np.random.default_rng(seed)
    sa, sb = shapes.input_shapes
    a = randn(rng, sa)
    b = away_from_zero(rng, sb) if op == "/" else randn(rng, sb)
    torch_check(BINARY[op], BINARY[op], [a, b], seed=seed)


@pytest.mark.exercise("1.2")
@SETTINGS
@given(shapes=pairs, seed=seeds)
@example(shapes=ROW_PLUS_MATRIX, seed=0)
def test_power_with_tensor_exponent(torch_check, shapes, seed):
    rng = np.random.default_rng(seed)
    sa, sb = shapes.input_shapes
    base, exponent = rng.uniform(0.5, 2.0, sa), rng.uniform(-2.0, 2.0, sb)
    torch_check(lambda a, b: a ** b, lambda a, b: a ** b, [base, exponent], seed=seed)


@pytest.mark.exercise("1.2")
@pytest.mark.parametrize("name, ours, theirs", [
    ("t + 2", lambda t: t + 2, lambda t: t + 2),
    ("2 + t", lambda t: 2 + t, lambda t: 2 + t),
    ("1.5 - t", lambda t: 1.5 - t, lambda t: 1.5 - t),
    ("t - 1.5", lambda t: t - 1.5, lambda t: t - 1.5),
    ("3 * t", lambda t: 3 * t, lambda t: 3 * t),
    ("2 / t", lambda t: 2 / t, lambda t: 2 / t),
    ("t / 4", lambda t: t / 4, lambda t: t / 4),
    ("t ** 3", lambda t: t ** 3, lambda t: t ** 3),
    ("t ** 0.5", lambda t: t ** 0.5, lambda t: t ** 0.5),
    ("2 ** t", lambda t: 2 ** t, lambda t: 2 ** t),
    ("-t", lambda t: -t, lambda t: -t),
    ("array * t", lambda t: np.arange(1.0, 4.0) * t, lambda t: torch.arange(1.0, 4.0, dtype=torch.float64) * t),
    ("t - array", lambda t: t - np.arange(3.0), lambda t: t - torch.arange(3.0, dtype=torch.float64)),
    ("array / t", lambda t: np.arange(3.0) / t, lambda t: torch.arange(3.0, dtype=torch.float64) / t),
])
def test_numbers_arrays_and_reflected_forms(torch_check, name, ours, theirs):
    x = np.random.default_rng(1).uniform(0.5, 2.0, (2, 3))
    torch_check(ours, theirs, [x])


@pytest.mark.exercise("1.2")
def test_power_finite_differences(fd_check):
    rng = np.random.default_rng(2)
    # one-element shapes (broadcast (1,) against (1, 1)): a scalar result without needing sum()
    for base, exponent in rng.uniform([0.5, -1.0], [2.0, 1.0], (5, 2)):
        fd_check(lambda a, b: (a ** b) * a - b / a + 2 ** b - (-a), [np.full((1, 1), base), np.full(1, exponent)])


@pytest.mark.exercise("1.2")
def test_power_corners_match_torch():
    """x ** 0 is the constant 1: its gradient is 0 everywhere, at x = 0 too (PyTorch's), not
    b * a**(b-1) = 0 * inf = nan; and the exponent's gradient at a = 0 <= b is 0, not log 0."""
    x = ag.Tensor(np.array([0.0, 1.0, -2.0, 0.5]), requires_grad=True)
    with np.errstate(all="raise"):
        (x ** 0).backward(np.ones(4))  # no sum(): 1.2's tests need only 1.1 and 1.2
    assert np.isfinite(x.grad).all(), (
        f"the gradient of x ** 0 must be 0 everywhere, at x = 0 too (PyTorch gives 0), got {x.grad}")
    np.testing.assert_array_equal(x.grad, [0.0, 0.0, 0.0, 0.0], err_msg="the gradient of x ** 0 must be 0")
    base, exponent = np.array([0.0, 0.0, 0.0, 1.5, 2.0]), np.array([0.0, 2.0, 1.0, 0.0, -1.0])
    a, b = ag.Tensor(base, requires_grad=True), ag.Tensor(exponent, requires_grad=True)
    ta, tb = torch.tensor(base, requires_grad=True), torch.tensor(exponent, requires_grad=True)
    (a ** b).backward(np.ones(5))
    (ta ** tb).backward(torch.ones(5, dtype=torch.float64))
    np.testing.assert_allclose(a.grad, ta.grad.numpy(), rtol=1e-12,
                               err_msg="d(a**b)/da at the corners a = 0, b = 0 must be PyTorch's")
    np.testing.assert_allclose(b.grad, tb.grad.numpy(), rtol=1e-12,
                               err_msg="d(a**b)/db must be 0 where a == 0 and b >= 0 (PyTorch's)")


@pytest.mark.exercise("1.2")
def test_float32_stays_float32():
    x = ag.Tensor(np.ones((2, 3), dtype=np.float32), requires_grad=True)
    w = ag.Tensor(np.full(3, 2.0, dtype=np.float32), requires_grad=True)
    y = (x * 2.0 + 1 - x / 3) * w ** 2
    assert y.dtype == np.float32
    y.backward(np.ones((2, 3), dtype=np.float32))
    assert x.grad.dtype == np.float32 and w.grad.dtype == np.float32


@pytest.mark.exercise("1.2")
def test_mixed_dtypes_give_each_leaf_its_own_dtype():
    x32 = ag.Tensor(np.ones(3, dtype=np.float32), requires_grad=True)
    y64 = ag.Tensor(np.full(3, 2.0), requires_grad=True)
    z = x32 * y64
    assert z.dtype == np.float64
    z.backward(np.ones(3))
    assert x32.grad.dtype == np.float32 and y64.grad.dtype == np.float64
    np.testing.assert_array_equal(x32.grad, [2, 2, 2])


@pytest.mark.exercise("1.2")
def test_no_grad_for_constant_operands():
    x = ag.Tensor(np.ones(3), requires_grad=True)
    c = ag.Tensor(np.ones(3))
    (x * c + c).backward(np.ones(3))
    assert c.grad is None and x.grad is not None
    with ag.no_grad():
        assert not (x * 2).requires_grad


@pytest.mark.exercise("1.2")
@pytest.mark.parametrize("op", list(BINARY) + ["**"])
def test_shape_mismatch_names_both_shapes(op):
    a, b = ag.Tensor(np.ones((2, 3))), ag.Tensor(np.ones(4))
    fn = BINARY.get(op, lambda a, b: a ** b)
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(4,\)"):
        fn(a, b)


# ---------------------------------------------------------------------- 1.3 reductions
@st.composite
def shape_and_axis(draw):
    shape = draw(shapes)
    axis = draw(st.none() | st.lists(st.integers(0, len(shape) - 1), min_size=1, unique=True).map(tuple)
                | st.integers(-len(shape), len(shape) - 1))
    return shape, axis, draw(st.booleans())


def torch_dims(axis, ndim):
    if axis is None:
        return tuple(range(ndim))
    return axis if isinstance(axis, tuple) else (axis,)


@pytest.mark.exercise("1.3")
@pytest.mark.parametrize("name", ["sum", "mean", "max"])
@SETTINGS
@given(case=shape_and_axis(), seed=seeds)
@example(case=((2, 3), 1, False), seed=0)
def test_reductions_match_torch(torch_check, name, case, seed):
    shape, axis, keepdims = case
    x = np.random.default_rng(seed).standard_normal(shape)
    torch_name = {"sum": "sum", "mean": "mean", "max": "amax"}[name]
    torch_check(lambda t: getattr(t, name)(axis=axis, keepdims=keepdims),
                lambda t: getattr(t, torch_name)(dim=torch_dims(axis, len(shape)), keepdim=keepdims),
                [x], seed=seed)


@pytest.mark.exercise("1.3")
def test_max_splits_the_gradient_between_ties():
    x = ag.Tensor(np.array([[1.0, 3.0, 3.0], [5.0, 2.0, 5.0]]), requires_grad=True)
    x.max(axis=1).backward(np.array([1.0, 4.0]))
    rule = ("the max's gradient goes only to the elements equal to the maximum of their slice, "
            "and where k of them tie each gets 1/k of that slice's gradient (torch.amax)")
    np.testing.assert_allclose(x.grad, [[0, 0.5, 0.5], [2.0, 0, 2.0]], err_msg=(
        f"[[1, 3, 3], [5, 2, 5]].max(axis=1) with upstream [1, 4]: {rule}; expected "
        f"[[0, 0.5, 0.5], [2, 0, 2]], got {x.grad.tolist()}"))
    y = ag.Tensor(np.array([2.0, 7.0, 7.0, 7.0]), requires_grad=True)
    y.max().backward()
    np.testing.assert_allclose(y.grad, [0, 1 / 3, 1 / 3, 1 / 3], err_msg=(
        f"[2, 7, 7, 7].max(): {rule}; expected [0, 1/3, 1/3, 1/3], got {y.grad.tolist()}"))


@pytest.mark.exercise("1.3")
def test_reductions_finite_differences(fd_check):
    x = np.random.default_rng(3).standard_normal((3, 4))
    fd_check(lambda t: (t.sum(axis=0) * t.mean(axis=1, keepdims=True)).max(), [x])


@pytest.mark.exercise("1.3")
def test_reductions_keep_float32():
    x = ag.Tensor(np.ones((4, 5), dtype=np.float32), requires_grad=True)
    for y in (x.sum(axis=0), x.mean(), x.max(axis=(0, 1))):
        assert y.dtype == np.float32
        y.backward(np.ones(y.shape, dtype=np.float32))
        assert x.grad.dtype == np.float32


@pytest.mark.given
@pytest.mark.parametrize("axis", [2, -3, (0, 0), (0, 5)])
def test_bad_axis_is_a_value_error(axis):
    x = ag.Tensor(np.ones((2, 3)))
    for name in ("sum", "mean", "max"):
        with pytest.raises(ValueError, match="axis"):
            getattr(x, name)(axis=axis)


@pytest.mark.given
def test_non_integer_axis_is_a_type_error():
    with pytest.raises(TypeError, match="axis"):
        ag.Tensor(np.ones((2, 3))).sum(axis=1.0)


# ---------------------------------------------------------------------- 1.4 matmul
@pytest.mark.exercise("1.4")
@SETTINGS
@given(shapes=hnp.mutually_broadcastable_shapes(signature="(n,k),(k,m)->(n,m)", max_dims=4, max_side=5),
       seed=seeds)
@example(shapes=hnp.BroadcastableShapes(((2, 3), (3, 4)), (2, 4)), seed=0)
def test_matmul_2d_and_batched(torch_check, shapes, seed):
    sa, sb = shapes.input_shapes
    rng = np.random.default_rng(seed)
    torch_check(lambda a, b: a @ b, lambda a, b: a @ b, [randn(rng, sa), randn(rng, sb)], seed=seed)


@pytest.mark.exercise("1.4")
@pytest.mark.parametrize("sa, sb", [((3, 4), (4, 2)), ((5, 3, 4), (4, 2)), ((4, 2), (5, 2, 3)),
                                    ((2, 1, 3, 4), (5, 4, 2))])
def test_matmul_with_one_side_constant(sa, sb):
    rng = np.random.default_rng(0)
    a_np, b_np = randn(rng, sa), randn(rng, sb)
    for grad_side in ("a", "b"):
        a = ag.Tensor(a_np, requires_grad=grad_side == "a")
        b = ag.Tensor(b_np, requires_grad=grad_side == "b")
        ta = torch.tensor(a_np, requires_grad=grad_side == "a")
        tb = torch.tensor(b_np, requires_grad=grad_side == "b")
        (a @ b).sum().backward()
        (ta @ tb).sum().backward()
        ours, theirs = (a, ta) if grad_side == "a" else (b, tb)
        np.testing.assert_allclose(ours.grad, theirs.grad.numpy(), rtol=1e-9, atol=1e-11)


@pytest.mark.exercise("1.4")
def test_array_at_tensor_is_reflected(torch_check):
    rng = np.random.default_rng(4)
    m = randn(rng, (2, 3))
    torch_check(lambda t: m @ t, lambda t: torch.from_numpy(m) @ t, [randn(rng, (3, 4))])


@pytest.mark.exercise("1.4")
def test_matmul_mismatch_names_both_shapes():
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(4, 5\)"):
        ag.Tensor(np.ones((2, 3))) @ ag.Tensor(np.ones((4, 5)))
    with pytest.raises(ValueError, match=r"\(2, 2, 3\).*\(3, 3, 4\)"):
        ag.Tensor(np.ones((2, 2, 3))) @ ag.Tensor(np.ones((3, 3, 4)))


@pytest.mark.given
def test_matmul_needs_two_dimensions():
    with pytest.raises(ValueError, match=r"\(3,\).*\(3, 2\)"):
        ag.Tensor(np.ones(3)) @ ag.Tensor(np.ones((3, 2)))


# ---------------------------------------------------------------------- 1.5 shapes and indexing
REPEATS_RULE = ("the gradient of t[index] has t's shape, 0 where nothing was picked, and an element "
                "picked several times gets the SUM of the gradients of all its picks (not the last one's)")

@st.composite
def shape_and_permutation(draw):
    shape = draw(shapes)
    return shape, tuple(draw(st.permutations(range(len(shape)))))


@pytest.mark.exercise("1.5")
@SETTINGS
@given(case=shape_and_permutation(), seed=seeds)
@example(case=((2, 3, 4), (2, 0, 1)), seed=0)
def test_reshape_and_transpose(torch_check, case, seed):
    shape, perm = case
    x = np.random.default_rng(seed).standard_normal(shape)
    new_shape = (-1,) + shape[:1] if len(shape) > 1 else (shape[0], 1)
    rule = (f"reshape, then transpose{perm}: each backward sends every element's gradient back to "
            "where that element came from, so the gradient of a transpose is g with its axes put "
            "back in the input's order (not permuted by the same axes again: a swap of two axes "
            "is its own undoing, a 3-axis rotation is not)")
    torch_check(lambda t: t.reshape(new_shape).reshape(*reversed(shape)).transpose(*perm) * 2,
                lambda t: t.reshape(new_shape).reshape(*reversed(shape)).permute(*perm) * 2, [x], seed=seed,
                rule=rule)
    torch_check(lambda t: t.T, lambda t: t.permute(*reversed(range(len(shape)))), [x], seed=seed, rule=rule)


@st.composite
def basic_indices(draw):
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5))
    return shape, draw(hnp.basic_indices(shape, allow_newaxis=False, allow_ellipsis=True))


@pytest.mark.exercise("1.5")
@SETTINGS
@given(case=basic_indices(), seed=seeds)
@example(case=((4, 3), (slice(1, 3), 0)), seed=0)
def test_basic_indexing(torch_check, case, seed):
    shape, index = case
    items = index if isinstance(index, tuple) else (index,)
    if any(isinstance(i, slice) and i.step is not None and i.step < 0 for i in items):
        return  # PyTorch has no negative steps; the engine does (NumPy's), checked below
    x = np.random.default_rng(seed).standard_normal(shape)
    torch_check(lambda t: t[index] * 1, lambda t: t[index] * 1, [x], seed=seed)


@pytest.mark.exercise("1.5")
def test_negative_step_slices_by_finite_differences(fd_check):
    x = np.random.default_rng(5).standard_normal((4, 3))
    fd_check(lambda t: (t[::-2, 1:] * t[1::2, :2]).sum(), [x])


@pytest.mark.exercise("1.5")
@SETTINGS
@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, max_side=5), seed=seeds)
@example(shape=(4, 3), seed=0)
def test_integer_array_indexing_accumulates_repeats(torch_check, shape, seed):
    check = functools.partial(torch_check, seed=seed, rule=REPEATS_RULE)
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, shape[0], size=7)  # repeats are likely
    x = rng.standard_normal(shape)
    check(lambda t: t[rows], lambda t: t[torch.from_numpy(rows)], [x])
    if len(shape) >= 2:
        cols = rng.integers(-shape[1], shape[1], size=7)
        check(lambda t: t[rows, cols], lambda t: t[torch.from_numpy(rows), torch.from_numpy(cols)], [x])
        check(lambda t: t[1:, cols], lambda t: t[1:, torch.from_numpy(cols)], [x])
    mask = x > 0
    check(lambda t: t[mask], lambda t: t[torch.from_numpy(mask)], [x])


@pytest.mark.exercise("1.5")
def test_repeated_index_gradient_counts_each_pick():
    x = ag.Tensor(np.zeros(4), requires_grad=True)
    x[[0, 0, 2, 0]].sum().backward()
    np.testing.assert_array_equal(x.grad, [3, 0, 1, 0], err_msg=f"x[[0, 0, 2, 0]].sum(): {REPEATS_RULE}")
    x.zero_grad()
    x[np.array([[1, 1], [3, 1]])].sum().backward()
    np.testing.assert_array_equal(x.grad, [0, 3, 0, 1], err_msg=f"x[[[1, 1], [3, 1]]].sum(): {REPEATS_RULE}")


@pytest.mark.exercise("1.5")
def test_reshape_mismatch_names_shapes():
    with pytest.raises(ValueError) as caught:
        ag.Tensor(np.ones((2, 3))).reshape(4, 2)
    assert re.search(r"\(2, 3\).*\(4, 2\)", str(caught.value)), (
        "a reshape to another number of elements is a ValueError naming this tensor's shape FIRST, "
        f"then the one asked for: (2, 3) reshaped to (4, 2) must say '(2, 3) ... (4, 2)'; got {str(caught.value)!r}")


@pytest.mark.given
@pytest.mark.parametrize("axes", [(0,), (0, 0), (0, 2), (1, 2, 0)])
def test_bad_transpose_axes(axes):
    with pytest.raises(ValueError, match=r"\(2, 3\)"):
        ag.Tensor(np.ones((2, 3))).transpose(*axes)


@pytest.mark.given
def test_tensor_index_is_a_type_error():
    with pytest.raises(TypeError, match="index"):
        ag.Tensor(np.ones(3))[ag.Tensor(np.array([0.0]))]


# ---------------------------------------------------------------------- 1.6 nonlinearities
UNARY = {
    "exp": (lambda t: t.exp(), torch.exp),
    "log": (lambda t: t.log(), torch.log),
    "tanh": (lambda t: t.tanh(), torch.tanh),
    "relu": (lambda t: t.relu(), torch.relu),
    "sigmoid": (lambda t: t.sigmoid(), torch.sigmoid),
}


@pytest.mark.exercise("1.6")
@pytest.mark.parametrize("name", list(UNARY))
@SETTINGS
@given(shape=st.one_of(st.just(()), shapes), seed=seeds)
@example(shape=(2, 3), seed=0)
def test_unary_ops_match_torch(torch_check, name, shape, seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.1, 3.0, shape) if name == "log" else 3 * rng.standard_normal(shape)
    torch_check(UNARY[name][0], UNARY[name][1], [x], seed=seed)


@pytest.mark.exercise("1.6")
def test_relu_gradient_at_zero_is_zero_like_torch():
    x = ag.Tensor(np.array([-1.0, 0.0, 2.0]), requires_grad=True)
    x.relu().sum().backward()
    np.testing.assert_array_equal(x.grad, [0.0, 0.0, 1.0])


@pytest.mark.exercise("1.6")
def test_sigmoid_does_not_overflow():
    x = ag.Tensor(np.array([-1000.0, 0.0, 1000.0]), requires_grad=True)
    with np.errstate(all="raise"):
        y = x.sigmoid()
        y.sum().backward()
    np.testing.assert_allclose(y.data, [0.0, 0.5, 1.0])
    np.testing.assert_allclose(x.grad, [0.0, 0.25, 0.0])


@pytest.mark.exercise("1.6")
@pytest.mark.parametrize("name", list(UNARY))
def test_unary_ops_keep_float32(name):
    x = ag.Tensor(np.linspace(0.5, 2.0, 6, dtype=np.float32).reshape(2, 3), requires_grad=True)
    y = UNARY[name][0](x)
    assert y.dtype == np.float32
    y.sum().backward()
    assert x.grad.dtype == np.float32


@pytest.mark.exercise("1.6")
def test_composite_finite_differences(fd_check):
    rng = np.random.default_rng(6)

    def f(a, b):
        return ((a @ b).tanh().sigmoid() + (a.exp() * 0.1).log().sum(axis=1, keepdims=True)
                - (a.relu() + 0.5).max(axis=1, keepdims=True)).mean()

    fd_check(f, [rng.standard_normal((3, 4)), rng.standard_normal((4, 2))])
