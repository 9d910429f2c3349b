# GENERATED from solutions/train/eval_cli.py by `course stubs --write`.
# Nothing to write here: given code of stage 03 (03_training_loop/03_training_loop.ipynb).
"""`course eval MODEL [--against BASELINE]`: the evaluation table, and the regression gate (given).

MODEL: a checkpoint written by `save_checkpoint` (python -m solutions.train), or `default`
(solutions/assets/gpt_default.pt). BASELINE: the same, or a report saved with `--json`.
Exit 0: the table (and, with --against, every metric within its margin); 1: a metric moved
past its margin (each named); 2: `error: ...` on bad input (a missing or damaged file, a bad number).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from solutions.fileio import check_outputs
from solutions.gpt import DEFAULT_WEIGHTS, load_checkpoint

from .eval_report import MARGINS, EvalReport, evaluate_model, gate, is_report_file
from .eval_sets import N_EXAMPLES, load_eval_sets


def _model_path(arg: str, what: str) -> Path:
    path = DEFAULT_WEIGHTS if arg == "default" else Path(arg)
    if not path.is_file():
        raise FileNotFoundError(f"{what} {arg}: no such file (a checkpoint, or `default` for {DEFAULT_WEIGHTS.name})")
    return path


def _evaluate(arg: str, what: str, sets, say) -> EvalReport:
    path = _model_path(arg, what)
    model, _ = load_checkpoint(path)  # a damaged file: CheckpointError (a ValueError) naming it
    say(f"evaluating {what} {arg}")
    return evaluate_model(model, sets=sets, name=arg, progress=say)


def run_eval(model: str, against: str | None = None, *, json_out: str | None = None,
             data: str | None = None, examples: int = N_EXAMPLES, threads: int | None = None,
             quiet: bool = False) -> int:
    """The command; returns its exit status (0 pass, 1 a regression, 2 bad input)."""
    say = (lambda _m: None) if quiet else (lambda m: print(f"  {m}", file=sys.stderr, flush=True))
    before = torch.get_num_threads()
    try:
        if threads is not None:
            if threads < 1:
                raise ValueError(f"--threads must be >= 1, got {threads}")
            torch.set_num_threads(threads)
        if examples < 1:
            raise ValueError(f"--examples must be >= 1, got {examples}")
        if is_report_file(model):
            raise ValueError(f"MODEL {model}: a report, not a checkpoint (reports are baselines: --against)")
        inputs = [_model_path(model, "MODEL")]
        baseline = None
        if against is not None:
            if is_report_file(against):
                if not Path(against).is_file():
                    raise FileNotFoundError(f"--against {against}: no such report")
                baseline = EvalReport.load(against)
                inputs.append(Path(against))
            else:
                inputs.append(_model_path(against, "--against"))
        if json_out is not None:
            check_outputs(files=[Path(json_out)], inputs=inputs)
        t0 = time.perf_counter()
        sets = load_eval_sets(data, n_examples=examples)
        say(f"sets {sets.fingerprint}: {len(sets.documents)} documents, {len(sets.completions)} lines "
            f"({time.perf_counter() - t0:.1f} s)")
        report = _evaluate(model, "MODEL", sets, say)
        if against is not None and baseline is None:
            same = _model_path(against, "--against").resolve() == inputs[0].resolve()
            baseline = report if same else _evaluate(against, "--against", sets, say)  # deterministic: once is enough
    except (ValueError, TypeError, FileNotFoundError) as e:  # UnsafeOutputError, CheckpointError included
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        torch.set_num_threads(before)
    print(report.table())
    print(f"({report.seconds:.1f} s on {threads or before} thread(s))")
    if json_out is not None:
        report.save(json_out)
        print(f"wrote {json_out}")
    if baseline is None:
        return 0
    print(f"\nagainst {against}:")
    print(baseline.table())
    try:
        problems = gate(report, baseline)
    except (ValueError, KeyError) as e:
        print(f"error: {e.args[0] if e.args else e}", file=sys.stderr)
        return 2
    margins = ", ".join(f"{k} {'-' if m.higher_is_better else '+'}{m.by:g}" for k, m in MARGINS.items())
    if problems:
        print(f"\ngate: FAIL (margins: {margins})")
        for p in problems:
            print(f"  {p}")
        return 1
    print(f"\ngate: pass (margins: {margins})")
    return 0
