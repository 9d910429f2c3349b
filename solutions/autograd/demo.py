"""`course demo --stages 01`: the engine trains an MLP next to PyTorch (given code)."""

from __future__ import annotations

import numpy as np

from .data import make_spirals
from .layers import MLP
from .losses import cross_entropy
from .optim import SGD
from .tensor import Tensor, no_grad


def demo() -> None:
    """Train a small MLP on spirals with this engine, then with PyTorch from the same weights.

    float64, so that the two losses agree to the digits printed: the engine computes the
    same function and the same gradients, not merely a similar one.
    """
    import time

    import torch

    # Small on purpose: every matrix product (240 x 32 x 32) stays under the size at which
    # OpenBLAS splits work across threads, so the run takes about a second even on a busy machine.
    X, y = make_spirals(80, 3, rng=0)
    X = X.astype(np.float64)
    sizes, steps, lr = [2, 32, 32, 3], 1000, 0.5

    model = MLP(sizes, rng=0, dtype=np.float64)
    torch_model = torch.nn.Sequential(torch.nn.Linear(2, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32),
                                      torch.nn.ReLU(), torch.nn.Linear(32, 3)).double()
    with torch.no_grad():  # same initial weights (PyTorch stores the transpose)
        for ours, theirs in zip(model.layers, torch_model[::2]):
            theirs.weight.copy_(torch.from_numpy(ours.weight.data.T))
            theirs.bias.copy_(torch.from_numpy(ours.bias.data))

    start = time.perf_counter()
    opt, losses = SGD(model.parameters(), lr=lr), []
    for _ in range(steps):
        loss = cross_entropy(model(Tensor(X)), y)
        model.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    engine_seconds = time.perf_counter() - start

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # 64-wide layers: more threads only add synchronisation
    start = time.perf_counter()
    torch_opt, torch_losses = torch.optim.SGD(torch_model.parameters(), lr=lr), []
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
    for _ in range(steps):
        torch_loss = torch.nn.functional.cross_entropy(torch_model(Xt), yt)
        torch_opt.zero_grad()
        torch_loss.backward()
        torch_opt.step()
        torch_losses.append(torch_loss.item())
    torch_seconds = time.perf_counter() - start
    torch.set_num_threads(threads)

    print(f"MLP {'-'.join(map(str, sizes))} on {len(X)} spiral points: full-batch SGD, lr {lr}, float64")
    print(f"{'step':>5}  {'engine loss':>12}  {'torch loss':>12}")
    for step in range(0, steps, 200):
        print(f"{step:>5}  {losses[step]:>12.6f}  {torch_losses[step]:>12.6f}")
    print(f"{steps - 1:>5}  {losses[-1]:>12.6f}  {torch_losses[-1]:>12.6f}")
    with no_grad():
        accuracy = (model(Tensor(X)).data.argmax(axis=1) == y).mean()
    print(f"training accuracy {accuracy:.1%}; {steps} steps took {engine_seconds:.2f} s with the engine, "
          f"{torch_seconds:.2f} s with PyTorch")
