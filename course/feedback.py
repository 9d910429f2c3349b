"""Feedback that points at the learner's bug: what `course check`, `course status` and the
pytest plugin say about a failure.

- **One line per failure.** A failure's message is the exception's type and its first
  non-empty lines (`np.testing` messages start with a blank line, so "the first line" alone
  would be a bare `AssertionError:`), with the arrays it dumps left out: e.g.
  `AssertionError: Not equal to tolerance rtol=1e-09, atol=0 · Mismatched elements: 1 / 6
  (16.7%) · [0, 2]: 0.5 (ACTUAL), 1.0 (DESIRED) · ...`.
- **In the learner's file.** An exception raised inside the learner's module (a syntax
  error, an import error, a `ValueError` from NumPy two calls down) is reported at the
  learner's file and line, `01_autograd/autograd.py:123: SyntaxError: ...`, not at the test.
- **The most specific failing test.** Of an exercise's failed tests, `course check` shows
  the first in file order among those that say the most, ranked: a message that states a
  rule in words > a bare comparison (`assert 7.96 > 8.0`) > a bare exception name > the
  exercise's own TODO > a TODO of another exercise (that one is "blocked", see below). A
  failure raised in code of another exercise that is done is said so: "3.9's test failed
  in code of 3.4: ...".
- **Blocked.** An exercise is blocked by another when the manifest says it `requires` it
  (its tests call that code) and that one's own recorded result is short of full marks,
  or when its tests stop at that exercise's TODO. `course check` and `course status` say "blocked by 1.3".
- **Points and states.** Both commands score with `course.grading.score_exercise`, the rule
  `course grade` uses (an exercise earns its points in proportion to its passing tests; done,
  partial, failing, blocked, TODO), and print them rounded down to one decimal (`7.5/10`,
  never `10/10` before every test passes).
- **Given code apart.** Tests marked `given` check code the learner received; they are
  counted apart ("given code: 50 passed") and never make an exercise look done or failing.
"""

from __future__ import annotations

import math
import re
import textwrap
from collections import Counter
from pathlib import Path

from course import layout, manifest
from course.loader import root
from course.results import Crash, TestResult, as_results, todo_line as _todo_line

MAX_MESSAGE = 300  # characters of a one-line failure message
_DUMP = re.compile(r"^\s*(ACTUAL|DESIRED|x|y):\s")  # the arrays np.testing prints in full
_LABEL = re.compile(r"^\s*(Mismatch at index|First \d+ mismatches are at indices):\s*$")


# ---- one line per failure -------------------------------------------------------------

def summarize(exc: BaseException) -> str:
    """`Type: first non-empty lines of the message` on one line (arrays left out)."""
    group = getattr(exc, "exceptions", None)
    if group:  # an exception group (Hypothesis, TaskGroup): the first leaf says enough
        first = summarize(group[0])
        return first if len(group) == 1 else f"{first} (and {len(group) - 1} more)"
    name = type(exc).__name__
    if isinstance(exc, SyntaxError) and exc.msg:
        return f"{name}: {exc.msg}"
    text = str(exc)
    return summarize_text(f"{name}: {text}") if text.strip() else name


def summarize_text(text: str) -> str:
    """The same from an exception's printed form (`Type: message...`, perhaps multi-line)."""
    lines = [ln.strip() for ln in str(text).splitlines()]
    lines = [ln for ln in lines if ln and not _DUMP.match(ln) and not _LABEL.match(ln)]
    if len(lines) > 1 and lines[0].endswith(":"):  # "AssertionError:" then the message
        lines = [f"{lines[0]} {lines[1]}", *lines[2:]]
    if lines and lines[0].startswith("AssertionError: ") and not lines[0].startswith("AssertionError: assert "):
        # `assert ok, "fresh buffers must be zeros"`: the test's own words say it; pytest's
        # rewritten explanation after them (`assert tensor(False) · + where ...`) says less
        cut = next((i for i, ln in enumerate(lines[1:], 1) if ln.startswith("assert ")), None)
        if cut is not None:
            lines = lines[:cut]
    return _clip(" · ".join(lines[:6])) if lines else "failed"


def _clip(text: str, n: int = MAX_MESSAGE) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def is_informative(message: str) -> bool:
    """Does a one-line message say more than the exception's name?"""
    m = re.sub(r"^[\w.]+:\s*", "", message.strip(), count=1) if ":" in message else ""
    return bool(m.strip()) and m.strip() not in ("assert False", "assert None")


# ---- in the learner's file --------------------------------------------------------------

def _learner_files() -> dict[str, str]:
    """{absolute path of every learner module: its path relative to the course root}."""
    out = {}
    for st in manifest.STAGES:
        for p in layout.stub_files(st):
            out[str(p)] = layout.stub_rel(st, p.name)
            try:
                out[str(p.resolve())] = layout.stub_rel(st, p.name)
            except OSError:
                pass
    return out


def _chain(exc: BaseException | None):
    """The exception, then its causes and contexts, then the members of any group."""
    todo, seen = [exc], set()
    while todo:
        e = todo.pop(0)
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        todo += [e.__cause__, e.__context__, *getattr(e, "exceptions", ())]


def learner_location(exc: BaseException | None, follow_chain: bool = False
                     ) -> tuple[str, int, BaseException] | None:
    """(learner file relative to the root, line, the exception raised there), or None.

    A syntax error in the learner's module is placed where the parser stopped; any other
    exception at the innermost frame of its traceback that lies in the learner's module.
    `follow_chain` also looks at the exceptions it was raised from (pytest wraps an import
    error in its own `CollectError`); a test's failure is judged by its own exception only
    (a test's `AssertionError` about the learner's `ValueError` is the test's message)."""
    files = _learner_files()
    for e in (_chain(exc) if follow_chain else [exc] if exc is not None else []):
        if isinstance(e, SyntaxError) and e.filename:
            rel = files.get(str(e.filename)) or files.get(str(Path(e.filename).resolve()))
            if rel:
                return rel, int(e.lineno or 0), e
        found = None
        tb = e.__traceback__
        while tb is not None:
            rel = files.get(tb.tb_frame.f_code.co_filename)
            if rel:
                found = (rel, tb.tb_lineno, e)
            tb = tb.tb_next
        if found:
            return found
    return None


def failure_message(exc: BaseException | None) -> str | None:
    """One line for a failed test: `learner/file.py:LINE: Type: message` when the exception
    was raised in the learner's module, else `Type: message`. None without an exception."""
    if exc is None:
        return None
    if type(exc).__name__ == "CourseTimeout":  # the harness's clock: no learner file to blame
        return _clip(str(exc), 2 * MAX_MESSAGE)
    loc = learner_location(exc)
    if loc is not None:
        rel, line, inner = loc
        return _clip(f"{rel}:{line}: {summarize(inner)}")
    return summarize(exc)


def collect_error(exc: BaseException | None) -> tuple[str, list[str]] | None:
    """For an error while importing a test module: (one line at the learner's file and line,
    the lines to show: that line, the source line and a caret), if the learner's module
    caused it; else None."""
    loc = learner_location(exc, follow_chain=True)
    if loc is None:
        return None
    rel, line, inner = loc
    head = _clip(f"{rel}:{line}: {summarize(inner)}")
    shown = [head]
    src = getattr(inner, "text", None) if isinstance(inner, SyntaxError) else None
    if src is None:
        try:
            src = (root() / rel).read_text(encoding="utf-8").splitlines()[line - 1]
        except (OSError, IndexError, UnicodeDecodeError):
            src = None
    if src:
        src = src.rstrip("\n")
        shown.append(f"    {src.strip()}")
        off = getattr(inner, "offset", None) if isinstance(inner, SyntaxError) else None
        if off:
            lead = len(src) - len(src.lstrip())
            shown.append("    " + " " * max(0, off - 1 - lead) + "^")
    shown.append("No test can import your module until this is fixed.")
    return head, shown


class LearnerErrorRepr:
    """A short failure report naming the learner's file and line (pytest prints it)."""

    def __init__(self, lines: list[str], path: str, lineno: int):
        self.lines = lines
        self.reprcrash = Crash(path, lineno, lines[0])

    def toterminal(self, tw) -> None:
        tw.line(self.lines[0], red=True, bold=True)
        for ln in self.lines[1:]:
            tw.line(ln)

    def __str__(self) -> str:
        return "\n".join(self.lines)


# ---- per exercise: the failure to show, blocked, points --------------------------------

_BARE = re.compile(r"^(?:[\w./-]+\.py:\d+: )?AssertionError: assert\b")  # pytest's own explanation
OWN_TODO, OTHER_TODO = 3, 4


def states_a_rule(message: str) -> bool:
    """Does a failure message say something in words (the test's own message, or an
    exception's), rather than a bare `assert 7.96 > 8.0` comparison?"""
    return is_informative(message) and not _BARE.match(message.strip())


def _rank(result: TestResult, ex_id: str) -> int:
    """0: a message that states a rule; 1: a bare comparison; 2: a bare exception name;
    OWN_TODO: the exercise's own TODO; OTHER_TODO: another exercise's."""
    todo = result.todo_id
    if todo is not None:
        return OWN_TODO if todo == ex_id else OTHER_TODO
    if states_a_rule(result.message):
        return 0
    return 1 if is_informative(result.message) else 2


def pick_failure(results, ex_id: str) -> TestResult | None:
    """The failed test to show for exercise `ex_id` (see the module docstring), or None."""
    failed = [r for r in as_results(results) if r.outcome == "failed"]
    if not failed:
        return None
    return min(enumerate(failed), key=lambda ir: (_rank(ir[1], ex_id), ir[0]))[1]


def requires_closure(ex_id: str) -> list[str]:
    """Every exercise `ex_id` needs, directly or through another, in course order."""
    seen: set[str] = set()
    todo = list(manifest.exercise(ex_id).requires)
    while todo:
        r = todo.pop()
        if r not in seen:
            seen.add(r)
            todo += list(manifest.exercise(r).requires)
    order = {e.id: i for i, e in enumerate(e for s in manifest.STAGES for e in s.exercises)}
    return sorted(seen, key=lambda i: order.get(i, 1 << 30))


_AT = re.compile(r"^(?P<path>[\w./-]+\.py):(?P<line>\d+): ")


def code_of(st: manifest.Stage, message: str, locate) -> str | None:
    """The exercise whose code raised a failure placed at the learner's file and line
    (`NN_stage/pkg/file.py:LINE: ...`, see `failure_message`), if any: `locate(st, file name,
    line)` says whose code that line is (`course.progress.exercise_at`)."""
    m = _AT.match(message or "")
    if m is None or locate is None:
        return None
    path = m["path"].replace("\\", "/")
    prefix = f"{st.folder}/{st.module}/"
    if not path.startswith(prefix) or "/" in path[len(prefix):]:
        return None
    try:
        return locate(st, path[len(prefix):], int(m["line"]))
    except Exception:  # a hint, never a failure of the check itself
        return None


def blocked_by(ex_id: str, states: dict[str, str], results=()) -> list[str]:
    """The exercises that keep `ex_id` from passing: its declared requirements whose own
    recorded result is not full marks (per `states`, {id: state}: not done, not merely
    "blocked", which says its tests found nothing wrong in its code but stopped at yet another
    TODO, and not "started", written but never checked: nothing says it is wrong), and the
    other exercises whose TODO stopped its tests in this run."""
    out = [r for r in manifest.exercise(ex_id).requires
           if states.get(r, "done") not in ("done", "no-gpu", "blocked", "started")]
    for res in as_results(results):
        t = res.todo_id if res.outcome == "failed" else None
        if t and t != ex_id and t not in out:
            out.append(t)
    return out


def _later(other: str, ex_id: str, st: manifest.Stage) -> bool:
    """Whether exercise `other` comes after `ex_id` in stage `st`'s order (the lesson's)."""
    order = [e.id for e in st.exercises]
    return other in order and order.index(other) > order.index(ex_id)


def waits_only_for_later(st: manifest.Stage, ex_id: str, results) -> list[str]:
    """The later exercises of the lesson whose TODOs alone stopped `ex_id`'s failed tests
    (its own code passed everything else), or [] when anything else failed. `results`: a list,
    or a Run's dict of them by node id."""
    results = results.values() if isinstance(results, dict) else results
    failed = [r for r in as_results(results) if r.outcome == "failed" and r.exercise == ex_id]
    later = sorted({r.todo_id for r in failed if r.todo_id and _later(r.todo_id, ex_id, st)},
                   key=[e.id for e in st.exercises].index)
    return later if failed and all(r.todo_id in later for r in failed) else []


def fmt_points(score: float, max_score: float) -> str:
    """`7.5/10`: rounded down to one decimal, so that full marks mean every test passed."""
    return f"{fmt_score(score)}/{max_score:g}"


def fmt_score(score: float) -> str:
    s = math.floor(score * 10 + 1e-9) / 10
    return f"{s:.1f}".removesuffix(".0")


def given_counts(results) -> Counter:
    """Outcomes of the tests of given code (not graded)."""
    return Counter(r.outcome for r in as_results(results) if r.given and not r.exercise)


# ---- course check ----------------------------------------------------------------------

SYMBOL = {"done": "✔", "failing": "✘", "partial": "◐", "started": "…", "TODO": "·", "missing": "?",
          "error": "!", "blocked": "⊘", "no-gpu": "-"}


def _short(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def wrap(text: str, indent: str = "     ", width: int = 80, max_lines: int = 3) -> list[str]:
    """`text` on at most `max_lines` lines of `width` columns; the first starts with `indent`,
    the others with as many spaces."""
    rest = " " * len(indent)
    lines = textwrap.wrap(" ".join(text.split()), width=width, initial_indent=indent,
                          subsequent_indent=rest, break_long_words=True, break_on_hyphens=False)
    lines = lines or [indent.rstrip()]
    if len(lines) > max_lines:
        lines = lines[:max_lines]
        lines[-1] = lines[-1][: width - 1] + "…"
    return lines


def _group_errors(errors: list[str]) -> list[str]:
    """Collection errors, one per distinct cause ("... (stops 4 test files)")."""
    counts: dict[str, int] = {}
    for e in errors:
        key = e.split(" (while collecting ", 1)[0]
        counts[key] = counts.get(key, 0) + 1
    return [k if n == 1 else f"{k} (stops {n} test files)" for k, n in counts.items()]


def check_lines(st: manifest.Stage, results, errors: list[str], only: str | None = None,
                known: dict[str, str] | None = None, locate=None) -> tuple[list[str], int]:
    """What `course check` prints for one run of a stage's (visible) tests, and how many
    exercises are done. Lines fit 80 columns. `only`: the run was of that exercise's tests
    alone (`course check 6.3`); `known` then gives the other exercises' states (from the
    saved progress) for "blocked by"; `locate(st, file name, line)`, the exercise whose code
    a line of the learner's file is (`course.progress.exercise_at`), lets a failure raised in
    another exercise's code say so."""
    from course.scoring import score_exercise

    results = as_results(results)
    by_ex: dict[str, list[TestResult]] = {e.id: [] for e in st.exercises}
    for r in results:
        if r.exercise in by_ex and not r.hidden:
            by_ex[r.exercise].append(r)
    sc = {ex.id: score_exercise(ex.id, ex.points, by_ex[ex.id]) for ex in st.exercises}
    states = {ex_id: s.state for ex_id, s in sc.items()}
    if only is not None:
        states = {**(known or {}), only: states.get(only, "error")}
    out: list[str] = []
    grouped = _group_errors(errors)
    for err in grouped:
        out += wrap(err, indent=" ! ", max_lines=6)
    done = 0
    any_todo = False
    total_got = total_max = 0.0
    for ex in st.exercises:
        if only is not None and ex.id != only:
            continue
        rs, s = by_ex[ex.id], sc[ex.id]
        got, state, out_of = s.points, s.state, s.out_of
        total_got += got
        total_max += out_of
        failed = [r for r in rs if r.outcome == "failed"]
        done += state == "done"
        name = _short(f"{ex.id} {ex.title}", 48)
        out.append(f" {SYMBOL.get(state, ' ')} {name:<48} {state:>8} {fmt_points(got, out_of):>11}")
        if s.uncounted:  # say what a pass on this machine does not cover
            out += wrap(f"{s.passed}/{s.counted} on CPU; {s.uncounted} GPU test{'s' if s.uncounted > 1 else ''} "
                        "not run here (no CUDA): `course grade` on a GPU machine runs them")
        if state in ("done", "no-gpu"):
            continue
        if not rs:
            if not grouped:
                out += wrap("no test of this exercise ran")
            continue
        block = blocked_by(ex.id, states, rs)
        pick = pick_failure(rs, ex.id)
        passed, counted = s.passed, s.counted
        own_todo = sum(r.todo_id == ex.id for r in failed)
        if pick is not None and _rank(pick, ex.id) == OWN_TODO and not passed:  # untouched: one line
            any_todo = True
            out += wrap(f"TODO, blocked by {', '.join(block)} (its tests use them)" if block else
                        "TODO: fill it in")
            continue
        if block and all(_later(b, ex.id, st) for b in block):  # the lesson comes to them next
            waiting = sum(r.todo_id in block for r in failed)
            out += wrap(f"{waiting} of its tests call {', '.join(block)}, later in the lesson: they count "
                        f"once {'that is' if len(block) == 1 else 'those are'} written")
        elif block:
            out += wrap(f"blocked by {', '.join(block)}: its tests call that code"
                        + ("" if own_todo or not failed else
                           "; do that first" if len(block) == 1 else "; do those first"))
        if pick is not None:
            name = pick.nodeid.split("::")[-1]
            if _rank(pick, ex.id) == OWN_TODO:
                out += wrap(f"{passed}/{counted} tests pass; {own_todo} stop at its TODO")
            elif _rank(pick, ex.id) < OWN_TODO:
                head = f"{passed}/{counted} tests pass. " if counted else ""
                where = code_of(st, pick.message, locate)
                if where is not None and where != ex.id and states.get(where) in ("done", "no-gpu"):
                    # the bug shows in this exercise's test but lies in code another one's tests pass
                    out += wrap(f"{head}{ex.id}'s test failed in code of {where}: {name}: {pick.message}",
                                max_lines=5)
                else:
                    out += wrap(f"{head}{name}: {pick.message or 'failed'}", max_lines=5)  # the whole message
        elif s.problem:  # nothing failed, yet not done: a skipped test counts as not passed
            out += wrap(f"{passed}/{counted} tests pass. {s.problem}")
    given = given_counts(results) if only is None else None
    if given:
        parts = [f"{given[k]} {k}" for k in ("passed", "failed", "skipped") if given[k]]
        line = f" given code (not graded): {', '.join(parts)}"
        if given["failed"]:
            line += " — did an edit break given code?"
        out.append(line if len(line) <= 80 else line[:79] + "…")
    out.append(f" points: {fmt_points(total_got, total_max)}"
               + (f"; lesson: {st.notebook}" if any_todo else ""))
    return out, done


# ---- pytest's closing line -------------------------------------------------------------

def terminal_summary(results) -> str | None:
    """`exercises: 0/8 done (85 tests stop at a TODO); given code: 50 passed` for a run."""
    from course.scoring import score_exercise

    results = as_results(results)
    by_ex: dict[str, list[TestResult]] = {}
    for r in results:
        if r.exercise:
            by_ex.setdefault(r.exercise, []).append(r)
    given = given_counts(results)
    if not by_ex and not given:
        return None
    done = sum(score_exercise(ex_id, 0.0, rs).state == "done" for ex_id, rs in by_ex.items())
    todo = sum(1 for rs in by_ex.values() for r in rs if r.outcome == "failed" and r.todo_id)
    parts = [f"exercises: {done}/{len(by_ex)} done"
             + (f" ({todo} failed test{'s' if todo != 1 else ''} stop at a TODO)" if todo else "")]
    if given:
        parts.append("given code: " + ", ".join(f"{given[k]} {k}" for k in ("passed", "failed", "skipped")
                                               if given[k]))
    return "; ".join(parts)


def sharpen_report(report, exc: BaseException | None) -> None:
    """Put the one-line message (at the learner's file and line when it came from there)
    into a failed test's report, where pytest's short summary and `course check` read it."""
    crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
    msg = failure_message(exc)
    if crash is None or not msg:
        return
    try:
        crash.message = msg
    except AttributeError:  # a frozen or foreign repr: keep pytest's own
        pass


def todo_line(stub_message: str, marker=None) -> str:
    """The one line pytest shows for a test stopped by a stub: `TODO: Exercise 1.2: ...`, and
    when the test (its `exercise` marker) belongs to another exercise, which one needs it
    (`... (a test of exercise 1.7 needs it)`)."""
    return _todo_line(stub_message, marker.args[0] if marker is not None and marker.args else None)
