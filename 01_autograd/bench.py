"""Stage 01 benchmark: one training step of the NumPy engine against PyTorch, and against a
scalar micrograd-style engine.

    python 01_autograd/bench.py [--quick] [--threads N] [--impl student|solution] [--json FILE] [--plot FILE]

1. An MLP training step (forward, cross-entropy, backward, SGD update) on float32 data, with
   the engine and with PyTorch on the CPU, at the same thread count: the ratio engine/torch.
   The aim is 1.5x or better at 784-256-256-10, batch 128.
2. The same kind of step with `Value`, a scalar autograd engine written below the way
   micrograd does it (one Python object per number), against the engine, on a small net:
   what working on whole arrays buys.

The implementation measured is `course.load("autograd")` of `--impl student|solution`
(default: COURSE_IMPL, else student: your package; a learner's release has no reference of
this stage, and every row here runs on yours). Timings alternate between implementations
and keep medians.
"""

from __future__ import annotations

import math
import os
import sys


def _threads_requested(argv: list[str]) -> str:
    """--threads N (or COURSE_BENCH_THREADS, default 2), read before NumPy is imported:
    OpenBLAS, which runs NumPy's matmul, fixes its thread count when it is loaded."""
    for i, arg in enumerate(argv):
        if arg == "--threads" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--threads="):
            return arg.split("=", 1)[1]
    return os.environ.get("COURSE_BENCH_THREADS", "2")


os.environ["OPENBLAS_NUM_THREADS"] = _threads_requested(sys.argv[1:])

import numpy as np  # noqa: E402
import torch  # noqa: E402

import course  # noqa: E402
from course.bench_impl import SMOKE, add_impl_argument, load_impl, run_bench  # noqa: E402
from course.benchmark import Report, Timing, bench_args, fmt_seconds, measure  # noqa: E402

ag = None  # the package measured: `load_impl` in main(), after the arguments (so --help always works)


# ---------------------------------------------------------------------- the scalar reference
class Value:
    """One number with a gradient: micrograd's design, the baseline the engine vectorises."""

    __slots__ = ("data", "grad", "_prev", "_backward")

    def __init__(self, data: float, prev: tuple = (), backward=None):
        self.data, self.grad, self._prev, self._backward = data, 0.0, prev, backward

    def __add__(self, other):
        other = other if isinstance(other, Value) else Value(other)

        def backward(out):
            self.grad += out.grad
            other.grad += out.grad
        return Value(self.data + other.data, (self, other), backward)

    def __mul__(self, other):
        other = other if isinstance(other, Value) else Value(other)

        def backward(out):
            self.grad += other.data * out.grad
            other.grad += self.data * out.grad
        return Value(self.data * other.data, (self, other), backward)

    __radd__, __rmul__ = __add__, __mul__

    def __sub__(self, other):
        return self + other * -1.0

    def tanh(self):
        t = math.tanh(self.data)

        def backward(out):
            self.grad += (1.0 - t * t) * out.grad
        return Value(t, (self,), backward)

    def backward(self):
        order, seen, stack = [], set(), [(self, False)]
        while stack:
            node, done = stack.pop()
            if done:
                order.append(node)
            elif id(node) not in seen:
                seen.add(id(node))
                stack.append((node, True))
                stack.extend((p, False) for p in node._prev)
        self.grad = 1.0
        for node in reversed(order):
            if node._backward is not None:
                node._backward(node)


def value_step(weights: list[list[list[Value]]], biases: list[list[Value]], X: np.ndarray,
               Y: np.ndarray, lr: float) -> float:
    """One step of a tanh MLP with mean-squared error, number by number."""
    for p in [w for layer in weights for row in layer for w in row] + [b for layer in biases for b in layer]:
        p.grad = 0.0
    loss = Value(0.0)
    for x, y in zip(X.tolist(), Y.tolist()):
        h = [Value(v) for v in x]
        for i, (W, b) in enumerate(zip(weights, biases)):
            h = [sum((h[k] * W[k][j] for k in range(len(h))), b[j]) for j in range(len(b))]
            if i < len(weights) - 1:
                h = [v.tanh() for v in h]
        for out, target in zip(h, y):
            diff = out - target
            loss = loss + diff * diff
    loss = loss * (1.0 / Y.size)
    loss.backward()
    for W, b in zip(weights, biases):
        for p in [w for row in W for w in row] + b:
            p.data -= lr * p.grad
    return loss.data


# ---------------------------------------------------------------------- the steps measured
def engine_step(model, opt, X, y):
    def step():
        model.zero_grad()
        loss = ag.cross_entropy(model(ag.Tensor(X)), y)
        loss.backward()
        opt.step()
    return step


def torch_copy(model):
    layers = []
    for i, layer in enumerate(model.layers):
        lin = torch.nn.Linear(*layer.weight.shape)
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(layer.weight.data.T.copy()))
            lin.bias.copy_(torch.from_numpy(layer.bias.data))
        layers += [lin, torch.nn.ReLU()] if i < len(model.layers) - 1 else [lin]
    return torch.nn.Sequential(*layers)


def torch_step(model, opt, X, y):
    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(X), y)
        loss.backward()
        opt.step()
    return step


def paired(fns: dict, repeat: int, warmup: int, number: int) -> dict[str, Timing]:
    """Median time of each fn, measured in alternation so that load on a shared machine
    falls on every implementation alike."""
    for fn in fns.values():
        measure(fn, repeat=1, warmup=warmup, number=1)
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            times[name].append(measure(fn, repeat=1, warmup=0, number=number).median)
    return {name: Timing(float(np.median(t)), t) for name, t in times.items()}


def mlp_row(rep, sizes, batch, args, number):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((batch, sizes[0])).astype(np.float32)
    y = rng.integers(0, sizes[-1], batch)
    model = ag.MLP(sizes, rng=0)
    reference = torch_copy(model)
    t = paired({"engine": engine_step(model, ag.SGD(model.parameters(), lr=0.01), X, y),
                "torch": torch_step(reference, torch.optim.SGD(reference.parameters(), lr=0.01),
                                    torch.from_numpy(X), torch.from_numpy(y))},
               args.repeat, args.warmup, number)
    name = f"MLP {'-'.join(map(str, sizes))}, batch {batch}"
    rep.add(name, engine_ms=t["engine"].median * 1e3, torch_ms=t["torch"].median * 1e3,
            engine_over_torch=t["engine"].median / t["torch"].median)
    print(f"  {name}: engine {fmt_seconds(t['engine'].median)}, torch {fmt_seconds(t['torch'].median)}")
    return t


def value_row(rep, sizes, batch, args):
    rng = np.random.default_rng(1)
    X, Y = rng.standard_normal((batch, sizes[0])), rng.standard_normal((batch, sizes[-1]))
    model = ag.MLP(sizes, activation="tanh", rng=0, dtype=np.float64)
    weights = [[[Value(float(w)) for w in row] for row in layer.weight.data] for layer in model.layers]
    biases = [[Value(float(b)) for b in layer.bias.data] for layer in model.layers]
    opt = ag.SGD(model.parameters(), lr=0.05)

    def engine():
        model.zero_grad()
        loss = ((model(ag.Tensor(X)) - Y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss.item()

    # same weights, same data: the first losses must agree, or the comparison means nothing
    first_engine, first_value = engine(), value_step(weights, biases, X, Y, 0.05)
    assert abs(first_engine - first_value) < 1e-9 * max(1.0, abs(first_value)), (first_engine, first_value)
    t = paired({"engine": engine, "value": lambda: value_step(weights, biases, X, Y, 0.05)},
               max(3, args.repeat // 2), 0, 1)
    name = f"tanh MLP {'-'.join(map(str, sizes))}, batch {batch}, MSE"
    rep.add(name, engine_ms=t["engine"].median * 1e3, scalar_value_ms=t["value"].median * 1e3,
            value_over_engine=t["value"].median / t["engine"].median)
    print(f"  {name}: engine {fmt_seconds(t['engine'].median)}, scalar Value {fmt_seconds(t['value'].median)}")
    return t


def plot(plt, batches, mlp_times, value_time, value_name):
    """The figure of `--plot` (saved by `Report.plot`): step time vs batch, and the scalar engine."""
    from matplotlib.ticker import NullLocator

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.plot(batches, [mlp_times[b]["engine"].median * 1e3 for b in batches], "o-", label="NumPy engine")
    left.plot(batches, [mlp_times[b]["torch"].median * 1e3 for b in batches], "s-", label="PyTorch (CPU)")
    left.set(xscale="log", yscale="log", xlabel="batch size", ylabel="ms per training step",
             title="MLP 784-256-256-10, float32")
    left.xaxis.set_minor_locator(NullLocator())
    left.set_xticks(batches, [str(b) for b in batches])
    left.legend()
    names = ["scalar Value", "NumPy engine"]
    right.bar(names, [value_time["value"].median * 1e3, value_time["engine"].median * 1e3], color=["C3", "C0"])
    right.set(yscale="log", ylabel="ms per training step", title=value_name)
    fig.tight_layout()
    return fig


def main() -> None:
    global ag
    args = bench_args("Stage 01: one MLP training step, engine vs PyTorch vs scalar autograd",
                      extra=add_impl_argument)
    ag = load_impl(args, "autograd")
    rep = Report("01_autograd", args, title="one training step (forward, backward, SGD)")
    print(f"threads: torch {torch.get_num_threads()}, OpenBLAS {os.environ['OPENBLAS_NUM_THREADS']}; "
          f"implementation: {course.current_impl()}")
    batches = [128] if args.quick else [32, 128, 512]
    number = 1 if SMOKE else 5  # smoke (COURSE_BENCH_SMOKE=1): one step a timing
    mlp_times = {b: mlp_row(rep, [784, 256, 256, 10], b, args, number=number) for b in batches}
    mlp_row(rep, [2, 16, 16, 2], 8, args, number=10 * number)  # tiny: Python overhead per op dominates
    value_sizes, value_batch = ([4, 8, 8, 1], 8) if args.quick else ([8, 16, 16, 1], 16)
    value_time = value_row(rep, value_sizes, value_batch, args)
    rep.finish(plot=lambda plt: plot(plt, batches, mlp_times, value_time,
                                     f"tanh MLP {'-'.join(map(str, value_sizes))}, batch {value_batch}"))


# `course check 1.8` (and `course check 01`) calls `speed_check("1.8")` once 1.8's tests pass: the
# whole training step needs every exercise up to 1.8.
SPEED_CHECKED = ("1.8",)
AIM_RATIO = 1.5  # the stage's aim: engine / PyTorch <= 1.5 for a 784-256-256-10 step at batch 128 (README)
REFERENCE_RATIO = 1.0  # the reference's, one thread (README: 0.97-1.00)


def step_ratio(batch: int = 128, rounds: int = 7, number: int = 3) -> float:
    """The engine's time / PyTorch's for one training step of the bench's MLP (784-256-256-10,
    float32, cross-entropy, SGD) on the same weights and data: the median over `rounds`
    alternated rounds of `number` steps each. Runs on the current thread settings."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((batch, 784)).astype(np.float32)
    y = rng.integers(0, 10, batch)
    model = ag.MLP([784, 256, 256, 10], rng=0)
    reference = torch_copy(model)
    t = paired({"engine": engine_step(model, ag.SGD(model.parameters(), lr=0.01), X, y),
                "torch": torch_step(reference, torch.optim.SGD(reference.parameters(), lr=0.01),
                                    torch.from_numpy(X), torch.from_numpy(y))}, rounds, 1, number)
    return float(np.median([e / p for e, p in zip(t["engine"].times, t["torch"].times)]))


def speed_check(exercise: str = "1.8") -> str | None:
    """A quick look at the training step's speed (about a second; one thread on both sides):
    the bench's batch-128 row, small, on the package `course check` checked. A line when the
    engine takes more than AIM_RATIO x PyTorch's time (measured twice before saying so: the
    machine may be busy), else None. Correctness is the tests' business, not this."""
    global ag
    if exercise != "1.8":
        raise ValueError(f"stage 01 has no speed check for {exercise}")
    if ag is None:
        ag = course.load("autograd")
    from threadpoolctl import threadpool_limits

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(limits=1, user_api="blas"):
            ratio = step_ratio()
            if ratio > AIM_RATIO:
                ratio = min(ratio, step_ratio())
    finally:
        torch.set_num_threads(threads)
    if ratio <= AIM_RATIO:
        return None
    return (f"1.8 is correct but slower than the stage aims: a training step of the 784-256-256-10 MLP at batch "
            f"128 takes {ratio:.1f}x PyTorch's time (one thread); the aim is at most {AIM_RATIO:g}x (the reference: "
            f"about {REFERENCE_RATIO:g}x). Look for a Python loop over rows or elements, np.einsum or a copy in a "
            f"forward or backward: see bench.py (`python 01_autograd/bench.py --quick --threads 1`)")


if __name__ == "__main__":
    run_bench(main)
