"""One test's result and one run's record, in the one shape the harness keeps them, and the
stub's TODO message.

`TestResult` is what the pytest plugin assembles from a test's phase reports, what the
grading parent (`course.runner`) records from the event stream, and what `course.grading`,
`course.feedback` and `course.progress` score. As JSON (`--course-results`, the events,
`.course/progress.json`) it is `to_dict()`, read back by `from_dict()`, which fills in what
a file of an older version lacks and coerces what a forged one gets wrong.

A stub's hole raises `NotImplementedError(todo_message(...))`, i.e.
`Exercise 1.3: <title> — see 01_autograd.ipynb`; pytest shows that failure as one line,
`TODO: Exercise 1.3: ...` (`todo_line`); `todo_of_message` reads the exercise id back
from either form. This module is the only one that knows the format.

`Run` is the record of one contained pytest run (`course.runner` fills it in from the event
stream): what was collected, each test's result, and what went wrong around them. `course
check`, `course grade` and the scoring (`course.scoring`) all read that one record.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

OUTCOMES = ("passed", "failed", "skipped")
META = ("nodeid", "exercise", "points", "given", "gpu")  # what collecting a test tells
RAN = ("outcome", "message", "todo", "skip_reason", "duration")  # what running it adds
HIDDEN_DIR = "hidden_tests"


# ---- the TODO message -------------------------------------------------------------------

TODO_PREFIX = "TODO: "
_STUB = re.compile(r"Exercise (\d+\.\d+)\b")
_SHOWN = re.compile(re.escape(TODO_PREFIX) + _STUB.pattern)


def todo_message(ex_id: str, title: str, notebook: str) -> str:
    """What a stub's hole raises: `Exercise 1.3: <title> — see 01_autograd.ipynb`."""
    return f"Exercise {ex_id}: {title} — see {notebook}"


def todo_of_message(text: str | None) -> str | None:
    """The exercise id of a stub's message (`Exercise 1.3: ...`) or of a report that shows
    one (`... TODO: Exercise 1.3: ...`); None for anything else."""
    text = text or ""
    m = _STUB.match(text) or _SHOWN.search(text)
    return m.group(1) if m else None


def todo_line(stub_message: str, test_exercise: str | None = None) -> str:
    """`TODO: Exercise 1.2: ...`, and when the stopped test belongs to another exercise,
    which one: `... (a test of exercise 1.7 needs it)`."""
    line = TODO_PREFIX + stub_message
    todo = todo_of_message(stub_message)
    if todo and isinstance(test_exercise, str) and test_exercise != todo:
        line += f" (a test of exercise {test_exercise} needs it)"
    return line


def has_hole(source: str, ex_id: str) -> bool:
    """Does this stub source still raise exercise `ex_id`'s TODO?"""
    return re.search(r"raise\s+NotImplementedError\(\s*['\"]" + re.escape(f"Exercise {ex_id}:"), source) is not None


class Crash:
    """Where a short failure report (a stub's TODO, a learner's syntax error) ends: pytest
    reads it as a report's `reprcrash`, and `--tb=line` prints it as `path:lineno: message`."""

    def __init__(self, path: str, lineno: int, message: str):
        self.path, self.lineno, self.message = path, lineno, message

    def __str__(self) -> str:
        return f"{self.path}:{self.lineno}: {self.message}"


# ---- the test result --------------------------------------------------------------------

@dataclass
class TestResult:
    """One test: which it is (META) and how its run ended (RAN). `outcome` is "" until it ran."""

    __test__ = False  # not a pytest test class, whatever its name

    nodeid: str
    exercise: str | None = None  # "1.3", from @pytest.mark.exercise; None for given code
    points: float | None = None  # the marker's points=N (weighs a hidden test)
    given: bool = False  # @pytest.mark.given: a test of given code, not graded
    gpu: bool = False  # @pytest.mark.gpu: needs CUDA
    outcome: str = ""  # passed / failed / skipped
    message: str = ""  # the failure on one line (`TODO: Exercise 1.3: ...` for a stub's)
    todo: str | None = None  # the stub's message that stopped it
    skip_reason: str = ""
    duration: float = 0.0
    contained: str = ""  # "crash" / "timeout" when the grading parent decided the outcome

    @property
    def todo_id(self) -> str | None:
        """The exercise whose TODO stopped this test, if any."""
        return todo_of_message(self.todo) if self.todo else todo_of_message(self.message)

    @property
    def hidden(self) -> bool:
        """A test of a stage's hidden_tests/ (the instructor's)."""
        return HIDDEN_DIR in self.nodeid.split("::")[0].replace("\\", "/").split("/")[:-1]

    def to_dict(self, keys: tuple[str, ...] | None = None) -> dict:
        d = asdict(self)
        return d if keys is None else {k: d[k] for k in keys}

    @classmethod
    def from_dict(cls, d: dict) -> TestResult:
        """From JSON (ours, an older version's or a forged one); ValueError without a nodeid."""
        if not isinstance(d, dict) or not isinstance(d.get("nodeid"), str):
            raise ValueError(f"not a test result: {str(d)[:80]}")
        points, duration = d.get("points"), d.get("duration")
        return cls(
            nodeid=d["nodeid"],
            exercise=str(d["exercise"]) if d.get("exercise") else None,
            points=float(points) if _is_number(points) else None,
            given=bool(d.get("given")), gpu=bool(d.get("gpu")),
            outcome=str(d.get("outcome") or ""),
            message=str(d.get("message") or ""),
            todo=str(d["todo"]) if d.get("todo") else None,
            skip_reason=str(d.get("skip_reason") or ""),
            duration=float(duration) if _is_number(duration) else 0.0,
            contained=str(d.get("contained") or ""))


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def as_result(r: TestResult | dict) -> TestResult:
    return r if isinstance(r, TestResult) else TestResult.from_dict(r)


def as_results(rs) -> list[TestResult]:
    """Results from TestResults or their dicts (a test's literal, a saved file)."""
    return [as_result(r) for r in rs]


@dataclass
class Run:
    """One contained pytest run. `results` may be given as a list of TestResults (or their
    dicts): it is kept keyed by node id, in that order."""

    collected: dict[str, TestResult] = field(default_factory=dict)  # nodeid -> what collection told (META)
    results: dict[str, TestResult] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)  # collection errors, crashes, a run that could not start
    anomalies: list[str] = field(default_factory=list)  # protocol violations: tampering
    answers: dict[str, dict[str, dict]] = field(default_factory=dict)  # nodeid -> name -> course.answer record
    output: str = ""
    processes: int = 0
    collect_failed: bool = False
    tampered: bool = False  # the plugin reported replaced helpers: the run stops

    def __post_init__(self) -> None:
        if not isinstance(self.results, dict):
            self.results = {r.nodeid: r for r in as_results(self.results)}

    def in_order(self) -> list[TestResult]:
        """The results in collection order, then those of tests never collected."""
        order = list(self.collected)
        extra = [n for n in self.results if n not in self.collected]
        return [self.results[n] for n in order + extra if n in self.results]
