"""The Tensor (given code) and exercise 1.1: topological order and backward.

The graphs here are built with small ops defined in this file through `Tensor.from_op`
(given code), so that these tests need nothing but exercise 1.1.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

import course

ag = course.load("autograd")


def scale(x, c):
    """y = c * x."""
    return ag.Tensor.from_op(x.data * c, (x,), lambda g: (g * c,))


def add(a, b):
    """a + b (same shapes); hands the SAME gradient array to both parents."""
    return ag.Tensor.from_op(a.data + b.data, (a, b), lambda g: (g, g))


def mul(a, b):
    """a * b (same shapes)."""
    return ag.Tensor.from_op(a.data * b.data, (a, b), lambda g: (g * b.data, g * a.data))


def total(x):
    """The sum of all elements; its backward returns a read-only broadcast view."""
    return ag.Tensor.from_op(x.data.sum(), (x,), lambda g: (np.broadcast_to(g, x.shape),))


# ---------------------------------------------------------------------- given: the Tensor itself
@pytest.mark.given
def test_tensor_keeps_float_dtypes_and_shares_memory():
    a32 = np.ones((2, 3), dtype=np.float32)
    t = ag.Tensor(a32)
    assert t.data is a32 and t.dtype == np.float32 and t.shape == (2, 3) and t.ndim == 2 and t.size == 6
    assert t.grad is None and not t.requires_grad
    assert ag.Tensor(np.ones(2, dtype=np.float16)).dtype == np.float16


@pytest.mark.given
@pytest.mark.parametrize("value", [3, 2.5, True, [1, 2, 3], [[1.0, 2.0]], np.arange(4), np.array([True, False])])
def test_numbers_lists_and_int_arrays_become_float64(value):
    t = ag.Tensor(value)
    assert t.dtype == np.float64
    np.testing.assert_array_equal(t.data, np.asarray(value, dtype=np.float64))


@pytest.mark.given
@pytest.mark.parametrize("value", ["abc", None, {"a": 1}, np.array(["x"]), np.array([1 + 2j])])
def test_unsupported_data_is_a_type_error(value):
    with pytest.raises(TypeError, match="Tensor data"):
        ag.Tensor(value)


@pytest.mark.given
def test_tensor_of_a_tensor_is_a_type_error():
    with pytest.raises(TypeError, match="detach"):
        ag.Tensor(ag.Tensor(1.0))


@pytest.mark.given
def test_item_numpy_detach_zero_grad():
    x = ag.Tensor(np.array([[2.5]]), requires_grad=True)
    assert x.item() == 2.5 and isinstance(x.item(), float)
    assert x.numpy() is x.data
    d = x.detach()
    assert d.data is x.data and not d.requires_grad
    x.grad = np.ones((1, 1))
    x.zero_grad()
    assert x.grad is None
    with pytest.raises(ValueError, match=r"\(2,\)"):
        ag.Tensor([1.0, 2.0]).item()


@pytest.mark.given
def test_from_op_records_a_graph_only_when_needed():
    x = ag.Tensor(np.ones(3), requires_grad=True)
    c = ag.Tensor(np.ones(3))
    y = scale(x, 2.0)
    assert y.requires_grad and y._parents == (x,)
    z = scale(c, 2.0)
    assert not z.requires_grad and z._parents == () and z._backward is None
    assert isinstance(total(x).data, np.ndarray)  # a 0-d result is still an ndarray


@pytest.mark.given
def test_no_grad_records_nothing_and_nests():
    x = ag.Tensor(np.ones(3), requires_grad=True)
    with ag.no_grad():
        assert not ag.is_grad_enabled()
        with ag.no_grad():
            pass
        assert not ag.is_grad_enabled()  # the inner block restored the outer mode
        y = scale(x, 2.0)
    assert ag.is_grad_enabled()
    assert not y.requires_grad and y._parents == ()


@pytest.mark.given
def test_backward_needs_a_graph_and_a_gradient_for_non_scalars():
    with pytest.raises(ValueError, match="does not require grad"):
        ag.Tensor(1.0).backward()
    y = scale(ag.Tensor(np.ones((2, 3)), requires_grad=True), 2.0)
    with pytest.raises(ValueError, match=r"\(2, 3\)"):
        y.backward()


@pytest.mark.given
@pytest.mark.parametrize("other", ["a", None, [1.0, 2.0], 1 + 2j])
def test_unsupported_operands_are_type_errors(other):
    t = ag.Tensor(np.ones(2))
    for op in (lambda: t + other, lambda: other + t, lambda: t * other, lambda: t - other,
               lambda: other / t, lambda: t ** other, lambda: t @ other):
        with pytest.raises(TypeError):
            op()


# ---------------------------------------------------------------------- 1.1: topological order
def random_dag(draw_parents: list[tuple[int, ...]], leaves: int):
    """Nodes 0..leaves-1 are leaves; node i >= leaves is mul/add of earlier nodes."""
    rng = np.random.default_rng(len(draw_parents))
    nodes = [ag.Tensor(rng.uniform(0.5, 1.5, 3), requires_grad=True) for _ in range(leaves)]
    for i, (p, q) in enumerate(draw_parents):
        nodes.append((mul if i % 2 else add)(nodes[p], nodes[q]))
    return nodes


dags = st.tuples(st.integers(2, 4),
                 st.lists(st.tuples(st.integers(0, 99), st.integers(0, 99)), min_size=1, max_size=12))


def build(leaves, picks):
    parents = []
    for i, (p, q) in enumerate(picks):
        n = leaves + i  # nodes available so far
        parents.append((p % n, q % n))
    return random_dag(parents, leaves), parents


@pytest.mark.exercise("1.1")
@settings(max_examples=40, deadline=None, database=None)
@given(dags)
@example((2, [(0, 1), (2, 0), (3, 1)]))  # a first, readable case
def test_topological_order_puts_parents_first(dag):
    nodes, _ = build(*dag)
    root = nodes[-1]
    order = ag.topological_order(root)
    position = {id(t): i for i, t in enumerate(order)}
    assert len(position) == len(order), "a node appears twice"
    assert order[-1] is root
    for t in order:
        for p in t._parents:
            assert position[id(p)] < position[id(t)], "a parent comes after its child"
    # exactly the ancestors of root (and root)
    ancestors, todo = set(), [root]
    while todo:
        t = todo.pop()
        if id(t) not in ancestors:
            ancestors.add(id(t))
            todo.extend(t._parents)
    assert set(position) == ancestors


@pytest.mark.exercise("1.1")
def test_topological_order_skips_constants():
    x = ag.Tensor(np.ones(2), requires_grad=True)
    c = ag.Tensor(np.ones(2))
    y = mul(x, c)
    assert [id(t) for t in ag.topological_order(y)] == [id(x), id(y)]


# ---------------------------------------------------------------------- 1.1: backward
@pytest.mark.exercise("1.1")
@settings(max_examples=40, deadline=None, database=None)
@given(dags)
@example((2, [(0, 1), (2, 0), (3, 1)]))
def test_backward_on_random_dags_matches_torch(dag):
    nodes, parents = build(*dag)
    leaves = dag[0]
    tn = [torch.tensor(n.data, requires_grad=True) for n in nodes[:leaves]]
    for i, (p, q) in enumerate(parents):
        tn.append(tn[p] * tn[q] if i % 2 else tn[p] + tn[q])
    upstream = np.linspace(-1.0, 2.0, 3)
    nodes[-1].backward(upstream)
    tn[-1].backward(torch.from_numpy(upstream))
    for ours, theirs in zip(nodes[:leaves], tn[:leaves]):
        expected = np.zeros(3) if theirs.grad is None else theirs.grad.numpy()
        got = np.zeros(3) if ours.grad is None else ours.grad
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.exercise("1.1")
def test_scalar_backward_seeds_one():
    x = ag.Tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    total(scale(x, 3.0)).backward()
    np.testing.assert_array_equal(x.grad, [3.0, 3.0, 3.0])


@pytest.mark.exercise("1.1")
def test_a_leaf_can_be_the_root():
    x = ag.Tensor(np.array(4.0), requires_grad=True)
    x.backward()
    assert x.grad == 1.0


@pytest.mark.exercise("1.1")
def test_reused_node_accumulates():
    a = ag.Tensor(np.array([1.0, -2.0, 3.0]), requires_grad=True)
    total(mul(a, a)).backward()  # d(a*a)/da = 2a
    np.testing.assert_allclose(a.grad, 2 * a.data)
    b = ag.Tensor(np.array([1.0, 2.0]), requires_grad=True)
    total(add(b, b)).backward()  # d(b+b)/db = 2
    np.testing.assert_allclose(b.grad, [2.0, 2.0])


@pytest.mark.exercise("1.1")
def test_diamond():
    #      a
    #    /   \
    #  b=2a  c=3a
    #    \   /
    #    d=b*c = 6a^2  ->  dd/da = 12a
    a = ag.Tensor(np.array([0.5, -1.0, 2.0]), requires_grad=True)
    b, c = scale(a, 2.0), scale(a, 3.0)
    total(mul(b, c)).backward()
    np.testing.assert_allclose(a.grad, 12 * a.data)


@pytest.mark.exercise("1.1")
def test_second_backward_accumulates_like_pytorch():
    a = ag.Tensor(np.array([1.0, 2.0]), requires_grad=True)
    b = ag.Tensor(np.array([3.0, 5.0]), requires_grad=True)
    y = total(mul(add(a, b), a))  # (a + b) * a: intermediate nodes reused by both passes
    y.backward()
    first_a, first_b = a.grad.copy(), b.grad.copy()
    y.backward()
    np.testing.assert_allclose(a.grad, 2 * first_a)
    np.testing.assert_allclose(b.grad, 2 * first_b)
    a.zero_grad()
    y.backward()
    np.testing.assert_allclose(a.grad, first_a)
    np.testing.assert_allclose(b.grad, 3 * first_b)


@pytest.mark.exercise("1.1")
def test_leaves_never_share_or_alias_gradient_arrays():
    a = ag.Tensor(np.array([1.0, 2.0]), requires_grad=True)
    b = ag.Tensor(np.array([3.0, 4.0]), requires_grad=True)
    upstream = np.array([1.0, 1.0])
    add(a, b).backward(upstream)  # `add` hands one array to both parents
    assert not np.shares_memory(a.grad, b.grad)
    assert not np.shares_memory(a.grad, upstream) and not np.shares_memory(b.grad, upstream)
    a.grad *= 10  # an optimiser may scale a gradient in place
    np.testing.assert_array_equal(b.grad, [1.0, 1.0])
    np.testing.assert_array_equal(upstream, [1.0, 1.0])
    c = ag.Tensor(np.ones((2, 2)), requires_grad=True)
    total(c).backward()  # backward gave a read-only broadcast view
    assert c.grad.flags.writeable and c.grad.shape == (2, 2)
    total(c).backward()
    np.testing.assert_array_equal(c.grad, np.full((2, 2), 2.0))


@pytest.mark.exercise("1.1")
def test_deep_chain_does_not_recurse():
    x = ag.Tensor(np.array([1.0, 2.0]), requires_grad=True)
    y = x
    for _ in range(10_000):
        y = scale(y, 1.0001)
    assert len(ag.topological_order(y)) == 10_001
    total(y).backward()
    np.testing.assert_allclose(x.grad, [1.0001 ** 10_000] * 2, rtol=1e-9)


@pytest.mark.exercise("1.1")
def test_explicit_gradient_for_a_non_scalar_output():
    x = ag.Tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    g = np.arange(6.0).reshape(2, 3) - 2
    scale(x, 3.0).backward(g)
    np.testing.assert_allclose(x.grad, 3 * g)
    try:
        scale(x, 3.0).backward(np.ones((3, 2)))
    except ValueError as error:
        assert re.search(r"\(3, 2\).*\(2, 3\)|\(2, 3\).*\(3, 2\)", str(error)), (
            f"backward(grad) of shape (3, 2) on a tensor of shape (2, 3): the ValueError must "
            f"name both shapes, got {error!r}")
    except Exception as error:  # e.g. NumPy's broadcast error from an unchecked grad
        pytest.fail(f"backward(grad) with grad of shape (3, 2) on a tensor of shape (2, 3) must "
                    f"raise a ValueError naming both shapes before any gradient flows (a grad of "
                    f"another shape is never broadcast), got {type(error).__name__}: {error}")
    else:
        pytest.fail("backward(grad) with grad of shape (3, 2) on a tensor of shape (2, 3) must "
                    "raise a ValueError naming both shapes (a grad of another shape is never "
                    "broadcast); it raised nothing")


@pytest.mark.exercise("1.1")
def test_gradients_take_the_leaf_dtype():
    x = ag.Tensor(np.ones(3, dtype=np.float32), requires_grad=True)
    # an op whose backward hands back float64 (as a float64 constant operand would)
    y = ag.Tensor.from_op(x.data * 2, (x,), lambda g: (g.astype(np.float64) * 2.0,))
    total(y).backward()
    assert x.grad.dtype == np.float32, (
        f"a float32 leaf got a .grad of dtype {x.grad.dtype}: each parent's gradient is cast to "
        f"that parent's dtype (an op's backward may hand back float64), so a leaf's .grad always "
        f"has the leaf's dtype")
    np.testing.assert_array_equal(x.grad, [2.0, 2.0, 2.0])
