# GENERATED from solutions/profiling/report.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 08_profiling/08_profiling.ipynb. Exercises in this file (line of each hole, then the commands):
#   8.7 The profile report: line 37; `course check 8.7`, `course hint 8.7`
"""The profile report (8.7): `collect`'s data as Markdown, with its plots and its JSON."""

from __future__ import annotations

import json
import math
from pathlib import Path

from .plots import save_latency_plot, save_roofline_plot, save_sweep_plot


def write_report(data: dict, out_dir: str | Path) -> Path:
    """Write `data` (from `collect`) into the existing folder `out_dir`; return the Path of
    its `report.md`. Also written: `report.json` (json.dumps(data, indent=1, sort_keys=True):
    loads back equal to data) and, only for the sections data has, `sweep.png`
    (`save_sweep_plot`), `roofline.png` (`save_roofline_plot`), `latency.png`
    (`save_latency_plot` of the breakdown); report.md links each as `![...](name.png)`.
    report.md: a title with the environment and model; then one "## " section per section
    present in data, in order — "## Timers: …" (timers), "## Where a decode step's time goes
    (torch.profiler)" (ops: per batch its labels, op counts and a table of its top
    operators, names in backticks: `aten::addmm`), "## Memory" (MiB per batch), "## Throughput
    against batch size" (a row per point, tokens/s as `_num(tokens_per_s)`; the knee or its
    absence), "## Roofline" (peaks, ridge, a row per step with its regime), "## Where a
    request's time goes" (percentiles, shares, and the recommendation's key in backticks,
    its advice and its evidence); last "## The data" with the same JSON in a ```json block.
    Every figure printed is formatted from data with `_num` after at most one unit scale
    (ms = s × 1e3, µs = s × 1e6, GFLOP/s and GB/s = × 1e-9, % = share × 100, MiB = bytes /
    2**20), or copied from one of data's strings: no number is typed in or derived otherwise.
    Raises ValueError (naming out_dir) if out_dir is not an existing folder.
    """
    out = Path(out_dir)
    if not out.is_dir():
        raise ValueError(f"out_dir {str(out)!r} is not an existing folder")
    raise NotImplementedError('Exercise 8.7: The profile report — see 08_profiling.ipynb')


def _num(v: float | None, digits: int = 3) -> str:
    """A figure for the report: `digits` significant digits, no exponent for ordinary
    sizes ("n/a" for None, "0" for zero): 1234.5 -> "1234", 0.012345 -> "0.0123"."""
    if v is None:
        return "n/a"
    if v == 0:
        return "0"
    mag = math.floor(math.log10(abs(v)))
    decimals = max(0, digits - 1 - mag)
    return f"{v:.{decimals}f}"
