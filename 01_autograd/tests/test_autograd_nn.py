"""Exercise 1.8: Linear, MLP and SGD against PyTorch's, plus the given Module plumbing."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import course

ag = course.load("autograd")


def torch_copy(mlp, activation="relu", dtype=torch.float64):
    """The same network in PyTorch with the same weights (PyTorch stores W transposed)."""
    layers = []
    for i, layer in enumerate(mlp.layers):
        lin = torch.nn.Linear(*layer.weight.shape, dtype=dtype)
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(layer.weight.data.T.copy()))
            lin.bias.copy_(torch.from_numpy(layer.bias.data.copy()))
        layers.append(lin)
        if i < len(mlp.layers) - 1:
            layers.append(torch.nn.ReLU() if activation == "relu" else torch.nn.Tanh())
    return torch.nn.Sequential(*layers)


# ---------------------------------------------------------------------- given: Module, Linear init
@pytest.mark.given
def test_module_parameters_walks_attributes_once():
    class Net(ag.Module):
        def __init__(self):
            self.a = ag.Tensor(np.ones(2), requires_grad=True)
            self.frozen = ag.Tensor(np.ones(2))  # no grad: not a parameter
            self.inner = [ag.Linear(2, 3, rng=0), ag.Linear(3, 1, bias=False, rng=1)]
            self.again = self.a  # the same tensor twice: listed once
            self.name = "net"

    net = Net()
    params = list(net.parameters())
    assert [p.shape for p in params] == [(2,), (2, 3), (3,), (3, 1)]
    for p in params:
        p.grad = np.ones(p.shape)
    net.zero_grad()
    assert all(p.grad is None for p in params)


@pytest.mark.given
def test_linear_initialisation():
    layer = ag.Linear(400, 50, rng=0)
    assert layer.weight.shape == (400, 50) and layer.bias.shape == (50,)
    assert layer.weight.dtype == np.float32 and layer.weight.requires_grad
    bound = 1 / np.sqrt(400)
    assert np.abs(layer.weight.data).max() <= bound and np.abs(layer.bias.data).max() <= bound
    # uniform on [-b, b] has standard deviation b / sqrt(3)
    assert abs(layer.weight.data.std() - bound / np.sqrt(3)) < 0.05 * bound
    np.testing.assert_array_equal(ag.Linear(400, 50, rng=0).weight.data, layer.weight.data)
    assert ag.Linear(3, 2, dtype=np.float64, rng=0).weight.dtype == np.float64


@pytest.mark.given
@pytest.mark.parametrize("make, error", [
    (lambda: ag.Linear(0, 3), ValueError),
    (lambda: ag.MLP([4]), ValueError),
    (lambda: ag.MLP([4, 2], activation="gelu"), ValueError),
    (lambda: ag.SGD([], lr=0.1), ValueError),
    (lambda: ag.SGD([ag.Tensor(np.ones(2), requires_grad=True)], lr=-1), ValueError),
    (lambda: ag.SGD([ag.Tensor(np.ones(2))], lr=0.1), TypeError),
    (lambda: ag.SGD([np.ones(2)], lr=0.1), TypeError),
])
def test_bad_construction(make, error):
    with pytest.raises(error):
        make()


@pytest.mark.given
def test_make_spirals():
    X, y = ag.make_spirals(50, 4, rng=1)
    assert X.shape == (200, 2) and X.dtype == np.float32 and y.shape == (200,)
    assert np.bincount(y).tolist() == [50] * 4 and np.abs(X).max() < 2
    np.testing.assert_array_equal(ag.make_spirals(50, 4, rng=1)[0], X)


# ---------------------------------------------------------------------- 1.8
@pytest.mark.exercise("1.8")
def test_linear_matches_torch():
    layer = ag.Linear(5, 3, rng=0, dtype=np.float64)
    reference = torch.nn.Linear(5, 3, dtype=torch.float64)
    with torch.no_grad():
        reference.weight.copy_(torch.from_numpy(layer.weight.data.T.copy()))
        reference.bias.copy_(torch.from_numpy(layer.bias.data))
    rng = np.random.default_rng(1)
    x_np, upstream = rng.standard_normal((2, 4, 5)), rng.standard_normal((2, 4, 3))  # batched input
    x, xt = ag.Tensor(x_np, requires_grad=True), torch.tensor(x_np, requires_grad=True)
    out, ref = layer(x), reference(xt)
    np.testing.assert_allclose(out.data, ref.detach().numpy(), rtol=1e-9)
    out.backward(upstream)
    ref.backward(torch.from_numpy(upstream))
    np.testing.assert_allclose(x.grad, xt.grad.numpy(), rtol=1e-9)
    np.testing.assert_allclose(layer.weight.grad, reference.weight.grad.numpy().T, rtol=1e-9)
    np.testing.assert_allclose(layer.bias.grad, reference.bias.grad.numpy(), rtol=1e-9)
    no_bias = ag.Linear(5, 3, bias=False, rng=0)
    assert no_bias.bias is None and no_bias(ag.Tensor(x_np[0].astype(np.float32))).shape == (4, 3)
    assert [p.shape for p in no_bias.parameters()] == [(5, 3)]


@pytest.mark.exercise("1.8")
def test_mlp_layers_and_parameters():
    mlp = ag.MLP([6, 5, 4, 3], rng=0)
    assert len(mlp.layers) == 3
    assert [p.shape for p in mlp.parameters()] == [(6, 5), (5,), (5, 4), (4,), (4, 3), (3,)]
    assert all(p.dtype == np.float32 for p in mlp.parameters())
    again = ag.MLP([6, 5, 4, 3], rng=0)
    for p, q in zip(mlp.parameters(), again.parameters()):
        np.testing.assert_array_equal(p.data, q.data)  # one seed fixes every layer
    out = mlp(ag.Tensor(np.ones((7, 6), dtype=np.float32)))
    assert out.shape == (7, 3) and out.dtype == np.float32


@pytest.mark.exercise("1.8")
def test_mlp_layers_draw_from_one_generator():
    mlp = ag.MLP([8, 8, 8, 8], rng=0)
    weights = [layer.weight.data for layer in mlp.layers]
    for i in range(len(weights)):
        for j in range(i):
            assert not np.array_equal(weights[i], weights[j]), (
                f"MLP([8, 8, 8, 8], rng=0): layers {j} and {i} have identical weights; every Linear "
                "must draw from ONE generator np.random.default_rng(rng), made once, in order "
                "(not each from the same seed)")
    gen = np.random.default_rng(0)
    for i, layer in enumerate(mlp.layers):
        expected = ag.Linear(8, 8, rng=gen)
        np.testing.assert_array_equal(
            layer.weight.data, expected.weight.data,
            err_msg=f"layer {i} must be Linear(8, 8, rng=gen) with gen = np.random.default_rng(0) "
                    "shared by the layers in order")
        np.testing.assert_array_equal(layer.bias.data, expected.bias.data, err_msg=f"bias of layer {i}")
    shared = np.random.default_rng(5)
    first, second = ag.MLP([3, 4], rng=shared), ag.MLP([3, 4], rng=shared)
    assert not np.array_equal(first.layers[0].weight.data, second.layers[0].weight.data), (
        "an MLP given a Generator must draw from it (two MLPs from one generator differ)")


@pytest.mark.exercise("1.8")
@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_mlp_training_matches_torch(activation):
    """Twenty SGD steps of the same network in both engines, in float64: same losses, same
    weights after training."""
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((32, 6)), rng.integers(0, 4, 32)
    mlp = ag.MLP([6, 16, 16, 4], activation=activation, rng=0, dtype=np.float64)
    reference = torch_copy(mlp, activation)
    opt, torch_opt = ag.SGD(mlp.parameters(), lr=0.3), torch.optim.SGD(reference.parameters(), lr=0.3)
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
    for _ in range(20):
        mlp.zero_grad()
        loss = ag.cross_entropy(mlp(ag.Tensor(X)), y)
        loss.backward()
        opt.step()
        torch_opt.zero_grad()
        torch_loss = F.cross_entropy(reference(Xt), yt)
        torch_loss.backward()
        torch_opt.step()
        np.testing.assert_allclose(loss.item(), torch_loss.item(), rtol=1e-9)
    for ours, theirs in zip(mlp.layers, reference[::2]):
        np.testing.assert_allclose(ours.weight.data, theirs.weight.detach().numpy().T, rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(ours.bias.data, theirs.bias.detach().numpy(), rtol=1e-8, atol=1e-10)


@pytest.mark.exercise("1.8")
def test_sgd_step_and_zero_grad():
    w = ag.Tensor(np.array([1.0, 2.0]), requires_grad=True)
    frozen_grad = ag.Tensor(np.array([5.0]), requires_grad=True)  # never gets a gradient
    opt = ag.SGD([w, frozen_grad], lr=0.1)
    w.grad = np.array([10.0, -20.0])
    data_before = w.data
    opt.step()
    np.testing.assert_allclose(w.data, [0.0, 4.0])
    assert w.data is data_before, "SGD updates the parameter array in place"
    np.testing.assert_array_equal(frozen_grad.data, [5.0])
    opt.zero_grad()
    assert w.grad is None


@pytest.mark.exercise("1.8")
def test_mlp_learns_spirals():
    X, y = ag.make_spirals(60, 3, rng=0)
    mlp = ag.MLP([2, 32, 32, 3], rng=0)
    opt = ag.SGD(mlp.parameters(), lr=0.5)
    losses = []
    for _ in range(300):
        mlp.zero_grad()
        loss = ag.cross_entropy(mlp(ag.Tensor(X)), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    with ag.no_grad():
        accuracy = (mlp(ag.Tensor(X)).data.argmax(axis=1) == y).mean()
    assert losses[-1] < 0.5 * losses[0], f"loss went from {losses[0]:.3f} to {losses[-1]:.3f}"
    assert accuracy > 0.8, f"training accuracy {accuracy:.2f}"


@pytest.mark.exercise("1.8")
def test_wrong_input_width_names_shapes():
    mlp = ag.MLP([4, 3, 2], rng=0)
    with pytest.raises(ValueError, match=r"\(5, 3\).*\(4, 3\)"):
        mlp(ag.Tensor(np.ones((5, 3), dtype=np.float32)))
