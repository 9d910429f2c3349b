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
    # BEGIN SOLUTION 8.7
    # DECISION: how every printed figure stays traceable to the data: which values are printed,
    #   after which single unit scale, formatted by `_num`; no figure of the report's own (a ratio,
    #   a sum, a number typed in); sections only for what the data has, in a fixed order.
    # HINT: Build the Markdown as a list of lines, one `if "<section>" in data:` block per
    #   section; join with "\n" at the end and write report.md and report.json.
    # HINT: Format every number as _num(scale * value): a table row is an f-string such as
    #   f"| {p['batch']} | {_num(1e3 * p['step_s'])} | {_num(p['tokens_per_s'])} |".
    #   A figure you compute yourself (a ratio, a sum) fails the "from the data" check.
    # HINT: The plots are given: call save_sweep_plot(data["sweep"], out / "sweep.png") and
    #   the like, and link each PNG from its section.
    env, m = data["environment"], data["model"]
    md = [f"# Profile of the serving stack on {env['device']} ({env['device_name']})", "",
          f"Model: {m['what']}, {m['params']} parameters ({m['n_layer']} layers, {m['n_head']} heads, width "
          f"{m['n_embd']}, {m['dtype']}). Engine: `{env['engine']}`. torch {env['torch']}, {env['threads']} "
          f"thread(s); timings by {env['clock']} (the profiler's by the wall clock). "
          f"Every figure below is formatted from `report.json` (embedded at the end).", ""]
    if "timers" in data:
        md += ["## Timers: what a naive timer reports", "",
               "| step | first call (ms) | warm, unsynchronised (ms) | warm, synchronised median (ms) | spread |",
               "| --- | ---: | ---: | ---: | ---: |"]
        for name, t in data["timers"].items():
            md.append(f"| {name} | {_num(1e3 * t['cold_s'])} | {_num(1e3 * t['unsynced_s'])} | "
                      f"{_num(1e3 * t['honest_s'])} | {_num(100 * t['honest_spread'])}% |")
        md.append("")
    if "ops" in data:
        md += ["## Where a decode step's time goes (torch.profiler)", ""]
        for o in data["ops"].values():
            labels = ", ".join(f"{k} {_num(v)} ms" for k, v in o["labels_ms"].items())
            md += [f"Batch {o['batch']}: step {_num(o['step_ms'])} ms ({labels}); {_num(o['ops_per_step'])} aten "
                   f"ops per step, {_num(o['top_level_ops_per_step'])} called from Python"
                   + (f", {_num(o['kernels_per_step'])} GPU kernels" if o["kernels_per_step"] is not None else "")
                   + f" (medians over {o['steps']} recorded steps).", "",
                   "| operator | calls/step | self µs/step | share of self time |", "| --- | ---: | ---: | ---: |"]
            md += [f"| `{t['name']}` | {_num(t['calls_per_step'])} | {_num(t['self_us_per_step'])} | "
                   f"{_num(100 * t['share'])}% |" for t in o["top"]]
            md.append("")
    if "memory" in data:
        md += ["## Memory", "", "| batch | parameters (MiB) | KV pool (MiB) | activations, peak of a step (MiB) | "
               "Python state (MiB) | KV share | process (MiB) |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for mm in data["memory"].values():
            md.append(f"| {mm['batch']} | {_num(mm['params'] / 2**20)} | {_num(mm['kv_pool'] / 2**20)} | "
                      f"{_num(mm['activations'] / 2**20)} | {_num(mm['python_state'] / 2**20)} | "
                      f"{_num(100 * mm['kv_share'])}% | {_num(mm['process'] / 2**20)} |")
        md.append("")
    if "sweep" in data:
        sw = data["sweep"]
        pts, knee = sw["points"], sw["knee"]
        save_sweep_plot(sw, out / "sweep.png")
        md += ["## Throughput against batch size", "", "![throughput vs batch](sweep.png)", "",
               "| batch | step (ms) | tokens/s | spread |", "| ---: | ---: | ---: | ---: |"]
        md += [f"| {p['batch']} | {_num(1e3 * p['step_s'])} | {_num(p['tokens_per_s'])} | {_num(100 * p['spread'])}% |"
               for p in pts]
        md += ["", (f"The knee: beyond batch {knee['batch']} doubling the batch adds less than "
                    f"{_num(100 * knee['min_gain'])}% throughput ({_num(knee['tokens_per_s'])} tokens/s there)."
                    if knee else "No knee inside the sweep: throughput still grows at its largest batch."), ""]
    if "roofline" in data:
        r = data["roofline"]
        save_roofline_plot(r, out / "roofline.png", device=env["device"])
        md += ["## Roofline", "", "![roofline](roofline.png)", "",
               f"Measured peaks: {_num(r['peak_flops'] * 1e-9)} GFLOP/s ({r['peak_flops_conditions']}), "
               f"{_num(r['peak_bandwidth'] * 1e-9)} GB/s ({r['peak_bandwidth_conditions']}); ridge at "
               f"{_num(r['ridge'])} FLOPs/byte.", "",
               "| step | FLOPs/byte | achieved GFLOP/s | roof GFLOP/s | of roof | regime |",
               "| --- | ---: | ---: | ---: | ---: | --- |"]
        md += [f"| {p['name']} | {_num(p['intensity'])} | {_num(p['achieved'] * 1e-9)} | "
               f"{_num(p['attainable'] * 1e-9)} | {_num(100 * p['efficiency'])}% | {p['regime']} |"
               for p in r["points"]]
        md.append("")
    if "latency" in data:
        lat = data["latency"]
        bd = lat["breakdown"]
        save_latency_plot(bd, out / "latency.png")
        rec = lat["recommendation"]
        md += ["## Where a request's time goes", "", f"Trace: {lat['trace']}; max batch {lat['max_batch_size']}; "
               f"{lat['requests']} request records ({lat['malformed']} malformed).", "", "![latency](latency.png)", "",
               "| phase | p50 (ms) | p99 (ms) | mean (ms) | share of e2e |", "| --- | ---: | ---: | ---: | ---: |"]
        for ph in ("queue", "prefill", "decode", "ttft", "e2e"):
            row = bd[ph]
            share = f"{_num(100 * row['share'])}%" if "share" in row else ""
            md.append(f"| {ph} | {_num(1e3 * row['p50'])} | {_num(1e3 * row['p99'])} | {_num(1e3 * row['mean'])} | "
                      f"{share} |")
        md += ["", f"**The change the data says to make next** (`{rec['key']}`): {rec['advice']}. Evidence: "
               f"{rec['evidence']}.", ""]
    payload = json.dumps(data, indent=1, sort_keys=True)
    md += ["## The data", "", "```json", payload, "```", ""]
    (out / "report.json").write_text(payload + "\n", encoding="utf-8")
    path = out / "report.md"
    path.write_text("\n".join(md), encoding="utf-8")
    return path
    # END SOLUTION


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
