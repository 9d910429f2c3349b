"""The code a reader studies as the model of a server, of an engine step and of a grader reads
in functions of at most 40 lines (issue 32): every function of `solutions/server/`,
`solutions/batching/engine.py` and `course/grading.py`.

A function's length is its lines from `def` to its last line, less its docstring and less an
exercise's `# DECISION:` / `# HINT:` comment blocks (with their indented continuation lines):
`course stubs` takes those out of the learner's stub and `course hint` shows them one at a
time, so they are the lesson's, not the function's. Every other comment counts."""
from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.helpers import ROOT

MAX_LINES = 40
FILES = (*sorted((ROOT / "solutions" / "server").glob("*.py")), ROOT / "solutions" / "batching" / "engine.py",
         ROOT / "course" / "grading.py")
_LESSON = re.compile(r"^\s*# (DECISION|HINT):")
_CONTINUED = re.compile(r"^\s*#   ")


def _lesson_lines(lines: list[str]) -> set[int]:
    """1-based numbers of the lines in DECISION/HINT comment blocks."""
    out: set[int] = set()
    inside = False
    for n, line in enumerate(lines, 1):
        inside = bool(_LESSON.match(line)) or (inside and bool(_CONTINUED.match(line)))
        if inside:
            out.add(n)
    return out


def function_lengths(path: Path) -> list[tuple[str, int, int]]:
    """(qualified name, first line, length as defined above) of every function in `path`."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    lesson = _lesson_lines(lines)
    out = []

    def walk(node, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                span = set(range(child.lineno, (child.end_lineno or child.lineno) + 1))
                body = child.body
                if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                        and isinstance(body[0].value.value, str)):
                    span -= set(range(body[0].lineno, (body[0].end_lineno or body[0].lineno) + 1))
                out.append((f"{prefix}{child.name}", child.lineno, len(span - lesson)))
                walk(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}{child.name}.")

    walk(ast.parse(text), "")
    return out


def test_no_function_over_40_lines():
    long = [f"{p.relative_to(ROOT)}:{line} {name} ({n} lines)"
            for p in FILES for name, line, n in function_lengths(p) if n > MAX_LINES]
    assert not long, f"functions over {MAX_LINES} lines (less docstring and hints):\n  " + "\n  ".join(long)


def test_the_length_counts_code_and_comments_but_not_the_lesson(tmp_path):
    code = ('def f():\n    """Doc\n    string."""\n    # DECISION: which axis\n    #   and why\n'
            '    # HINT: a step\n    x = 1  # a comment\n    # a plain comment counts\n    return x\n')
    (tmp_path / "m.py").write_text(code)
    assert function_lengths(tmp_path / "m.py") == [("f", 1, 4)]  # def, x = 1, the comment, return
