"""Generate the learner's stub package from the reference package.

A solution file marks each exercise body:

    def relu(self):
        \"\"\"The contract: what it returns, shapes, errors.\"\"\"
        # BEGIN SOLUTION 1.4
        # DECISION: what this exercise leaves to the learner (which axis, boundary, order,
        #   data structure or invariant); further comment lines continue it.
        # HINT: the idea, gently.
        #   (a comment line that is not a new HINT continues the hint above)
        # HINT: a more concrete step.
        out = ...
        return out
        # END SOLUTION

The stub is the same file with every marked region replaced, at the marker's
indentation, by

        raise NotImplementedError("Exercise 1.4: <title> — see 01_autograd.ipynb")

Everything outside the markers is given code and is kept verbatim. Markers do not nest.
The `# HINT:` comments at the top of a region are the exercise's hints, in order (regions
read file by file in the package's exercise order): the stub drops them with the region,
and `course hint 1.4` shows them one at a time from the generated `NN_stage/hints.json`.
The `# DECISION:` comment, first in the exercise's first region, is for maintainers: the
decision the exercise leaves to the learner (`decisions()`). It is never a hint and never
reaches a stub or the hints file.

Each stub file starts with a generated header: where it comes from, and, per exercise in
the file, the lines of its holes and the commands that check it and give its next hint. A
file without exercises says "nothing to write here".
"""

from __future__ import annotations

import ast
import difflib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from course import layout, manifest, results
from course.loader import root

BEGIN = re.compile(r"^(?P<indent>[ \t]*)# BEGIN SOLUTION (?P<id>\d+\.\d+)\s*$")
END = re.compile(r"^[ \t]*# END SOLUTION\s*$")
HINT = re.compile(r"^[ \t]*# HINT:\s?(?P<text>.*)$")
DECISION = re.compile(r"^[ \t]*# DECISION:\s?(?P<text>.*)$")
COMMENT = re.compile(r"^[ \t]*#\s?(?P<text>.*)$")
GENERATED = "# GENERATED from "  # every stub file's first line starts so
HINTS_FILE = "hints.json"


class MarkerError(ValueError):
    """A solution's markers are malformed."""


@dataclass(frozen=True)
class Region:
    exercise: str
    begin: int  # 1-based line numbers of the markers
    end: int


def ex_key(ex_id: str) -> tuple[int, ...]:
    """Exercise ids in numeric order: 3.9 < 3.10."""
    return tuple(int(p) for p in ex_id.split("."))


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


def hints(source: str, filename: str = "<solution>") -> dict[str, list[str]]:
    """{exercise id: its hints in order} from the `# HINT:` blocks at the top of its regions."""
    lines = source.splitlines()
    out: dict[str, list[str]] = {}
    for r in regions(source, filename):
        current: list[str] | None = None
        body = lines[r.begin:r.end - 1]
        used = 0
        if body and DECISION.match(body[0]):  # the decision and its continuation lines
            used = 1
            while used < len(body) and COMMENT.match(body[used]) and not HINT.match(body[used]) \
                    and not DECISION.match(body[used]):
                used += 1
        for line in body[used:]:
            if DECISION.match(line):  # not a hint's continuation: reported below
                break
            if m := HINT.match(line):
                current = [m["text"].strip()]
                out.setdefault(r.exercise, []).append("")
            elif current is not None and (m := COMMENT.match(line)):
                current.append(m["text"].strip())
            else:
                break
            out[r.exercise][-1] = " ".join(t for t in current if t)
            used += 1
        for n, line in enumerate(body[used:], r.begin + 1 + used):
            if HINT.match(line):
                raise MarkerError(f"{filename}:{n}: a hint must come first in its region, right after "
                                  f"`# BEGIN SOLUTION {r.exercise}` (or after its decision or another hint)")
            if DECISION.match(line):
                raise MarkerError(f"{filename}:{n}: a `# DECISION:` line comes first in its region, right "
                                  f"after `# BEGIN SOLUTION {r.exercise}`")
    return out


def decisions(source: str, filename: str = "<solution>") -> dict[str, list[str]]:
    """{exercise id: [its decision, one per region that states one]} from the `# DECISION:`
    line (and the comment lines continuing it) right after `# BEGIN SOLUTION N.M`."""
    lines = source.splitlines()
    out: dict[str, list[str]] = {}
    for r in regions(source, filename):
        body = lines[r.begin:r.end - 1]
        if not body or not (m := DECISION.match(body[0])):
            continue
        text = [m["text"].strip()]
        for line in body[1:]:
            if HINT.match(line) or DECISION.match(line) or not (c := COMMENT.match(line)):
                break
            text.append(c["text"].strip())
        out.setdefault(r.exercise, []).append(" ".join(t for t in text if t))
    return out


def stub_message(ex_id: str) -> str:
    ex = manifest.exercise(ex_id)
    st = manifest.stage_of(ex_id)
    return results.todo_message(ex.id, ex.title, f"{st.folder}.ipynb")


def _header(st: manifest.Stage, sol_rel: str, holes: dict[str, list[int]]) -> list[str]:
    if not holes:
        return [f"{GENERATED}{sol_rel} by `course stubs --write`.\n",
                f"# Nothing to write here: given code of stage {st.number} ({st.notebook}).\n"]
    out = [f"{GENERATED}{sol_rel} by `course stubs --write`: fill in the bodies that raise "
           "NotImplementedError.\n",
           f"# The lesson is {st.notebook}. Exercises in this file (line of each hole, then the commands):\n"]
    for ex_id, at in holes.items():
        where = ("line " if len(at) == 1 else "lines ") + ", ".join(map(str, at))
        out.append(f"#   {ex_id} {manifest.exercise(ex_id).title}: {where}; "
                   f"`course check {ex_id}`, `course hint {ex_id}`\n")
    return out


def make_stub(source: str, module: str, filename: str = "<solution>", solved: frozenset[str] = frozenset()) -> str:
    """The stub text for one solution file of stage `module` (`filename`: its path, shown in
    the header and in errors). `solved`: exercises whose bodies stay filled in (a learner
    partway through the stage, as the course's tests model one)."""
    st = manifest.stage(module)
    lines = source.splitlines(keepends=True)
    regs = regions(source, filename)
    body: list[str] = []
    holes: dict[str, list[int]] = {}
    pos = 0
    for r in regs:
        try:
            msg = stub_message(r.exercise)
        except KeyError as e:
            raise MarkerError(f"{filename}:{r.begin}: {e.args[0]}") from None
        if manifest.stage_of(r.exercise) is not st:
            raise MarkerError(f"{filename}:{r.begin}: exercise {r.exercise} belongs to another stage")
        body.extend(lines[pos : r.begin - 1])
        if r.exercise in solved:
            body.extend(lines[r.begin : r.end - 1])
            pos = r.end
            continue
        indent = BEGIN.match(lines[r.begin - 1].rstrip("\n"))["indent"]  # type: ignore[index]
        body.append(f"{indent}raise NotImplementedError({msg!r})\n")
        holes.setdefault(r.exercise, []).append(len(body))
        pos = r.end
    body.extend(lines[pos:])
    header = _header(st, filename, holes)
    holes = {k: [n + len(header) for n in v] for k, v in holes.items()}
    text = "".join(_header(st, filename, holes) + body)
    try:
        ast.parse(text, filename=f"stub of {filename}")
    except SyntaxError as e:
        raise MarkerError(f"{filename}: the generated stub does not parse ({e.msg}, line {e.lineno})") from None
    return text


def package_order(st: manifest.Stage, base: Path | None = None) -> list[Path]:
    """The stage's solution files in exercise order: by the first exercise each holds, given
    files (no exercise) after them, `__init__.py` first."""
    def key(p: Path):
        if p.name == "__init__.py":
            return (0, (), p.name)
        regs = regions(p.read_text(encoding="utf-8"), str(p))
        return (1, min(ex_key(r.exercise) for r in regs), p.name) if regs else (2, (), p.name)

    return sorted(layout.solution_files(st, base), key=key)


def stage_hints(st: manifest.Stage) -> dict[str, list[str]]:
    """{exercise id: hints} of a stage, every exercise of the manifest present."""
    out: dict[str, list[str]] = {ex.id: [] for ex in st.exercises}
    for p in package_order(st):
        for ex_id, hs in hints(p.read_text(encoding="utf-8"), str(p.relative_to(root()))).items():
            out.setdefault(ex_id, []).extend(hs)
    return out


def stage_decisions(st: manifest.Stage) -> dict[str, list[str]]:
    """{exercise id: its `# DECISION:` texts} of a stage, every exercise of the manifest present
    (an empty list where none is written down)."""
    out: dict[str, list[str]] = {ex.id: [] for ex in st.exercises}
    for p in package_order(st):
        for ex_id, ds in decisions(p.read_text(encoding="utf-8"), str(p.relative_to(root()))).items():
            out.setdefault(ex_id, []).extend(ds)
    return out


def generate_all(only: list[str] | None = None) -> dict[Path, str]:
    """{stub path: generated text} for every stage whose solution exists (or only these):
    each file of the stub package, and the stage's hints file."""
    out: dict[Path, str] = {}
    wanted = None if not only else {manifest.stage(k).module for k in only}
    for st in manifest.STAGES:
        if (wanted is not None and st.module not in wanted) or not layout.has_solution(st):
            continue
        for sol in layout.solution_files(st):
            rel = str(sol.relative_to(root()))
            out[layout.stub_dir(st) / sol.name] = make_stub(sol.read_text(encoding="utf-8"), st.module, rel)
        out[root() / st.folder / HINTS_FILE] = json.dumps(
            {"stage": st.number, "generated_by": "course stubs --write", "hints": stage_hints(st)},
            indent=1, ensure_ascii=False) + "\n"
    return out


def _stale(only: list[str] | None = None) -> list[Path]:
    """Generated stub files whose solution file is gone (and the old one-file stub)."""
    out = []
    wanted = None if not only else {manifest.stage(k).module for k in only}
    for st in manifest.STAGES:
        if (wanted is not None and st.module not in wanted) or not layout.has_solution(st):
            continue
        names = {p.name for p in layout.solution_files(st)}
        candidates = [root() / st.folder / f"{st.module}.py"]
        if layout.stub_dir(st).is_dir():
            candidates += [p for p in layout.stub_dir(st).glob("*.py") if p.name not in names]
        for p in candidates:
            if p.is_file() and not p.is_symlink():
                with open(p, encoding="utf-8", errors="replace") as f:
                    first = f.readline()
                if first.startswith(GENERATED) or first.startswith("# This file is GENERATED"):
                    out.append(p)
    return out


def write_all(only: list[str] | None = None) -> list[Path]:
    """Write every generated file that differs; remove generated files left from an older layout."""
    written = []
    for path, text in generate_all(only).items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text(text, encoding="utf-8")
            tmp.replace(path)
            written.append(path)
    for p in _stale(only):
        p.unlink()
        written.append(p)
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
                list(difflib.unified_diff(have.splitlines(True), text.splitlines(True), str(rel), "generated",
                                          n=1))[:20]
            )
            problems.append(f"{rel} differs from what `course stubs --write` generates:\n{diff}")
    for p in _stale(only):
        problems.append(f"{p.relative_to(root())} was generated from a solution file that is gone "
                        "(run `course stubs --write` to remove it)")
    return problems


def write_partial(st: manifest.Stage, dest: Path, solved: set[str]) -> Path:
    """Write stage `st`'s learner package into `dest` (a folder of the same name as the
    stub package) with the exercises in `solved` filled in and the others left as holes:
    a learner partway through the stage. Returns `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    for sol in layout.solution_files(st):
        rel = str(sol.relative_to(root()))
        (dest / sol.name).write_text(make_stub(sol.read_text(encoding="utf-8"), st.module, rel,
                                               frozenset(solved)), encoding="utf-8")
    return dest
