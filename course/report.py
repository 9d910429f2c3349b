"""The grade's outputs: the Gradescope JSON, the Markdown summary and the console table.

Each output file is written atomically (`solutions.fileio.write_text_atomic`): a reader sees
the previous file or the whole new one. `check_writable` says before grading why a path
could not be written.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from course.scoring import Entry


def gradescope_json(entries: list[Entry]) -> dict:
    score = sum(e.score for e in entries)
    total = sum(e.max_score for e in entries)
    return {"score": round(score, 2),
            "output": f"{score:.1f} / {total:g} points over {len({e.stage for e in entries if e.stage})} stage(s)",
            "visibility": "visible", "stdout_visibility": "hidden",
            "tests": [e.as_gradescope() for e in entries]}


def markdown_summary(entries: list[Entry], show_hidden: bool = False, report: list[str] | None = None) -> str:
    shown = [e for e in entries if show_hidden or e.visibility == "visible"]
    score = sum(e.score for e in shown)
    total = sum(e.max_score for e in shown)
    lines = [f"## Course grade: {score:.1f} / {total:g}", "",
             "| exercise | score | state | notes |", "| --- | ---: | --- | --- |"]
    for e in shown:
        note = e.output.replace("|", "\\|").replace("\n", " ")[:160]
        lines.append(f"| {e.name} | {e.score:.1f} / {e.max_score:g} | {e.state} | {note} |")
    hidden = [e for e in entries if e.visibility == "after_due_date"]
    if hidden and not show_hidden:
        lines += ["", f"{len(hidden)} hidden test(s) are graded and shown after the due date."]
    lines += ["", "Property tests (Hypothesis) ran derandomised: every submission meets the same examples, "
                  "so the same code gets the same grade."]
    if report:
        lines += ["", "### For the instructor", ""] + [f"- {ln}" for ln in report]
    return "\n".join(lines) + "\n"


def console_table(entries: list[Entry], width: int = 80) -> str:
    rows = [(e.name if len(e.name) <= 44 else e.name[:43] + "…", f"{e.score:.1f}/{e.max_score:g}", e.state)
            for e in entries]
    lines = [f"{'exercise':<45} {'score':>10}  state", "-" * min(width, 66)]
    lines += [f"{n:<45} {s:>10}  {st}" for n, s, st in rows]
    score = sum(e.score for e in entries)
    total = sum(e.max_score for e in entries)
    lines += ["-" * min(width, 66), f"{'total':<45} {f'{score:.1f}/{total:g}':>10}"]
    return "\n".join(lines)


def check_writable(path: str | Path) -> str | None:
    """Why `path` cannot be written atomically, or None."""
    p = Path(path)
    if p.is_dir():
        return f"{p} is a folder"
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        return f"the folder {parent} does not exist"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"the folder {parent} is not writable"
    return None


def dump_json(entries: list[Entry]) -> str:
    return json.dumps(gradescope_json(entries), indent=1)
