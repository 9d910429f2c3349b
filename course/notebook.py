"""What a lesson notebook calls, so that it runs top to bottom while the learner works.

    mod = course.lesson("autograd")   # first code cell: the package under study (course.load)
    course.check("1.3")               # a check cell: exercise 1.3's tests, one line
    course.needs("7.1", "7.5")        # a cell that needs these done (say, through a server thread)

`course.lesson` loads the package and, in IPython, guards every later cell: a cell that runs
into an exercise the learner has not written yet (the stub's `NotImplementedError("Exercise
1.3: ...")`) prints one line, `⏸ this cell needs exercise 1.3 (Reductions: sum, mean,
max): finish it, then run the cell again`, instead of a traceback, and the notebook goes on.
`course.needs(...)` stops a cell the same way before it starts, for the cases a hole cannot
show by itself (code that runs in another thread or process). Every other exception is
shown as usual. With the reference solution (`COURSE_IMPL=solution`) nothing is ever
stopped.

`course.check("N.M")` runs `course check N.M` in the notebook's own process (the tests run
in one child process, as under `course check`, which imports only what they need) and
prints its result in one line. `COURSE_NB_CHECKS=skip` (the maintainers' runs
of every notebook, which test the exercises elsewhere) prints that the check was skipped.
"""

from __future__ import annotations

import ast
import os
from types import ModuleType

from course import manifest, results
from course.loader import current_impl, load, root

PAUSE = "⏸"


class NotYet(Exception):
    """A lesson cell needs an exercise that is not written yet (see `needs`)."""

    def __init__(self, ex_id: str):
        super().__init__(ex_id)
        self.exercise = ex_id


def pause_line(ex_id: str) -> str:
    try:
        title = manifest.exercise(ex_id).title
    except KeyError:
        title = "?"
    return f"{PAUSE} this cell needs exercise {ex_id} ({title}): finish it, then run the cell again"


def _stopped_by(exc: BaseException) -> str | None:
    """The exercise a cell stopped at, if it stopped at an unwritten one; else None."""
    if isinstance(exc, NotYet):
        return exc.exercise
    seen = set()
    while exc is not None and id(exc) not in seen:  # a TODO re-raised as the cause of another
        seen.add(id(exc))
        if isinstance(exc, NotImplementedError):
            ex_id = results.todo_of_message(str(exc))
            if ex_id is not None:
                return ex_id
        group = getattr(exc, "exceptions", None)
        if group:
            for e in group:
                found = _stopped_by(e)
                if found:
                    return found
        exc = exc.__cause__ or exc.__context__
    return None


def _pause(exc: BaseException):
    """Called by a guarded cell's `except`: print the line, or re-raise what is no TODO."""
    ex_id = _stopped_by(exc)
    if ex_id is None:
        raise exc
    print(pause_line(ex_id))
    return None


_RESULT = "_course_cell_result"


class _Guard(ast.NodeTransformer):
    """Wraps a cell in `try: ... except Exception as e: course.notebook._pause(e)`, keeping
    the value of its last expression displayed (as `Out[n]`)."""

    def visit_Module(self, node: ast.Module) -> ast.Module:
        body = list(node.body)
        if not body or any(isinstance(n, ast.ImportFrom) and n.module == "__future__" for n in body):
            return node
        last = body[-1]
        shows = isinstance(last, ast.Expr)
        if shows:
            body[-1] = ast.Assign(targets=[ast.Name(_RESULT, ast.Store())], value=last.value)
        handler = ast.ExceptHandler(
            type=ast.Name("Exception", ast.Load()), name="_course_exc",
            body=[ast.Assign(targets=[ast.Name(_RESULT, ast.Store())], value=ast.Call(
                func=ast.Attribute(value=ast.Call(func=ast.Name("__import__", ast.Load()),
                                                  args=[ast.Constant("course.notebook")],
                                                  keywords=[ast.keyword("fromlist", ast.List([ast.Constant("_pause")],
                                                                                              ast.Load()))]),
                                   attr="_pause", ctx=ast.Load()),
                args=[ast.Name("_course_exc", ast.Load())], keywords=[]))])
        new = [ast.Assign(targets=[ast.Name(_RESULT, ast.Store())], value=ast.Constant(None)),
               ast.Try(body=body, handlers=[handler], orelse=[], finalbody=[])]
        if shows:
            new.append(ast.Expr(ast.Name(_RESULT, ast.Load())))
        node.body = new
        return ast.fix_missing_locations(node)


def _install() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None:
        return False
    if not any(isinstance(t, _Guard) for t in shell.ast_transformers):
        shell.ast_transformers.append(_Guard())
    return True


def lesson(module: str) -> ModuleType:
    """The stage package a notebook studies (the learner's, or the reference with
    COURSE_IMPL=solution), with the notebook's later cells guarded (see the module doc)."""
    _install()
    return load(module)


def done(ex_id: str) -> bool:
    """Has the learner written exercise `ex_id` (no hole of it left in the package)? Always
    true for the reference."""
    if current_impl() == "solution":
        return True
    from course import progress

    text = progress.package_text(manifest.stage_of(ex_id)) or ""
    return not results.has_hole(text, ex_id)


def needs(*ex_ids: str) -> None:
    """Stop this cell (one line, no traceback) unless every exercise in `ex_ids` is written."""
    for ex_id in ex_ids:
        manifest.exercise(ex_id)  # a typo is an error, not a pause
        if not done(ex_id):
            raise NotYet(ex_id)


def check(ex_id: str, timeout: int = 60) -> None:
    """Run exercise `ex_id`'s visible tests (`course check`, in this process: only the tests
    run in a child, so a check costs the tests' own seconds, not a new interpreter importing
    torch) and print one line: done, or its state and the failure that says the most.
    `timeout`: seconds per test on a quiet machine (`course check --timeout`)."""
    import contextlib
    import io

    from course import cli

    ex = manifest.exercise(ex_id)
    if os.environ.get("COURSE_NB_CHECKS", "").lower() == "skip":
        print(f"(check of {ex.id} skipped: COURSE_NB_CHECKS=skip)")
        return None
    out, err = io.StringIO(), io.StringIO()
    saved = {k: os.environ.get(k) for k in ("COURSE_IMPL", "COURSE_ROOT")}
    os.environ.update(COURSE_IMPL=current_impl(), COURSE_ROOT=str(root()))
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = cli.main(["check", ex.id, "--timeout", str(int(timeout))])
    except SystemExit as e:  # argparse
        rc = e.code if isinstance(e.code, int) else 2
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    print(summary_line(ex, rc, out.getvalue(), err.getvalue()))
    speed = [ln.strip() for ln in out.getvalue().splitlines() if ln.startswith(" ⏱ ") or ln.startswith("     ")
             and speed_started(out.getvalue(), ln)]
    if speed:  # the stage's quick speed check spoke: its whole line too
        print(" ".join(speed))
    return None


def speed_started(text: str, line: str) -> bool:
    """Is `line` a continuation of the speed check's line (it comes after a ` ⏱ ` line)?"""
    lines = text.splitlines()
    at = next((i for i, ln in enumerate(lines) if ln.startswith(" ⏱ ")), None)
    return at is not None and line in lines[at + 1:]


def summary_line(ex: manifest.Exercise, rc: int, stdout: str, stderr: str = "") -> str:
    """The one line of a check cell, from `course check N.M`'s output: its row's state and
    the whole of the failure shown under it (joined from its wrapped lines, never cut)."""
    lines = [ln.rstrip() for ln in stdout.splitlines()]
    at = next((i for i, ln in enumerate(lines) if f" {ex.id} " in ln[:10]), None)
    if rc == 0:
        return f"✔ {ex.id} {ex.title}: done"
    if at is None:
        return f"✘ {ex.id} {ex.title}: " + ((stderr.strip().splitlines() or [f"course check exited {rc}"])[-1])
    row = lines[at].split()
    state = row[-2] if len(row) > 2 else "not done"
    why: list[str] = []
    for ln in lines[at + 1:]:
        text = ln.strip()
        if not text or text.startswith(("points:", "given code")) or not ln.startswith("     "):
            break  # the next row, the points line or the closing line
        why.append(text)
    why_text = " ".join(why)
    if state == "TODO":
        return f"· {ex.id} {ex.title}: TODO" + ("" if why_text.startswith("TODO") else f" — {why_text}")
    if state == "done":  # the tests pass; something else (a collection error) kept it from done
        return f"◐ {ex.id} {ex.title}: its tests pass" + (f" — {why_text}" if why_text else "")
    return f"✘ {ex.id} {ex.title}: {state}" + (f" — {why_text}" if why_text else "")
