"""Stage 01, held-out cases: other shapes, seeds and corners than the visible tests show.

Every case is checked against PyTorch in float64 (`torch_check`, rtol 1e-9) or against
central differences (`fd_check`), or states an invariant the visible tests do not.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import course

ag = course.load("autograd")


def rand(seed, shape, low=None, high=None):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape) if low is None else rng.uniform(low, high, shape)


def engine_run(ours, arrays, seed=0):
    """What `torch_check(ours, ..., arrays, seed=seed)` looks at, as plain data for
    `course.answer`: the engine's output on float64 Tensors of `arrays` and every input's
    gradient for the same random upstream gradient."""
    xs = [ag.Tensor(np.array(a, dtype=np.float64), requires_grad=True) for a in arrays]
    out = ours(*xs)
    out.backward(np.random.default_rng(seed).standard_normal(out.shape))
    return {"out": out.data, "grads": [x.grad for x in xs]}


# ---------------------------------------------------------------------- 1.1
def _from_op_sum(*xs):
    """A node with many parents (same shapes): y = sum(xs); each parent gets g."""
    return ag.Tensor.from_op(sum(x.data for x in xs), tuple(xs), lambda g: tuple(g for _ in xs))


def _from_op_mul(a, b):
    return ag.Tensor.from_op(a.data * b.data, (a, b), lambda g: (g * b.data, g * a.data))


@pytest.mark.exercise("1.1")
def test_wide_fan_in_and_fan_out():
    """One leaf feeding 50 products that meet in one node: every path must be summed."""
    x = ag.Tensor(np.array([1.5, -2.0]), requires_grad=True)
    ws = [ag.Tensor(np.full(2, float(k + 1)), requires_grad=True) for k in range(50)]
    y = _from_op_sum(*[_from_op_mul(x, w) for w in ws])
    order = ag.topological_order(y)
    assert len(order) == 1 + 50 + 50 + 1 and order[-1] is y
    position = {id(t): i for i, t in enumerate(order)}
    assert all(position[id(p)] < position[id(t)] for t in order for p in t._parents)
    y.backward(np.array([1.0, 2.0]))
    course.answer("order_length", len(order))
    course.answer("x_grad", x.grad)
    course.answer("w_grads", [w.grad for w in ws])
    np.testing.assert_allclose(x.grad, np.array([1.0, 2.0]) * sum(range(1, 51)))
    for w in ws:
        np.testing.assert_allclose(w.grad, [1.5, -4.0])


@pytest.mark.exercise("1.1")
def test_the_same_parent_twice_in_one_node():
    """y = x * x records x twice as a parent: its gradient is 2 x g, not x g."""
    x = ag.Tensor(np.array([3.0, -1.0, 0.5]), requires_grad=True)
    y = _from_op_mul(x, x)
    order = ag.topological_order(y)
    course.answer("order", [{id(x): "x", id(y): "y"}.get(id(t), "other") for t in order])
    assert [id(t) for t in order] == [id(x), id(y)]
    y.backward(np.ones(3))
    course.answer("x_grad", x.grad)
    np.testing.assert_allclose(x.grad, 2 * x.data)


@pytest.mark.exercise("1.1")
def test_long_diamond_chain_is_linear_not_exponential():
    """40 stacked diamonds (x -> a, b -> a+b): 2**40 paths. A backward that walks paths
    instead of nodes never finishes; the right one visits 121 nodes."""
    x = ag.Tensor(np.array([1.0]), requires_grad=True)
    y = x
    for _ in range(40):
        a = ag.Tensor.from_op(y.data * 0.5, (y,), lambda g: (g * 0.5,))
        b = ag.Tensor.from_op(y.data * 0.5, (y,), lambda g: (g * 0.5,))
        y = _from_op_sum(a, b)
    n_nodes = len(ag.topological_order(y))
    course.answer("order_length", n_nodes)
    assert n_nodes == 1 + 3 * 40
    y.backward(np.ones(1))
    course.answer("x_grad", x.grad)
    np.testing.assert_allclose(x.grad, [1.0])


@pytest.mark.exercise("1.1")
def test_tensor_seed_is_copied_and_cast():
    x = ag.Tensor(np.ones(3, dtype=np.float32), requires_grad=True)
    y = ag.Tensor.from_op(x.data * 2, (x,), lambda g: (g * 2,))
    seed = ag.Tensor(np.array([1.0, 2.0, 3.0]))  # float64, handed as a Tensor
    y.backward(seed)
    course.answer("x_grad_dtype", str(x.grad.dtype))
    course.answer("x_grad", x.grad)
    assert x.grad.dtype == np.float32
    np.testing.assert_array_equal(x.grad, [2.0, 4.0, 6.0])
    x.grad *= 0
    course.answer("seed_after", seed.data)
    np.testing.assert_array_equal(seed.data, [1.0, 2.0, 3.0])


@pytest.mark.exercise("1.1")
def test_root_leaf_with_explicit_gradient_keeps_a_copy():
    x = ag.Tensor(np.zeros((2, 2)), requires_grad=True)
    g = np.arange(4.0).reshape(2, 2)
    x.backward(g)
    course.answer("grad_once", x.grad)
    np.testing.assert_array_equal(x.grad, g)
    assert not np.shares_memory(x.grad, g)
    x.backward(g)
    course.answer("grad_twice", x.grad)
    course.answer("g_after", g)
    np.testing.assert_array_equal(x.grad, 2 * g)
    np.testing.assert_array_equal(g, np.arange(4.0).reshape(2, 2))


# ---------------------------------------------------------------------- 1.2
@pytest.mark.exercise("1.2")
@pytest.mark.parametrize("sa, sb", [((), (2, 3)), ((1, 3, 1), (2, 1, 4)), ((5, 1), (1,)), ((2, 1, 1, 3), (4, 1)),
                                    ((3,), ())])
@pytest.mark.parametrize("op", ["+", "-", "*", "/", "**"])
def test_binary_ops_broadcast_corners(torch_check, sa, sb, op):
    f = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
         "/": lambda a, b: a / b, "**": lambda a, b: a ** b}[op]
    a = rand(7, sa, 0.5, 2.0)
    b = rand(8, sb, 0.5, 2.0) * (1 if op in "**/" else np.sign(rand(9, sb)))
    torch_check(f, f, [a, b], seed=3)
    course.answer("result", engine_run(f, [a, b], seed=3))


@pytest.mark.exercise("1.2")
def test_one_tensor_in_a_long_expression(torch_check):
    f = lambda a, b: (a - b) * (a + 1) / (b * b + 1) - a ** 2 + (-b) ** 3
    torch_check(f, f, [rand(1, (3, 1, 4)), rand(2, (5, 1))], seed=11)
    course.answer("result", engine_run(f, [rand(1, (3, 1, 4)), rand(2, (5, 1))], seed=11))


# ---------------------------------------------------------------------- 1.3
@pytest.mark.exercise("1.3")
@pytest.mark.parametrize("axis", [None, 0, -1, (0, 2), (-1, 1), (0, 1, 2)])
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("name", ["sum", "mean", "max"])
def test_reductions_over_axis_tuples(torch_check, name, axis, keepdims):
    x = rand(4, (3, 4, 5))
    ours = lambda t: getattr(t, name)(axis=axis, keepdims=keepdims)
    dims = tuple(range(3)) if axis is None else axis
    if name == "max":
        theirs = lambda t: torch.amax(t, dim=dims, keepdim=keepdims)
    else:
        theirs = lambda t: getattr(torch, name)(t, dim=dims, keepdim=keepdims)
    torch_check(ours, theirs, [x], seed=5)
    course.answer("result", engine_run(ours, [x], seed=5))


@pytest.mark.exercise("1.3")
def test_max_ties_across_several_axes():
    x = ag.Tensor(np.array([[[1.0, 4.0], [4.0, 0.0]], [[4.0, 2.0], [3.0, 4.0]]]), requires_grad=True)
    x.max(axis=(1, 2)).backward(np.array([1.0, 3.0]))
    course.answer("x_grad", x.grad)
    np.testing.assert_allclose(x.grad, [[[0, 0.5], [0.5, 0]], [[1.5, 0], [0, 1.5]]])


@pytest.mark.exercise("1.3")
def test_reductions_of_a_one_element_tensor():
    for name in ("sum", "mean", "max"):
        x = ag.Tensor(np.array([[2.5]]), requires_grad=True)
        y = getattr(x, name)()
        course.answer(f"{name}_shape", list(y.shape))
        course.answer(f"{name}_value", y.item())
        assert y.shape == () and y.item() == 2.5
        y.backward()
        course.answer(f"{name}_grad", x.grad)
        np.testing.assert_array_equal(x.grad, [[1.0]])


# ---------------------------------------------------------------------- 1.4
@pytest.mark.exercise("1.4")
@pytest.mark.parametrize("sa, sb", [((3, 1, 2, 4), (5, 4, 3)), ((1, 2, 3), (4, 1, 3, 2)), ((2, 5, 1), (2, 1, 6)),
                                    ((1, 1), (3, 1, 2)), ((6, 3, 2), (2, 4))])
def test_matmul_broadcast_batches_on_both_sides(torch_check, sa, sb):
    torch_check(lambda a, b: a @ b, lambda a, b: a @ b, [rand(12, sa), rand(13, sb)], seed=2)
    course.answer("result", engine_run(lambda a, b: a @ b, [rand(12, sa), rand(13, sb)], seed=2))


@pytest.mark.exercise("1.4")
def test_matmul_float32_chain():
    a = ag.Tensor(rand(0, (4, 3)).astype(np.float32), requires_grad=True)
    b = ag.Tensor(rand(1, (2, 3, 5)).astype(np.float32), requires_grad=True)
    c = ag.Tensor(rand(2, (5, 2)).astype(np.float32), requires_grad=True)
    y = a @ b @ c
    course.answer("y_shape", list(y.shape))
    assert y.shape == (2, 4, 2) and y.dtype == np.float32
    y.sum().backward()
    course.answer("dtypes", [str(t.dtype) for t in (y, a.grad, b.grad, c.grad)])
    course.answer("y", y.data, rtol=1e-4, atol=1e-5)  # float32: another summation order moves the last bits
    course.answer("grads", [a.grad, b.grad, c.grad], rtol=1e-4, atol=1e-5)
    assert a.grad.dtype == b.grad.dtype == c.grad.dtype == np.float32
    ta, tb, tc = (torch.tensor(t.data.astype(np.float64), requires_grad=True) for t in (a, b, c))
    (ta @ tb @ tc).sum().backward()
    for ours, theirs in ((a, ta), (b, tb), (c, tc)):
        np.testing.assert_allclose(ours.grad, theirs.grad.numpy(), rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------- 1.5
@pytest.mark.exercise("1.5")
def test_reshape_transpose_negative_axes(torch_check):
    x = rand(3, (2, 3, 4))
    torch_check(lambda t: t.reshape(4, -1).reshape((2, 2, 6)).transpose(-1, 0, -2) * 3,
                lambda t: t.reshape(4, -1).reshape(2, 2, 6).permute(2, 0, 1) * 3, [x], seed=1)
    course.answer("result", engine_run(lambda t: t.reshape(4, -1).reshape((2, 2, 6)).transpose(-1, 0, -2) * 3,
                                       [x], seed=1))


@pytest.mark.exercise("1.5")
def test_mixed_advanced_indexing_against_torch(torch_check):
    x = rand(5, (4, 5, 3))
    rows, cols = np.array([3, 0, 3, 3]), np.array([1, 1, 1, -1])
    cases = [(lambda t: t[rows, :, 2] * 2, lambda t: t[torch.from_numpy(rows), :, 2] * 2),
             (lambda t: t[..., rows % 3], lambda t: t[..., torch.from_numpy(rows % 3)]),
             (lambda t: t[rows, cols], lambda t: t[torch.from_numpy(rows), torch.from_numpy(cols)]),
             (lambda t: t[None, 1:3, ..., -1], lambda t: t[None, 1:3, ..., -1])]
    for seed, (ours, theirs) in enumerate(cases, 1):
        torch_check(ours, theirs, [x], seed=seed)
        course.answer(f"case_{seed}", engine_run(ours, [x], seed=seed))


@pytest.mark.exercise("1.5")
def test_indexing_twice_adds_both_scatters():
    x = ag.Tensor(np.zeros(5), requires_grad=True)
    (x[1:4].sum() * 2 + x[[4, 1, 1]].sum()).backward()
    course.answer("x_grad", x.grad)
    np.testing.assert_array_equal(x.grad, [0, 4, 2, 2, 1])


# ---------------------------------------------------------------------- 1.6
@pytest.mark.exercise("1.6")
@pytest.mark.parametrize("name", ["exp", "tanh", "relu", "sigmoid"])
def test_unary_ops_on_wide_range(torch_check, name):
    x = rand(21, (3, 7), -6.0, 6.0)
    x[0, 0] = 0.0
    torch_check(lambda t: getattr(t, name)(), lambda t: getattr(torch, name)(t), [x], seed=4)
    course.answer("result", engine_run(lambda t: getattr(t, name)(), [x], seed=4))


@pytest.mark.exercise("1.6")
def test_log_and_composites(torch_check, fd_check):
    x = rand(22, (4, 2), 0.1, 5.0)
    torch_check(lambda t: t.log() * t.exp().tanh(), lambda t: t.log() * t.exp().tanh(), [x], seed=6)
    course.answer("composite", engine_run(lambda t: t.log() * t.exp().tanh(), [x], seed=6))
    scalar = lambda t: (t.sigmoid() * t.log() + t.relu().tanh()).sum()
    fd_check(scalar, [x])
    course.answer("scalar", engine_run(scalar, [x], seed=7))


@pytest.mark.exercise("1.6")
def test_sigmoid_saturates_without_nan():
    x = ag.Tensor(np.array([-1000.0, -50.0, 0.0, 50.0, 1000.0]), requires_grad=True)
    s = x.sigmoid()
    course.answer("sigmoid", s.data, rtol=1e-6, atol=1e-20)
    assert np.all(np.isfinite(s.data))
    np.testing.assert_allclose(s.data, [0, 0, 0.5, 1, 1], atol=1e-20)
    s.sum().backward()
    course.answer("x_grad", x.grad, rtol=1e-6, atol=1e-20)
    assert np.all(np.isfinite(x.grad)) and x.grad[2] == 0.25


# ---------------------------------------------------------------------- 1.7
@pytest.mark.exercise("1.7")
@pytest.mark.parametrize("axis", [0, 1, -2])
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_along_other_axes(torch_check, name, axis):
    x = rand(31, (3, 4, 2)) * 5
    ours = lambda t: getattr(ag, name)(t, axis=axis)
    theirs = lambda t: getattr(torch, name)(t, dim=axis)
    torch_check(ours, theirs, [x], seed=8)
    course.answer("result", engine_run(ours, [x], seed=8))


@pytest.mark.exercise("1.7")
@pytest.mark.parametrize("batch, classes", [(1, 1), (1, 7), (9, 1), (64, 300)])
def test_cross_entropy_extreme_shapes(torch_check, batch, classes):
    rng = np.random.default_rng(batch * 1000 + classes)
    targets = rng.integers(0, classes, batch)
    logits = rng.standard_normal((batch, classes)) * 3
    torch_check(lambda t: ag.cross_entropy(t, targets),
                lambda t: torch.nn.functional.cross_entropy(t, torch.from_numpy(targets)),
                [logits], seed=1)
    course.answer("result", engine_run(lambda t: ag.cross_entropy(t, targets), [logits], seed=1))


@pytest.mark.exercise("1.7")
def test_cross_entropy_of_a_certain_prediction_is_zero():
    logits = ag.Tensor(np.array([[800.0, -800.0], [-800.0, 800.0]]), requires_grad=True)
    loss = ag.cross_entropy(logits, np.array([0, 1]))
    course.answer("loss", loss.item())
    assert loss.item() == 0.0
    loss.backward()
    course.answer("logits_grad", logits.grad)
    np.testing.assert_allclose(logits.grad, 0.0, atol=1e-300)
    wrong = ag.cross_entropy(ag.Tensor(np.array([[800.0, -800.0]])), np.array([1]))
    course.answer("wrong_loss", wrong.item())
    np.testing.assert_allclose(wrong.item(), 1600.0)


# ---------------------------------------------------------------------- 1.8
@pytest.mark.exercise("1.8")
def test_linear_on_3d_input_without_bias_matches_torch():
    layer = ag.Linear(4, 6, bias=False, rng=3, dtype=np.float64)
    x_np = rand(5, (2, 3, 4))
    x = ag.Tensor(x_np, requires_grad=True)
    out = layer(x)
    course.answer("out", out.data)
    np.testing.assert_allclose(out.data, x_np @ layer.weight.data, rtol=1e-12)
    w = torch.tensor(layer.weight.data, requires_grad=True)
    xt = torch.tensor(x_np, requires_grad=True)
    up = rand(6, (2, 3, 6))
    out.backward(up)
    (xt @ w).backward(torch.from_numpy(up))
    course.answer("weight_grad", layer.weight.grad)
    course.answer("x_grad", x.grad)
    np.testing.assert_allclose(layer.weight.grad, w.grad.numpy(), rtol=1e-9)
    np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-9)


@pytest.mark.exercise("1.8")
def test_mlp_two_layers_and_seeds():
    one = ag.MLP([3, 2], rng=7)
    course.answer("one_shapes", [list(p.shape) for p in one.parameters()])
    assert len(one.layers) == 1 and [p.shape for p in one.parameters()] == [(3, 2), (2,)]
    x = ag.Tensor(np.array([[-1.0, 2.0, 0.5]], dtype=np.float32))
    course.answer("one_out", one(x).data, rtol=1e-5, atol=1e-6)  # float32
    np.testing.assert_allclose(one(x).data, x.data @ one.layers[0].weight.data + one.layers[0].bias.data,
                               rtol=1e-6)  # no activation after the last layer
    a, b = ag.MLP([3, 8, 2], activation="tanh", rng=1), ag.MLP([3, 8, 2], activation="tanh", rng=2)
    # the docstring fixes the draws: every layer from ONE generator, in order
    course.answer("a_parameters", [p.data for p in a.parameters()])
    course.answer("b_parameters", [p.data for p in b.parameters()])
    assert not np.array_equal(a.layers[0].weight.data, b.layers[0].weight.data)
    h = np.tanh(x.data @ a.layers[0].weight.data + a.layers[0].bias.data)
    course.answer("a_out", a(x).data, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(a(x).data, h @ a.layers[1].weight.data + a.layers[1].bias.data, rtol=1e-5)


@pytest.mark.exercise("1.8")
def test_sgd_two_steps_use_each_steps_gradient():
    w = ag.Tensor(np.array([[1.0, -1.0]]), requires_grad=True)
    opt = ag.SGD([w], lr=0.25)
    for _ in range(2):
        opt.zero_grad()
        (w * w).sum().backward()  # gradient 2 w
        opt.step()
    course.answer("w", w.data)
    np.testing.assert_allclose(w.data, [[0.25, -0.25]])
