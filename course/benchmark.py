"""Shared benchmark helpers for the stages' `bench.py` scripts.

This machine (and CI) is shared and noisy, so a benchmark compares implementations in ONE
run and reports ratios. `measure` warms up, repeats, and keeps the median; `Report`
collects rows, prints an aligned table, writes JSON (`--json`) and draws the PNG (`--plot`).

    from course.benchmark import measure, Report, bench_args
    args = bench_args("Stage 01: one training step")
    rep = Report("01_autograd", args)
    t_ours = measure(step_ours, repeat=args.repeat)
    t_torch = measure(step_torch, repeat=args.repeat)
    rep.add("train step, MLP 784-256-256-10", ours=t_ours, torch=t_torch)
    rep.finish(plot=draw)      # draw(plt) -> Figure; without it, a bar chart of the rows

A bench describes its figure in `draw(plt)` and returns it; `Report` does the rest
(headless backend, writing the file atomically, closing the figure), and draws nothing
unless `--plot FILE` was given.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field


def bench_args(description: str, argv: list[str] | None = None,
               extra: Callable[[argparse.ArgumentParser], None] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--repeat", type=int, default=7, help="timed repeats per measurement (median kept)")
    p.add_argument("--warmup", type=int, default=2, help="untimed runs before timing")
    p.add_argument("--threads", type=int, default=int(os.environ.get("COURSE_BENCH_THREADS", "2")),
                   help="torch/BLAS threads for every implementation (stated in the report)")
    p.add_argument("--quick", action="store_true", help="small sizes and few repeats (a smoke run)")
    p.add_argument("--json", default=None, metavar="FILE", help="write the results as JSON")
    p.add_argument("--plot", default=None, metavar="FILE", help="write a PNG plot of the results")
    if extra:
        extra(p)
    args = p.parse_args(argv)
    for opt in ("json", "plot"):  # checked before the run, which may take minutes
        path = getattr(args, opt)
        if path is None:
            continue
        if os.path.isdir(path):
            p.error(f"--{opt} {path} is a folder: give a file name")
        parent = os.path.dirname(os.path.abspath(path))
        try:  # a missing folder is made, as `course release` makes its own
            os.makedirs(parent, exist_ok=True)
        except OSError as e:
            p.error(f"--{opt} {path}: cannot make its folder {parent}: {e.strerror}")
    if args.quick:
        args.repeat = min(args.repeat, 3)
        args.warmup = min(args.warmup, 1)
    set_threads(args.threads)
    return args


def set_threads(n: int) -> None:
    """Use n threads in torch and in NumPy's BLAS, so that every implementation gets the same."""
    if n < 1:
        raise ValueError(f"threads must be >= 1, got {n}")
    try:
        import torch

        torch.set_num_threads(n)
    except ImportError:
        pass
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=n, user_api="blas")
    except ImportError:
        pass


@dataclass
class Timing:
    median: float  # seconds
    times: list[float] = field(default_factory=list)

    @property
    def spread(self) -> float:
        """(max - min) / median over the repeats: how noisy this measurement was."""
        return (max(self.times) - min(self.times)) / self.median if self.median > 0 else 0.0


def measure(fn: Callable[[], object], repeat: int = 7, warmup: int = 2, number: int = 1) -> Timing:
    """Median wall time of `number` calls of fn, over `repeat` timed runs after `warmup` runs."""
    if repeat < 1 or number < 1 or warmup < 0:
        raise ValueError(f"repeat and number must be >= 1 and warmup >= 0, got {repeat}, {number}, {warmup}")
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t0) / number)
    return Timing(statistics.median(times), times)


def fmt_seconds(s: float) -> str:
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} µs"


class Report:
    """Rows of named values, printed as a table and saved as JSON."""

    def __init__(self, stage: str, args: argparse.Namespace | None = None, title: str = ""):
        self.stage = stage
        self.args = args
        self.title = title
        self.rows: list[dict] = []
        self.started = time.time()

    def add(self, name: str, **values) -> dict:
        row: dict[str, object] = {"name": name}
        for k, v in values.items():
            row[k] = v.median if isinstance(v, Timing) else v
        self.rows.append(row)
        return row

    def environment(self) -> dict:
        env = {"python": platform.python_version(), "machine": platform.machine(),
               "cpus": os.cpu_count(), "argv": " ".join(sys.argv)}
        try:
            import torch

            env["torch"] = torch.__version__
            env["torch_threads"] = torch.get_num_threads()
        except ImportError:
            pass
        return env

    def table(self) -> str:
        cols: list[str] = []
        for r in self.rows:
            for k in r:
                if k not in cols:
                    cols.append(k)

        def cell(v) -> str:
            if isinstance(v, float):
                return f"{v:.4g}"
            return "" if v is None else str(v)

        data = [[cell(r.get(c)) for c in cols] for r in self.rows]
        widths = [max([len(c)] + [len(row[i]) for row in data]) for i, c in enumerate(cols)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths)),
                 "  ".join("-" * w for w in widths)]
        lines += ["  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(row, widths)))
                  for row in data]
        return "\n".join(lines)

    def plot(self, draw: Callable | None = None, path: str | None = None) -> str | None:
        """Write the PNG of `--plot FILE` (or `path`): `draw(plt)` returns the figure to save.

        Without `draw`, a horizontal bar chart of each row's first numeric value. Returns the
        path written, or None when no plot was asked for (then `draw` is not called).
        """
        path = path or (getattr(self.args, "plot", None) if self.args is not None else None)
        if not path:
            return None
        import matplotlib

        matplotlib.use("Agg")  # no display needed
        import matplotlib.pyplot as plt

        fig = draw(plt) if draw is not None else self._bar_chart(plt)
        fig = plt.gcf() if fig is None else fig
        folder = os.path.dirname(os.path.abspath(path))
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".partial-{os.getpid()}-", suffix=".png", dir=folder)
        try:
            with os.fdopen(fd, "wb") as f:
                fig.savefig(f, format="png", dpi=120)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)  # a complete PNG or the previous one, never half a file
        except BaseException:
            os.unlink(tmp)
            raise
        finally:
            plt.close(fig)
        print(f"wrote {path}")
        return path

    def _bar_chart(self, plt):
        rows = [(r["name"], next((k, v) for k, v in r.items() if k != "name" and isinstance(v, (int, float))
                                 and not isinstance(v, bool)))
                for r in self.rows if any(isinstance(v, (int, float)) and not isinstance(v, bool)
                                          for k, v in r.items() if k != "name")]
        fig, ax = plt.subplots(figsize=(8, 0.6 + 0.4 * max(1, len(rows))))
        ax.barh([name for name, _ in rows][::-1], [kv[1] for _, kv in rows][::-1])
        ax.set_xlabel(", ".join(dict.fromkeys(kv[0] for _, kv in rows)))
        ax.set_title(f"{self.stage}: {self.title}" if self.title else self.stage)
        fig.tight_layout()
        return fig

    def finish(self, plot: Callable | None = None) -> dict:
        """Print the table, write `--json` and `--plot` (drawn by `plot(plt)`, see `Report.plot`)."""
        env = self.environment()
        head = f"{self.stage}: {self.title}" if self.title else self.stage
        print(f"\n{head}\n" + "=" * len(head))
        print(f"python {env['python']}, torch {env.get('torch', '-')}, threads {env.get('torch_threads', '-')}, "
              f"{env['cpus']} cpus; command: {env['argv']}\n")
        print(self.table())
        out = {"stage": self.stage, "title": self.title, "environment": env, "rows": self.rows}
        if self.args is not None and getattr(self.args, "json", None):
            tmp = f"{self.args.json}.partial-{os.getpid()}"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(out, f, indent=1)
            os.replace(tmp, self.args.json)
            print(f"\nwrote {self.args.json}")
        self.plot(plot)
        return out
