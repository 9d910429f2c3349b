# GENERATED from solutions/train/eval_cli.py by `course stubs --write`.
# Nothing to write here: given code of stage 03 (03_training_loop/03_training_loop.ipynb).
"""`course eval MODEL [--against BASELINE]`: the evaluation table, and the regression gate (given).

MODEL: a checkpoint written by `save_checkpoint` (python -m solutions.train), `default`
(solutions/assets/gpt_default.pt), or a name of `loaders` (`course eval smollm2`: a decoder
and its BPE tokenizer, evaluated by `smollm2_eval.evaluate_decoder`, its task included).
BASELINE: the same, or a report saved with `--json`.
Exit 0: the table (and, with --against, every metric within its margin); 1: a metric moved
past its margin (each named); 2: `error: ...` on bad input (a missing or damaged file, a bad number).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import torch

from solutions.fileio import check_outputs
from solutions.gpt import DEFAULT_WEIGHTS, load_checkpoint

from .eval_report import MARGINS, EvalReport, evaluate_model, gate, is_report_file
from .eval_sets import N_EXAMPLES, load_eval_sets
from .smollm2_eval import MAX_BYTES, N_LINES, TASK_MARGINS, decoder_report, evaluate_decoder

Loaders = Mapping[str, Callable[[], tuple]]  # a model's name -> () -> (model, BPE tokenizer)


def _model_path(arg: str, what: str) -> Path:
    path = DEFAULT_WEIGHTS if arg == "default" else Path(arg)
    if not path.is_file():
        raise FileNotFoundError(f"{what} {arg}: no such file (a checkpoint, or `default` for {DEFAULT_WEIGHTS.name})")
    return path


def _evaluate(arg: str, what: str, sets, say, loaders: Loaders | None = None, **decoder) -> EvalReport:
    if loaders and arg in loaders:
        t0 = time.perf_counter()
        model, tok = loaders[arg]()
        say(f"loaded {what} {arg} ({time.perf_counter() - t0:.1f} s); evaluating")
        return decoder_report(evaluate_decoder(model, tok, progress=say, **decoder), arg)
    path = _model_path(arg, what)
    model, _ = load_checkpoint(path)  # a damaged file: CheckpointError (a ValueError) naming it
    say(f"evaluating {what} {arg}")
    return evaluate_model(model, sets=sets, name=arg, progress=say)


def run_eval(model: str, against: str | None = None, *, json_out: str | None = None,
             data: str | None = None, examples: int | None = None, threads: int | None = None,
             quiet: bool = False, loaders: Loaders | None = None, max_bytes: int | None = None,
             task_questions: int | None = None) -> int:
    """The command; returns its exit status (0 pass, 1 a regression, 2 bad input).

    examples: line-completion examples (None: N_EXAMPLES for a checkpoint, smollm2_eval's
    N_LINES for a model of `loaders`). max_bytes (bytes scored per source; None: smollm2_eval's
    MAX_BYTES, 0: every document) and task_questions (None: all) apply to a model of `loaders`."""
    named = set(loaders or {})
    if examples is None:
        examples = N_LINES if model in named or against in named else N_EXAMPLES
    decoder = {"examples": examples, "task_questions": task_questions, "data": data,
               "max_bytes": MAX_BYTES if max_bytes is None else (max_bytes or None)}
    say = (lambda _m: None) if quiet else (lambda m: print(f"  {m}", file=sys.stderr, flush=True))
    before = torch.get_num_threads()
    try:
        if threads is not None:
            if threads < 1:
                raise ValueError(f"--threads must be >= 1, got {threads}")
            torch.set_num_threads(threads)
        if examples < 1:
            raise ValueError(f"--examples must be >= 1, got {examples}")
        if max_bytes is not None and max_bytes < 0:
            raise ValueError(f"--max-bytes must be >= 0 (0: every document), got {max_bytes}")
        if task_questions is not None and task_questions < 1:
            raise ValueError(f"--task-questions must be >= 1, got {task_questions}")
        if is_report_file(model):
            raise ValueError(f"MODEL {model}: a report, not a checkpoint (reports are baselines: --against)")
        inputs = [] if model in named else [_model_path(model, "MODEL")]
        baseline = None
        if against is not None:
            if is_report_file(against):
                if not Path(against).is_file():
                    raise FileNotFoundError(f"--against {against}: no such report")
                baseline = EvalReport.load(against)
                inputs.append(Path(against))
            elif against not in named:
                inputs.append(_model_path(against, "--against"))
        if json_out is not None:
            check_outputs(files=[Path(json_out)], inputs=inputs)
        t0 = time.perf_counter()
        sets = load_eval_sets(data, n_examples=examples)
        say(f"sets {sets.fingerprint}: {len(sets.documents)} documents, {len(sets.completions)} lines "
            f"({time.perf_counter() - t0:.1f} s)")
        report = _evaluate(model, "MODEL", sets, say, loaders, **decoder)
        if against is not None and baseline is None:
            same = against == model if against in named or model in named else \
                _model_path(against, "--against").resolve() == inputs[0].resolve()  # deterministic: once is enough
            baseline = report if same else _evaluate(against, "--against", sets, say, loaders, **decoder)
    except (ValueError, TypeError, FileNotFoundError) as e:  # UnsafeOutputError, CheckpointError included
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        torch.set_num_threads(before)
    print(report.table())
    c = report.sets.get("construction", {})
    if "max_bytes_per_source" in c:  # a decoder's report (smollm2_eval): what was scored, and the times
        cap = c["max_bytes_per_source"]
        print(f"scored: the first {c['doc_bytes']} bytes of each document, "
              + (f"at most {cap:,} bytes per source (documents in a fixed shuffled order)" if cap
                 else "every held-out document")
              + f"; line completion: the first {c['line_examples']} of the held-out lines")
    parts = report.task.get("seconds", {})  # a decoder's report: each part's time
    timings = "".join(f", {k.replace('_', ' ')} {v:.1f} s" for k, v in parts.items())
    print(f"({report.seconds:.1f} s on {threads or before} thread(s){timings})")
    if json_out is not None:
        report.save(json_out)
        print(f"wrote {json_out}")
    if baseline is None:
        return 0
    print(f"\nagainst {against}:")
    print(baseline.table())
    used = dict(MARGINS)
    if "task_acc" in report.metrics and "task_acc" in baseline.metrics:
        used.update(TASK_MARGINS)  # a decoder's reports: its task is gated too
    try:
        problems = gate(report, baseline, used)
    except (ValueError, KeyError) as e:
        print(f"error: {e.args[0] if e.args else e}", file=sys.stderr)
        return 2
    margins = ", ".join(f"{k} {'-' if m.higher_is_better else '+'}{m.by:g}" for k, m in used.items())
    if problems:
        print(f"\ngate: FAIL (margins: {margins})")
        for p in problems:
            print(f"  {p}")
        return 1
    print(f"\ngate: pass (margins: {margins})")
    return 0
