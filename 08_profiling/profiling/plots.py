# GENERATED from solutions/profiling/plots.py by `course stubs --write`.
# Nothing to write here: given code of stage 08 (08_profiling/08_profiling.ipynb).
"""The report's plots (given): the roofline, throughput against batch, the latency shares.

`plot_roofline` draws on a matplotlib axis (a new pyplot figure when none is given, for the
notebook). The `save_*` functions draw one report plot from `collect`'s data into a PNG file,
on a bare `matplotlib.figure.Figure`: no pyplot state, no backend switch.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .roofline import RooflinePoint

REGIME_COLORS = {"compute": "tab:red", "bandwidth": "tab:blue", "overhead": "tab:orange"}
PHASE_COLORS = {"queue": "tab:grey", "prefill": "tab:blue", "decode": "tab:green"}


def plot_roofline(points: Sequence[RooflinePoint], peak_flops: float, peak_bandwidth: float, ax=None,
                  title: str = ""):
    """The roofline (log-log: FLOPs/byte against FLOP/s) with each measured step on it."""
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(6.4, 4.2))
    ridge = peak_flops / peak_bandwidth
    lo = min([p.intensity for p in points] + [ridge]) / 4
    hi = max([p.intensity for p in points] + [ridge]) * 4
    xs = np.geomspace(lo, hi, 200)
    ax.loglog(xs, np.minimum(peak_flops, xs * peak_bandwidth), color="black", lw=1.5, label="roof (measured peaks)")
    ax.axvline(ridge, color="grey", ls=":", lw=1)
    for p in points:
        ax.scatter([p.intensity], [p.achieved], color=REGIME_COLORS[p.regime], zorder=3)
        ax.annotate(f"{p.name}\n({p.regime}, {p.efficiency:.0%} of roof)", (p.intensity, p.achieved),
                    textcoords="offset points", xytext=(5, -18), fontsize=7)
    ax.set_xlabel("arithmetic intensity (FLOPs / byte)")
    ax.set_ylabel("FLOP/s")
    ax.set_title(title or "roofline")
    ax.legend(loc="upper left", fontsize=8)
    return ax


def _figure(width: float, height: float):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    return fig, fig.subplots()


def _save(fig, path: str | Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def save_roofline_plot(roofline: dict, path: str | Path, *, device: str = "") -> None:
    """`collect`'s "roofline" section as a roofline PNG at `path`."""
    fig, ax = _figure(6.4, 4.2)
    plot_roofline([RooflinePoint(**p) for p in roofline["points"]], roofline["peak_flops"],
                  roofline["peak_bandwidth"], ax=ax, title=f"roofline on {device}" if device else "")
    _save(fig, path)


def save_sweep_plot(sweep: dict, path: str | Path) -> None:
    """`collect`'s "sweep" section as a PNG at `path`: decode tokens/s and ms per step against
    the batch size (log2 axis), the knee marked when there is one."""
    import matplotlib.ticker

    pts, knee = sweep["points"], sweep["knee"]
    batches = [p["batch"] for p in pts]
    fig, ax = _figure(6.4, 3.8)
    ax.plot(batches, [p["tokens_per_s"] for p in pts], "o-", label="tokens/s")
    ax.set_xscale("log", base=2)
    ax.set_xticks(batches, [str(b) for b in batches])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xlabel("batch size (decode rows)")
    ax.set_ylabel("decode tokens/s")
    ax2 = ax.twinx()
    ax2.plot(batches, [1e3 * p["step_s"] for p in pts], "s--", color="tab:orange", label="ms per step")
    ax2.set_ylabel("ms per step (= per token per row)")
    if knee:
        ax.axvline(knee["batch"], color="grey", ls=":", label=f"knee: batch {knee['batch']}")
    handles, more = ax.get_legend_handles_labels(), ax2.get_legend_handles_labels()
    ax.legend(handles[0] + more[0], handles[1] + more[1], loc="upper left", fontsize=8)
    ax.set_title(f"decode throughput vs batch (context {sweep['context']})")
    _save(fig, path)


def save_latency_plot(breakdown: dict, path: str | Path) -> None:
    """A `latency_breakdown`'s phase shares as one stacked horizontal bar, PNG at `path`."""
    fig, ax = _figure(6.4, 2.0)
    left = 0.0
    for ph, color in PHASE_COLORS.items():
        share = breakdown[ph]["share"]
        ax.barh([0], [share], left=left, color=color, label=f"{ph} {share:.0%}")
        left += share
    ax.set_xlim(0, 1)
    ax.set_yticks([])
    ax.set_xlabel("share of end-to-end time, all requests")
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.02), ncol=3, fontsize=8, frameon=False)
    _save(fig, path)
