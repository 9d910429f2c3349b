# GENERATED from solutions/train/plot.py by `course stubs --write`.
# Nothing to write here: given code of stage 03 (03_training_loop/03_training_loop.ipynb).
"""The loss curves of a run (given): train loss (moving average) and val loss against the step."""

from __future__ import annotations

import numpy as np


def plot_history(history: dict[str, list[float]], ax=None, label: str = "", smooth: int = 10):
    """Train loss (moving average over `smooth` steps) and val loss against the step."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    loss = np.asarray(history["loss"], dtype=np.float64)
    k = max(1, min(smooth, len(loss)))
    ma = np.convolve(loss, np.ones(k) / k, mode="valid")
    line, = ax.plot(history["step"][k - 1:], ma, label=f"{label} train".strip())
    if history.get("val_step"):
        ax.plot(history["val_step"], history["val_loss"], "o--", color=line.get_color(),
                label=f"{label} val".strip())
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats / token)")
    ax.grid(alpha=0.3)
    ax.legend()
    return ax
