"""Stage 03 benchmark: training throughput of the same model on different stacks, in one run.

1. The byte-level MLP language model (3.5) trained with the stage-01 NumPy engine and AdamW
   (3.2) against the same model, same batch, trained with PyTorch and torch.optim.AdamW:
   tokens per second, and the ratio (the source notes' "same loop, ~100x faster in PyTorch").
   --threads sets both PyTorch's threads and NumPy's BLAS threads.
2. The course's GPT (`solutions.gpt.GPT`) against `transformers`' GPT2LMHeadModel built with
   the same configuration and the same weights, both driven by the same loop (`train_step`
   with AdamW and clipping): training tokens per second. Aim: ours at least as fast.

    python 03_training_loop/bench.py [--quick] [--json FILE] [--plot FILE] [--threads N]

Implementations alternate (a, b, a, b, ...) and medians are kept; ratio = how many times
faster the second stack is (torch over engine; course GPT over transformers).
"""
from __future__ import annotations

import statistics
from typing import Callable

import numpy as np
import torch

from course.bench_impl import SMOKE, add_impl_argument, load_impl, run_bench
from course.benchmark import Report, Timing, bench_args, measure
from solutions.autograd import cross_entropy
from solutions.gpt import GPT, GPTConfig

train = None  # the package measured: `load_impl` in main(), after the arguments (so --help always works)


def measure_in_turn(fns: dict[str, Callable[[], object]], args, number: int = 1) -> dict[str, Timing]:
    """Median times of several functions timed in turn (a, b, a, b, ...), so that a change in
    the load of this shared machine falls on all of them alike."""
    for fn in fns.values():
        measure(fn, repeat=1, warmup=args.warmup)
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(args.repeat):
        for name, fn in fns.items():
            times[name].append(measure(fn, repeat=1, warmup=0, number=number).median)
    return {name: Timing(statistics.median(t), t) for name, t in times.items()}


def mlp_rows(args, rep: Report) -> None:
    sizes = [(128, 256)] if args.quick else [(128, 256), (1024, 1024)]
    context, embed = 8, 16
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 257, 200_000)
    for batch, hidden in sizes:
        model = train.MLPLanguageModel(context=context, embed_dim=embed, hidden=hidden, rng=0)
        twin = train.TorchMLPLanguageModel.from_engine(model)
        opt = train.AdamW(model.parameters(), lr=1e-3)
        torch_opt = torch.optim.AdamW(twin.parameters(), lr=1e-3)
        X, Y = train.sample_contexts(tokens, batch, context, rng)
        Xt, Yt = torch.from_numpy(X), torch.from_numpy(Y)

        def engine_step():
            loss = cross_entropy(model(X), Y)
            opt.zero_grad()
            loss.backward()
            opt.step()

        def torch_step():
            loss = torch.nn.functional.cross_entropy(twin(Xt), Yt)
            torch_opt.zero_grad()
            loss.backward()
            torch_opt.step()

        number = (1 if SMOKE else 5) if args.quick else 30  # smoke (COURSE_BENCH_SMOKE=1): one step
        t = measure_in_turn({"engine": engine_step, "torch": torch_step}, args, number=number)
        t_engine, t_torch = t["engine"], t["torch"]
        rep.add(f"MLP LM, batch {batch}, hidden {hidden}",
                engine_tok_s=round(batch / t_engine.median), torch_tok_s=round(batch / t_torch.median),
                ratio=t_engine.median / t_torch.median, spread=max(t_engine.spread, t_torch.spread))


def gpt_rows(args, rep: Report) -> None:
    if SMOKE:  # COURSE_BENCH_SMOKE=1: the smallest GPT, the code path only
        cases = [(GPTConfig(n_layer=1, n_embd=32, n_head=2, block_size=32), 2, 32)]
    elif args.quick:
        cases = [(GPTConfig(n_layer=2, n_embd=64, n_head=4, block_size=128), 4, 128)]
    else:  # GPTConfig's defaults, and the default model's shape and batch as it was trained
        default = train.PRESETS["default"]
        cases = [(GPTConfig(), 8, 256), (default.model, default.batch_size, default.block_size)]
    for cfg, batch, T in cases:
        gpt_row(args, rep, cfg, batch, T)


def gpt_row(args, rep: Report, cfg: GPTConfig, batch: int, T: int) -> None:
    torch.manual_seed(0)
    ours = GPT(cfg).train()
    theirs = ours.to_hf().train()  # the same weights in transformers' GPT-2
    x, y = train.get_batch(torch.randint(0, 257, (100_000,)), batch, T, torch.Generator().manual_seed(0))

    class HFLogits(torch.nn.Module):  # the loop calls model(x) -> logits, like the course's GPT
        def __init__(self, hf):
            super().__init__()
            self.hf = hf

        def forward(self, idx):
            return self.hf(idx).logits

    def step_of(model: torch.nn.Module) -> Callable[[], object]:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        return lambda: train.train_step(model, opt, [(x, y)], max_norm=1.0)

    t = measure_in_turn({"ours": step_of(ours), "hf": step_of(HFLogits(theirs))}, args)
    t_ours, t_hf = t["ours"], t["hf"]
    rep.add(f"GPT {cfg.n_layer}L/{cfg.n_embd}d, batch {batch}x{T}",
            course_tok_s=round(batch * T / t_ours.median), hf_tok_s=round(batch * T / t_hf.median),
            ratio=t_hf.median / t_ours.median, spread=max(t_ours.spread, t_hf.spread))


STACKS = {"engine": ("stage-01 engine", "tab:gray"), "torch": ("PyTorch", "tab:blue"),
          "course": ("course GPT", "tab:green"), "hf": ("transformers GPT-2", "tab:orange")}


def plot(plt, rows):
    """The figure of `--plot` (saved by `Report.plot`): training tokens per second per stack."""
    fig, ax = plt.subplots(figsize=(8, 0.5 + 0.45 * 2 * len(rows)))
    labels, values, colors = [], [], []
    for r in rows:
        for key, value in r.items():
            if key.endswith("_tok_s"):
                stack, color = STACKS[key.removesuffix("_tok_s")]
                labels.append(f"{r['name']}\n{stack}")
                values.append(value)
                colors.append(color)
    ax.barh(range(len(values)), values, color=colors)
    ax.set_yticks(range(len(values)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("training tokens / second")
    ax.set_title(f"Stage 03: the same model on different stacks ({torch.get_num_threads()} threads)")
    fig.tight_layout()
    return fig


def main() -> None:
    global train
    args = bench_args("Stage 03: training throughput — engine vs PyTorch, course GPT vs transformers",
                      extra=add_impl_argument)
    train = load_impl(args, "train")
    rep = Report("03_training_loop", args,
                 title="one training step, tokens per second (ratio: how many times faster)")
    mlp_rows(args, rep)
    gpt_rows(args, rep)
    rep.finish(plot=lambda plt: plot(plt, rep.rows))


if __name__ == "__main__":
    run_bench(main)
