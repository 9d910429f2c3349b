# GENERATED from solutions/train/eval_report.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 03_training_loop/03_training_loop.ipynb. Exercises in this file (line of each hole, then the commands):
#   3.14 The regression gate: line 40; `course check 3.14`, `course hint 3.14`
"""The evaluation before optimisation: one report per model, and the regression gate (3.14)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import torch
from torch import nn

from solutions.checks import check_int
from solutions.fileio import write_text_atomic
from solutions.tokenizer import EOT

from .eval_sets import SOURCES, EvalSets, load_eval_sets
from .line_completion import codexglue_edit_sim, complete_lines, edit_similarity, exact_match
from .perplexity import score_document, source_row


def compare(current: Mapping[str, float], baseline: Mapping[str, float],
            margins: Mapping[str, Margin]) -> list[str]:
    """The gate: one line per metric of `margins` that moved the wrong way by MORE than its margin.

    A metric m with Margin(higher_is_better, by) fails when it moved the wrong way (down if
    higher is better, else up) by more than `by` (exactly `by` passes; the right way always
    passes). Each line names the metric, both values and the margin; [] means the gate passes.
    Metrics not in `margins` are not judged. KeyError: a metric of `margins` missing from either.
    """
    for name in margins:
        for what, values in (("current", current), ("baseline", baseline)):
            if name not in values:
                raise KeyError(f"{what} has no metric {name!r} (it has {sorted(values)})")
    raise NotImplementedError('Exercise 3.14: The regression gate — see 03_training_loop.ipynb')


class Margin(NamedTuple):
    """How far a metric may move the wrong way before the gate fails."""

    higher_is_better: bool
    by: float


# The stated margins: bits per byte may rise by 0.02 on either source, exact match and edit
# similarity (the course's 1 - Levenshtein/max, percentage points) may fall by 2 points;
# CodeXGLUE's edit sim (`codexglue_edit_sim`) is reported beside it, not gated. The set is
# fixed and the evaluation deterministic, so a change is the model's, not noise; these are
# what the course calls a regression (a lossy optimisation such as stage 04's quantisation
# must stay within them).
MARGINS: dict[str, Margin] = {
    "code.bpb": Margin(False, 0.02),
    "prose.bpb": Margin(False, 0.02),
    "exact_match": Margin(True, 2.0),
    "edit_similarity": Margin(True, 2.0),
}
@dataclass
class EvalReport:
    """One model's evaluation: per-source rows, line-completion figures, every completion."""

    model: str
    rows: dict[str, dict]  # "code"/"prose" -> source_row(...)
    completion: dict  # {"examples", "exact_match", "edit_similarity", "codexglue_edit_sim"} (percent)
    samples: list[dict]  # one per example: target, prediction, exact, similarity, codexglue_similarity
    sets: dict  # {"fingerprint", "construction"}
    seconds: float = 0.0
    task: dict = field(default_factory=dict)  # {"name", "n", "acc", "acc_norm"} (smollm2_eval), or {}

    @property
    def metrics(self) -> dict[str, float]:
        """code.bpb, prose.bpb, exact_match, edit_similarity (what MARGINS gates), and
        codexglue_edit_sim where the report has it (reported, not gated; older reports lack it),
        task_acc and task_acc_norm where it has a task (smollm2_eval; TASK_MARGINS there)."""
        out = {f"{k}.bpb": r["bpb"] for k, r in self.rows.items()}
        out.update(exact_match=self.completion["exact_match"], edit_similarity=self.completion["edit_similarity"])
        if "codexglue_edit_sim" in self.completion:
            out["codexglue_edit_sim"] = self.completion["codexglue_edit_sim"]
        if self.task:
            out.update(task_acc=self.task["acc"], task_acc_norm=self.task["acc_norm"])
        return out

    def table(self) -> str:
        """The report as a Markdown table (and one line on the completion set)."""
        lines = [f"model: {self.model} (sets {self.sets['fingerprint']})", "",
                 "| source | docs | bytes | bits/byte (95% CI) | perplexity (95% CI) |",
                 "| --- | ---: | ---: | --- | --- |"]
        def ci(lo, hi, f):
            return f" ({lo:{f}}–{hi:{f}})" if lo is not None else " (one document: no CI)"

        for k, r in self.rows.items():
            bpb = f"{r['bpb']:.3f}{ci(r['bpb_low'], r['bpb_high'], '.3f')}"
            ppl = f"{r['ppl']:.2f}{ci(r['ppl_low'], r['ppl_high'], '.2f')}"
            lines.append(f"| {k} | {r['docs']} | {r['bytes']:,} | {bpb} | {ppl} |")
        c = self.completion
        lines += ["", f"line completion, {c['examples']} held-out lines: exact match {c['exact_match']:.1f} %, "
                      f"edit similarity (1 - Levenshtein/max) {c['edit_similarity']:.1f} %"]
        if "codexglue_edit_sim" in c:
            lines[-1] += f", CodeXGLUE edit sim (fuzz.ratio) {c['codexglue_edit_sim']:.2f}"
        if self.task:
            t = self.task
            lines.append(f"task {t['name']}, {t['n']} questions (log-likelihood of each choice): "
                         f"acc {t['acc']:.4f}, acc_norm {t['acc_norm']:.4f}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"model": self.model, "rows": self.rows, "completion": self.completion, "samples": self.samples,
                "sets": self.sets, "seconds": self.seconds, "metrics": self.metrics,
                **({"task": self.task} if self.task else {})}

    def save(self, path: str | Path) -> Path:
        """Write the report as JSON, atomically."""
        write_text_atomic(path, json.dumps(self.to_dict(), indent=1) + "\n")
        return Path(path)

    @classmethod
    def from_dict(cls, d: Mapping) -> EvalReport:
        try:
            return cls(model=str(d["model"]), rows=dict(d["rows"]), completion=dict(d["completion"]),
                       samples=list(d.get("samples", [])), sets=dict(d["sets"]), seconds=float(d.get("seconds", 0)),
                       task=dict(d.get("task") or {}))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"not an evaluation report (missing or bad {e})") from None

    @classmethod
    def load(cls, path: str | Path) -> EvalReport:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not a JSON evaluation report ({e})") from None
        if not isinstance(data, dict):
            raise ValueError(f"{path}: not a JSON evaluation report (a {type(data).__name__})")
        return cls.from_dict(data)


def gate(report: EvalReport, baseline: EvalReport, margins: Mapping[str, Margin] | None = None) -> list[str]:
    """`compare` on two reports' metrics (default MARGINS); ValueError if they were not made on the same sets."""
    a, b = report.sets.get("fingerprint"), baseline.sets.get("fingerprint")
    if a != b:
        raise ValueError(f"the reports were made on different evaluation sets ({a} vs {b}); "
                         "evaluate both models with the same sets")
    return compare(report.metrics, baseline.metrics, MARGINS if margins is None else margins)


def model_block_size(model: nn.Module, block_size: int | None = None) -> int:
    """block_size if given, else model.config.block_size (the course's GPT), else a ValueError."""
    if block_size is None:
        block_size = getattr(getattr(model, "config", None), "block_size", None)
        if block_size is None:
            raise ValueError("block_size: the model has no config.block_size; pass block_size=")
    return check_int("block_size", block_size, 1)


def evaluate_model(model: nn.Module, *, sets: EvalSets | None = None, block_size: int | None = None,
                   name: str = "model", max_new: int = 48, batch_size: int = 32,
                   progress: Callable[[str], None] | None = None) -> EvalReport:
    """The whole evaluation of one model on `sets` (default: `load_eval_sets()`).

    `model`: any nn.Module mapping (B, T) int64 ids to (B, T, V) logits (the course's GPT, one
    with quantised linear layers, `ContextWindowModel` around an MLP); block_size: its context
    (default model.config.block_size). Per source of the held-out documents: `score_document`
    on each, `source_row` over them. Line completion: `complete_lines` (greedy) on every example,
    then, on the stripped prediction and target, exact match, edit similarity (1 - Levenshtein/max)
    and CodeXGLUE's edit sim (`codexglue_edit_sim`, 0..100 per line), each averaged in percent.
    Deterministic; the model's mode and weights are left as they were.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    block_size = model_block_size(model, block_size)
    sets = load_eval_sets() if sets is None else sets
    if not isinstance(sets, EvalSets):
        raise TypeError(f"sets must be EvalSets (build_eval_sets / load_eval_sets), got {type(sets).__name__}")
    say = progress or (lambda _m: None)
    t0 = time.perf_counter()
    rows = {}
    for kind in SOURCES:
        docs = [d for d in sets.documents if d.source == kind]
        if docs:
            say(f"{kind}: scoring {len(docs)} documents")
            rows[kind] = source_row([score_document(model, d.text, block_size=block_size) for d in docs])
    say(f"completing {len(sets.completions)} lines")
    preds = complete_lines(model, [e.prefix for e in sets.completions], block_size=block_size,
                           max_new=max_new, batch_size=batch_size)
    samples = []
    for e, p in zip(sets.completions, preds):
        pred, want = p.strip(), e.target.strip()
        samples.append({"doc_id": e.doc_id, "line_no": e.line_no, "target": want, "prediction": pred,
                        "exact": exact_match(pred, want), "similarity": edit_similarity(pred, want),
                        "codexglue_similarity": codexglue_edit_sim(pred, want)})
    n = max(len(samples), 1)
    completion = {"examples": len(samples),
                  "exact_match": 100.0 * sum(s["exact"] for s in samples) / n,
                  "edit_similarity": 100.0 * sum(s["similarity"] for s in samples) / n,
                  "codexglue_edit_sim": sum(s["codexglue_similarity"] for s in samples) / n}
    return EvalReport(model=name, rows=rows, completion=completion, samples=samples,
                      sets={"fingerprint": sets.fingerprint, "construction": sets.construction},
                      seconds=round(time.perf_counter() - t0, 2))


class ContextWindowModel(nn.Module):
    """A fixed-context next-token model (the stage 03 part-1 MLP's torch twin) behind the GPT
    interface: (B, T) ids -> (B, T, V) logits, position t predicted from the `context` ids
    before and at it, the missing ones at the start padded with EOT (as `sample_mlp_lm` does)."""

    def __init__(self, net: nn.Module, context: int):
        super().__init__()
        self.net, self.context = net, check_int("context", context, 1)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        B, T = idx.shape
        padded = torch.cat([torch.full((B, self.context - 1), EOT, dtype=idx.dtype), idx], dim=1)
        windows = padded.unfold(1, self.context, 1)  # (B, T, context)
        return self.net(windows.reshape(B * T, self.context)).view(B, T, -1)


def is_report_file(path: str | Path) -> bool:
    """A saved report (JSON), as opposed to a checkpoint: by its suffix."""
    return Path(path).suffix.lower() == ".json"
