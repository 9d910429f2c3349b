"""Generate the learner's stubs from the reference solutions.

A solution module marks each exercise body:

    def relu(self):
        \"\"\"Docstring stays.\"\"\"
        # BEGIN SOLUTION 1.4
        out = ...
        return out
        # END SOLUTION

The stub is the same file with every marked region replaced, at the marker's
indentation, by

        raise NotImplementedError("Exercise 1.4: <title> — see 01_autograd.ipynb")

Everything outside the markers is given code and is kept verbatim. Markers do not nest.
"""

from __future__ import annotations

import ast
import difflib
import re
from dataclasses import dataclass
from pathlib import Path

from course import manifest
from course.loader import root

BEGIN = re.compile(r"^(?P<indent>[ \t]*)# BEGIN SOLUTION (?P<id>\d+\.\d+)\s*$")
END = re.compile(r"^[ \t]*# END SOLUTION\s*$")
HEADER = (
    "# This file is GENERATED from solutions/{module}.py by `course stubs --write`.\n"
    "# Fill in the bodies that raise NotImplementedError; the notebook {notebook} explains each.\n"
)


class MarkerError(ValueError):
    """A solution's markers are malformed."""


@dataclass(frozen=True)
class Region:
    exercise: str
    begin: int  # 1-based line numbers of the markers
    end: int


def regions(source: str, filename: str = "<solution>") -> list[Region]:
    """The marked regions of a solution's source, checked for balance."""
    out: list[Region] = []
    open_: tuple[str, int] | None = None
    for n, line in enumerate(source.splitlines(), 1):
        if m := BEGIN.match(line):
            if open_:
                raise MarkerError(f"{filename}:{n}: BEGIN SOLUTION inside the region opened at line {open_[1]}")
            open_ = (m["id"], n)
        elif END.match(line):
            if not open_:
                raise MarkerError(f"{filename}:{n}: END SOLUTION without BEGIN")
            out.append(Region(open_[0], open_[1], n))
            open_ = None
        elif "BEGIN SOLUTION" in line or "END SOLUTION" in line:
            if line.lstrip().startswith("#"):
                raise MarkerError(f"{filename}:{n}: malformed marker {line.strip()!r}")
    if open_:
        raise MarkerError(f"{filename}:{open_[1]}: BEGIN SOLUTION {open_[0]} is never closed")
    return out


def stub_message(ex_id: str) -> str:
    ex = manifest.exercise(ex_id)
    st = manifest.stage_of(ex_id)
    return f"Exercise {ex.id}: {ex.title} — see {st.folder}.ipynb"


def make_stub(source: str, module: str, filename: str = "<solution>") -> str:
    """The stub text for a solution's source."""
    st = manifest.stage(module)
    lines = source.splitlines(keepends=True)
    regs = regions(source, filename)
    out: list[str] = []
    # keep a leading module docstring/comment block before the header? The header goes first.
    out.append(HEADER.format(module=st.module, notebook=st.notebook))
    pos = 0
    for r in regs:
        try:
            msg = stub_message(r.exercise)
        except KeyError as e:
            raise MarkerError(f"{filename}:{r.begin}: {e.args[0]}") from None
        if manifest.stage_of(r.exercise) is not st:
            raise MarkerError(f"{filename}:{r.begin}: exercise {r.exercise} belongs to another stage")
        out.extend(lines[pos : r.begin - 1])
        indent = BEGIN.match(lines[r.begin - 1].rstrip("\n"))["indent"]  # type: ignore[index]
        out.append(f"{indent}raise NotImplementedError({msg!r})\n")
        pos = r.end
    out.extend(lines[pos:])
    text = "".join(out)
    try:
        ast.parse(text, filename=f"stub of {filename}")
    except SyntaxError as e:
        raise MarkerError(f"{filename}: the generated stub does not parse ({e.msg}, line {e.lineno})") from None
    return text


def solution_path(module: str) -> Path:
    return root() / "solutions" / f"{manifest.stage(module).module}.py"


def generate_all(only: list[str] | None = None) -> dict[Path, str]:
    """{stub path: generated text} for every stage whose solution exists (or only these)."""
    out: dict[Path, str] = {}
    wanted = None if not only else {manifest.stage(k).module for k in only}
    for st in manifest.STAGES:
        if wanted is not None and st.module not in wanted:
            continue
        sol = solution_path(st.module)
        if not sol.exists():
            continue
        text = sol.read_text(encoding="utf-8")
        out[root() / st.folder / f"{st.module}.py"] = make_stub(text, st.module, str(sol.relative_to(root())))
    return out


def write_all(only: list[str] | None = None) -> list[Path]:
    written = []
    for path, text in generate_all(only).items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            written.append(path)
    return written


def check_all(only: list[str] | None = None) -> list[str]:
    """Problems found: stubs missing or out of sync with their solutions (with a diff)."""
    problems = []
    for path, text in generate_all(only).items():
        rel = path.relative_to(root())
        if not path.exists():
            problems.append(f"{rel} is missing (run `course stubs --write`)")
            continue
        have = path.read_text(encoding="utf-8")
        if have != text:
            diff = "".join(
                list(difflib.unified_diff(have.splitlines(True), text.splitlines(True), str(rel), "generated", n=1))[:20]
            )
            problems.append(f"{rel} differs from what `course stubs --write` generates:\n{diff}")
    return problems
