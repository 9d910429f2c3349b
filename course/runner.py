"""Run tests in a child process and keep the parent's own record of what happened.

The child is `python -m pytest` with the course plugin streaming one JSON line per event
(collected, start, result, finish) to a pipe as it happens. The parent, which never runs
learner code, reads the stream and decides every result itself:

- a test that starts and never reports (the interpreter crashed, `os._exit`, a signal)
  fails, named, with what ended the process;
- a test that overruns its time limit by more than a grace period (a loop inside C code,
  a Hypothesis test that swallowed the alarm) has its whole process group killed by the
  parent, and fails, named;
- either way the run resumes in a new process with the tests already done deselected,
  so one crash costs one test, not the stage;
- anything that does not fit the protocol (a result for a test that never started, two
  results for one test, events after the session finished, lines that are not events, a
  collected test that never reports) is kept as an *anomaly*; the grader treats anomalies
  as tampering.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from course import worker
from course.results import META, OUTCOMES, RAN, Run, TestResult
from course.sandbox import Sandbox
from course.slowdown import machine_slowdown, timeout_message

# Installed pytest plugins the course's tests never use, kept out of every test process: each
# is imported at start-up otherwise (nbval's imports alone take seconds; xdist's and anyio's
# about 0.3 s of CPU a process together, measured).
UNUSED_PLUGINS = ("-p", "no:cacheprovider", "-p", "no:nbval", "-p", "no:xdist", "-p", "no:xdist.looponfail",
                  "-p", "no:anyio", "-p", "no:platformdirs")
GRACE = 5.0  # seconds past a test's limit before the parent kills its process
MAX_PROCESSES = 10_000  # test processes of one run at most (each must report a result)
MAX_ANSWERS = 500  # answers kept per test (course.answer)


# The header `faulthandler.dump_traceback_later(..., exit=True)` writes before it ends the
# process with exit code 1: the plugin's watchdog for a test stuck in C code (its limit is
# the parent's plus a grace, but measured a moment later, so on a machine getting busier it
# can fire before the parent's own kill).
_WATCHDOG = re.compile(r"^Timeout \(\d+:\d\d:\d\d(?:\.\d+)?\)!$", re.M)


def _signal_name(rc: int) -> str:
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


def _ended(rc: int | None) -> str:
    if rc is None:
        return "the test process ended"
    if rc < 0:
        return f"the test process was killed by {_signal_name(rc)}"
    return f"the test process exited with code {rc} in the middle of this test (os._exit?)"


def run_tests(paths: list[str | Path], impl: str, *, root: Path, timeout: float = 60,
              sandbox: Sandbox | None = None, env: dict | None = None, hidden: bool = True,
              collect_timeout: float | None = None, extra: list[str] | None = None,
              cache_bytecode: bool = False) -> Run:
    """Run pytest on `paths` (under course root `root`) against `impl`, containing crashes
    and time-outs per test. `env` is the child's whole environment (None: inherit).
    `cache_bytecode`: let the child write bytecode, pytest's rewritten test modules among it
    (`course check` on the learner's own copy: rewriting a stage's tests costs seconds each
    run) and format failures as one line (seconds for a stub's many tracebacks); off for
    grading, whose child runs with -B in a fresh workspace."""
    run = Run()
    slow = machine_slowdown()
    collect_timeout = collect_timeout if collect_timeout is not None else max(120.0, 2 * timeout + 60) * slow.factor
    work = Path(tempfile.mkdtemp(prefix="course-run-"))
    done_file = work / "done.txt"
    done_file.write_text("", encoding="utf-8")
    log_path = work / "output.log"
    outputs: list[str] = []
    try:
        if sandbox is not None:
            os.chmod(work, 0o755)
        while run.processes < MAX_PROCESSES:
            before = len(run.results)
            finished = _one_process(run, paths, impl, root=root, timeout=timeout, sandbox=sandbox, env=env,
                                    hidden=hidden, collect_timeout=collect_timeout, extra=extra or [],
                                    cache_bytecode=cache_bytecode,
                                    done_file=done_file, log_path=log_path, outputs=outputs)
            if finished or run.collect_failed:
                break
            if run.tampered:  # the stage scores 0 whatever the rest does: stop here
                for n in run.collected:
                    if n not in run.results:
                        run.results[n] = replace(run.collected[n], outcome="failed",
                                                 message="not run: the test process was caught tampering")
                break
            remaining = [n for n in run.collected if n not in run.results]
            if not remaining:
                break
            if len(run.results) == before:  # no progress: do not spin
                why = run.errors[-1] if run.errors else "the test process ended before running a test"
                for n in remaining:
                    run.results[n] = replace(run.collected[n], outcome="failed", message=f"not run: {why}",
                                             contained="crash")
                break
            done_file.write_text("\n".join(run.results) + "\n", encoding="utf-8")
        run.output = "\n".join(outputs)
        if sandbox is None and cache_bytecode:  # the next check finds a warm worker (course.worker)
            worker.ensure_started(dict(os.environ) if env is None else env,
                                  interactive=sys.stdout.isatty() or "ipykernel" in sys.modules)
        return run
    finally:
        for p in work.iterdir():
            p.unlink()
        work.rmdir()


def _failed(run: Run, nodeid: str, message: str, contained: str, **kw) -> TestResult:
    """The parent's own verdict on a test the child could not report."""
    meta = run.collected.get(nodeid) or TestResult(nodeid)
    return replace(meta, outcome="failed", message=message, contained=contained, **kw)


def _one_process(run: Run, paths, impl, *, root, timeout, sandbox, env, hidden, collect_timeout, extra, cache_bytecode,
                 done_file, log_path, outputs) -> bool:
    """One child process. True when its session finished (nothing left to resume)."""
    r, w = os.pipe()
    bytecode = [] if cache_bytecode else ["-B"]
    cmd = [sys.executable, "-I", *bytecode, "-m", "pytest", *map(str, paths), f"--impl={impl}",
           f"--course-events-fd={w}", f"--course-done={done_file}", f"--timeout={timeout:g}",
           "-q", "-rN", "--no-header", *UNUSED_PLUGINS, f"--rootdir={root}",
           f"--confcutdir={root}"]
    if (root / "pyproject.toml").exists():
        cmd += ["-c", str(root / "pyproject.toml")]
    if hidden:
        cmd.append("--hidden-tests")
    cmd += extra
    child_env = dict(os.environ) if env is None else dict(env)
    child_env.update(COURSE_IMPL=impl, COURSE_ROOT=str(root), COURSE_DERANDOMIZE="1")  # same code, same grade
    # nobody reads the child's tracebacks (the events carry each failure's line), so it formats
    # one line each, and no captured logs (a stub's task tracebacks): pytest's long form parses
    # every frame's source file, which doubled the CPU of a stub's run (stage 04 on its stubs,
    # visible and hidden tests: 26.2 s of user CPU with the long form, 12.1 s with --tb=line)
    cmd += ["--tb=line", "--show-capture=no"]
    if cache_bytecode:  # course check: the next check imports the rewritten tests from bytecode
        child_env.pop("PYTHONDONTWRITEBYTECODE", None)
    kw = sandbox.popen_kwargs() if sandbox is not None else {"start_new_session": True}
    with open(log_path, "wb") as log:
        proc = None
        if sandbox is None and cache_bytecode:  # course check: a warm worker's fork, if one runs
            proc = worker.spawn(cmd[cmd.index("pytest") + 1:], cwd=root, env=child_env, stdout=log.fileno(),
                                pass_fd=w, bytecode=True)
        try:
            proc = proc or subprocess.Popen(cmd, cwd=root, env=child_env, stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT, pass_fds=(w,), **kw)
        except OSError as e:
            os.close(r)
            os.close(w)
            run.errors.append(f"could not start the test process: {e}")
            run.collect_failed = True
            return True
    os.close(w)
    run.processes += 1
    state = _Reader(run, timeout=timeout, collect_timeout=collect_timeout)
    killed_for = None
    try:
        buf = b""
        eof = False
        while not eof:
            wait = state.deadline - time.monotonic()
            if wait <= 0 and not state.extend():
                killed_for = state.in_flight or "collect"
                break
            wait = max(wait, 0.05)
            ready, _, _ = select.select([r], [], [], min(wait, 1.0))
            if not ready:
                if proc.poll() is not None:  # exited; a detached descendant may hold the pipe open
                    eof = True
                    break
                continue
            chunk = os.read(r, 1 << 16)
            if not chunk:
                eof = True
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                state.feed(line)
            if run.tampered:
                break
    finally:
        os.close(r)
        if killed_for is not None or proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            rc = proc.wait(timeout=max(GRACE, 5.0) if killed_for is None else 10)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
        if sandbox is not None:
            sandbox.reap(group=proc.pid)
        else:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        outputs.append(log_path.read_bytes()[-200_000:].decode("utf-8", errors="replace"))

    if not state.seen_collected:
        tail = "\n".join(outputs[-1].strip().splitlines()[-15:])
        if killed_for == "collect":
            run.errors.append(f"collecting the tests took longer than {collect_timeout:g} s and was stopped:\n{tail}")
        else:
            run.errors.append(f"pytest stopped before running any test ({_ended(rc)}):\n{tail}")
        run.collect_failed = True
        return True
    if state.in_flight is not None:
        if killed_for is not None:
            ran = time.monotonic() - state.started
            msg = timeout_message(ran, timeout, state.slowdown, " (the test process was stopped)")
            run.results[state.in_flight] = _failed(run, state.in_flight, msg, "timeout", duration=round(ran, 3))
        elif rc == 1 and _WATCHDOG.search(outputs[-1][-50_000:]):  # the child's own faulthandler watchdog
            ran = time.monotonic() - state.started  # fired first (it measured the machine a moment later)
            msg = timeout_message(ran, timeout, state.slowdown, " (the test process's watchdog ended it)")
            run.results[state.in_flight] = _failed(run, state.in_flight, msg, "timeout", duration=round(ran, 3))
        else:
            run.results[state.in_flight] = _failed(run, state.in_flight, f"crashed: {_ended(rc)}", "crash")
        return False
    if state.finished:
        stopped = state.exitstatus in (2, 3)  # pytest's INTERRUPTED, INTERNAL_ERROR
        if state.interrupted is not None:
            why = _last_error_line(outputs[-1]) or ("interrupted" if state.exitstatus == 2 else "an internal error")
            run.results[state.interrupted] = _failed(
                run, state.interrupted, f"the test session stopped during this test ({why})", "crash")
        missing = [n for n in state.expected if n not in run.results]
        if missing and (stopped or state.interrupted is not None):
            return False  # resume the rest in a new process
        if missing:
            run.anomalies.append(f"{len(missing)} collected test(s) never reported a result, e.g. {missing[0]}")
        return True
    if killed_for is not None:  # between tests (teardown, session end) for too long
        run.errors.append(f"the test process hung between tests and was stopped after {timeout:g} s")
    return False


def _last_error_line(output: str) -> str:
    """The last line of an INTERNALERROR or KeyboardInterrupt report in pytest's output."""
    lines = [ln for ln in output.splitlines() if ln.startswith("INTERNALERROR>") or "KeyboardInterrupt" in ln]
    for ln in reversed(lines):
        text = ln.replace("INTERNALERROR>", "").strip()
        if text and not text.startswith(("File ", "^", "~")):
            return text[:200]
    return ""


class _Reader:
    """Applies the child's events to the parent's record, checking the protocol."""

    def __init__(self, run: Run, timeout: float, collect_timeout: float):
        self.run, self.timeout = run, timeout
        self.deadline = time.monotonic() + collect_timeout
        self.started = time.monotonic()  # when the running test (or collection) started
        self.slowdown = machine_slowdown(measure=False)  # the most seen while it ran
        self.in_flight: str | None = None
        self.seen_collected = False
        self.finished = False
        self.interrupted: str | None = None
        self.exitstatus = 0
        self.expected: list[str] = []

    def _arm(self) -> None:
        """A new test (or the gap after one): its deadline from the machine's slowdown now.
        The parent allows more than the child's own alarm (its factor may lag the child's)."""
        self.started = time.monotonic()
        self.slowdown = machine_slowdown(measure=False)
        self.deadline = self.started + self.timeout * self.slowdown.factor * 1.25 + GRACE

    def extend(self) -> bool:
        """At the deadline: if the machine got slower since, move it (never past
        MAX_SLOWDOWN x the limit); True if moved."""
        if not self.seen_collected:
            return False
        now = machine_slowdown()
        if now.factor <= self.slowdown.factor:
            return False
        self.slowdown = now
        deadline = self.started + self.timeout * now.factor * 1.25 + GRACE
        if deadline <= time.monotonic():
            return False
        self.deadline = deadline
        return True

    def _anomaly(self, what: str) -> None:
        if len(self.run.anomalies) < 20:
            self.run.anomalies.append(what)

    def feed(self, line: bytes) -> None:
        try:
            ev = json.loads(line)
            kind = ev["ev"]
        except (ValueError, KeyError, TypeError):
            self._anomaly(f"a line on the event channel that is not an event: {line[:80]!r}")
            return
        if self.finished:
            self._anomaly(f"a {kind!r} event arrived after the session finished")
            return
        run = self.run
        if kind == "collected":
            if self.seen_collected:
                self._anomaly("the tests were reported collected twice")
                return
            self.seen_collected = True
            for t in ev.get("tests", []):
                try:
                    meta = TestResult.from_dict({k: t.get(k) for k in META})
                except (ValueError, AttributeError):
                    continue
                run.collected.setdefault(meta.nodeid, meta)
                self.expected.append(meta.nodeid)
            for e in ev.get("errors", []):
                if e not in run.errors:
                    run.errors.append(str(e))
            self._arm()
        elif kind == "start":
            node = ev.get("nodeid")
            if not isinstance(node, str):
                self._anomaly(f"a start event without a test id: {node!r:.80}")
                return
            if not self.seen_collected or node not in self.expected:
                self._anomaly(f"a test that was not collected started: {node}")
            elif self.in_flight is not None:
                self._anomaly(f"{node} started while {self.in_flight} was still running")
            elif node in run.results:
                self._anomaly(f"{node} started a second time")
            self.in_flight = node
            self._arm()
        elif kind == "result":
            node = ev.get("nodeid")
            if not isinstance(node, str) or node != self.in_flight:
                self._anomaly(f"a result for {node}, which was not the running test ({self.in_flight})")
                return
            if node in run.results:
                self._anomaly(f"a second result for {node}")
                return
            outcome = ev.get("outcome")
            if outcome not in OUTCOMES:
                self._anomaly(f"an unknown outcome {outcome!r} for {node}")
                outcome = "failed"
            meta = run.collected.get(node) or TestResult(node)
            ran = TestResult.from_dict({"nodeid": node, **{k: ev.get(k) for k in RAN}})  # never `contained`
            run.results[node] = replace(meta, outcome=outcome, message=ran.message[:500], todo=ran.todo,
                                        skip_reason=ran.skip_reason[:300], duration=ran.duration)
            self.in_flight = None
            self._arm()
        elif kind == "finish":
            # pytest ends the session early on KeyboardInterrupt or an internal error raised
            # outside a test's own call: the running test is charged with it, the rest resume
            self.interrupted = self.in_flight
            self.in_flight = None
            try:
                self.exitstatus = int(ev.get("exitstatus", 0))
            except (TypeError, ValueError):
                self.exitstatus = 0
            self.finished = True
            self._arm()
        elif kind == "answer":  # course.answer: plain data for the running test, judged by the grader
            node, name = ev.get("nodeid"), ev.get("name")
            if not isinstance(node, str) or node != self.in_flight:
                self._anomaly(f"an answer for {str(node)[:200]}, which was not the running test ({self.in_flight})")
                return
            if not isinstance(name, str):
                self._anomaly(f"an answer without a name for {node}")
                return
            given = run.answers.setdefault(node, {})
            if len(given) < MAX_ANSWERS or name in given:
                given[name] = {"value": ev.get("value"), "rtol": ev.get("rtol"), "atol": ev.get("atol")}
        elif kind == "tamper":
            run.tampered = True
            replaced = ev.get("replaced") if isinstance(ev.get("replaced"), list) else ["?"]
            names = ", ".join(str(x)[:60] for x in replaced[:5])
            self._anomaly(f"{names} replaced during {str(ev.get('nodeid'))[:200]}")
        else:
            self._anomaly(f"an unknown event {kind!r}")
