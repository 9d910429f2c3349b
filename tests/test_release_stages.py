"""Every release `--through NN` works for a learner: no released test, conftest, bench or
lesson uses a solution the release withholds (static, every stage; issue 33: one such
import in stage 07 scored correct code 0/100); a release `--through 07` with the reference
copied into the learner's package scores full marks under `course check`; every bench of
stages 01 and 05-08 takes `--impl` and loads stage code only after its arguments; every
command of the released stage READMEs and lessons works in releases `--through 05` and `08`.
(Apart from tests/test_release.py so that the suite's two workers can share the work.)"""
from __future__ import annotations

import ast
import functools
import json
import os
import re
import shlex
import shutil
import sys
from pathlib import Path

import pytest

from course import layout, manifest
from tests.helpers import ROOT, existing_stages, run
from tests.test_release import THROUGH, _readme_commands, _release


# ---- every release --through NN: what its files import, what its commands do -------------------

def _withheld_names(files_of: manifest.Stage) -> set[str]:
    from course import release

    return {st.module for st in manifest.STAGES} - release.shipped_solutions(files_of)


def _guarded(node, parents) -> bool:
    """An import inside `try: ... except ImportError/ModuleNotFoundError/Exception`."""
    for p in parents.get(node, ()):
        if isinstance(p, ast.Try) and any(
                h.type is None or any(isinstance(n, ast.Name) and n.id in ("ImportError", "ModuleNotFoundError",
                                                                             "Exception")
                                      for n in ast.walk(h.type)) for h in p.handlers):
            return True
    return False


def _withheld_uses(source: str, withheld: set[str], top_level_only: bool = False) -> list[str]:
    """`solutions.<withheld>` imported (unguarded), named in a string (a `-m` argument, an
    import_module), or loaded with `course.load(<withheld>, impl="solution")`."""
    return [f"line {n}: {what}" for n, what, mod in _solution_uses(source, top_level_only) if mod in withheld]


@functools.lru_cache(maxsize=None)
def _solution_uses(source: str, top_level_only: bool) -> tuple[tuple[int, str, str], ...]:
    """Every use of a stage's reference in `source`: (line, what, the stage module)."""
    withheld = {st.module for st in manifest.STAGES}
    tree = ast.parse(source)
    parents: dict = {}
    for p in ast.walk(tree):
        for c in ast.iter_child_nodes(p):
            parents[c] = parents.get(p, ()) + (p,)
    bad = []

    def hit(name: str) -> str | None:
        parts = name.split(".")
        return parts[1] if parts[0] == "solutions" and len(parts) > 1 and parts[1] in withheld else None

    nodes = tree.body if top_level_only else list(ast.walk(tree))
    for node in nodes:
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif not top_level_only and isinstance(node, ast.Constant) and isinstance(node.value, str):
            if re.fullmatch(r"solutions\.\w+(\.\w+)*", node.value) and hit(node.value):
                bad.append((node.lineno, f"the string {node.value!r}", hit(node.value)))
            continue
        elif not top_level_only and isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "load":
            impl = {k.arg: k.value for k in node.keywords}.get("impl")
            if (node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value in withheld
                    and isinstance(impl, ast.Constant) and impl.value == "solution"):
                bad.append((node.lineno, f"course.load({node.args[0].value!r}, impl='solution')", node.args[0].value))
            continue
        for mod in dict.fromkeys(hit(n) for n in names if hit(n)):
            if not _guarded(node, parents):
                bad.append((node.lineno, f"import {', '.join(n for n in names if hit(n) == mod)}", mod))
    return tuple(bad)


def _notebook_code(path: Path) -> str:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    return "\n".join("\n".join("pass" if ln.lstrip().startswith(("!", "%")) else ln for ln in c.splitlines())
                     for c in code)


@pytest.mark.parametrize("through", [st.number for st in manifest.STAGES])
def test_no_released_file_uses_a_withheld_solution(through):
    """Static, for every release `--through NN` (milliseconds, where building and running all
    eight would take minutes): no visible test or conftest of the released stages imports,
    names or loads a solution the release withholds (stage NN's own and later ones: a
    collection error scores correct code 0, issue 33), no bench imports one at its top level
    (each parses its arguments before it loads stage code), and no notebook imports one
    unguarded. What is released is what `course release` computes (`shipped_solutions`)."""
    last = manifest.stage(through)
    if last not in existing_stages():
        pytest.skip(f"stage {through} has no solution")
    withheld = _withheld_names(last)
    found = []
    for st in manifest.STAGES[:manifest.STAGES.index(last) + 1]:
        folder = ROOT / st.folder
        for path in sorted((folder / "tests").rglob("*.py")):
            found += [f"{path.relative_to(ROOT)}: {b}" for b in _withheld_uses(path.read_text(encoding="utf-8"), withheld)]
        for path in sorted(folder.glob("bench*.py")):
            found += [f"{path.relative_to(ROOT)}: {b}" for b in
                      _withheld_uses(path.read_text(encoding="utf-8"), withheld, top_level_only=True)]
        for path in sorted(folder.glob("*.ipynb")):
            found += [f"{path.relative_to(ROOT)}: {b}" for b in _withheld_uses(_notebook_code(path), withheld)]
    assert not found, (f"a release --through {through} withholds solutions/{{{','.join(sorted(withheld))}}}, "
                       "which these released files use (reach the module under test through course.load, "
                       "given code through the package that ships):\n" + "\n".join(found))


def test_the_static_check_finds_what_it_looks_for():
    bad = _withheld_uses("from solutions.server.serve import wait_until_healthy\nimport solutions.paged\n"
                         "x = ['-m', 'solutions.server']\nimport course\ncourse.load('server', impl='solution')\n"
                         "try:\n    import solutions.server\nexcept ImportError:\n    pass\n", {"server"})
    assert sorted(int(b.split(":")[0].split()[1]) for b in bad) == [1, 3, 5], bad


FULL_CHECK = os.environ.get("COURSE_RELEASE_FULL_CHECK") == "1"


@pytest.mark.parametrize("target", ["7.1", pytest.param("07", marks=pytest.mark.skipif(
    not FULL_CHECK, reason="the whole of `course check 07` in a release (177 s at load average 8, 99 s at 3, "
                           "on 2 cores): set COURSE_RELEASE_FULL_CHECK=1"))])
def test_a_stage_07_release_with_the_reference_scores_full_marks(target, tmp_path_factory):
    """The end-to-end guard of issue 33's headline: a release `--through 07` (which withholds
    solutions/server/), the reference copied into the learner's package, `course check` there
    scores full marks. `course check 7.1` collects every test file of the stage (one withheld
    import anywhere and it scores 0, as all of stage 07 did) and runs 7.1's tests: 25 s at load
    average 8. The whole stage, `course check 07` (100/100, its servers started by the
    release's own `course serve`), runs with COURSE_RELEASE_FULL_CHECK=1. The other stages'
    releases are held by the static check above (test_no_released_file_uses_a_withheld_solution)
    and by the collection of 01, 04 and 08 in their releases."""
    out = _release(tmp_path_factory, "07")
    st = manifest.stage("07")
    for path in layout.solution_dir(st).glob("*.py"):
        shutil.copy2(path, out / st.folder / st.module / path.name)
    proc = run([sys.executable, "-m", "course", "check", target], cwd=out, env={"COURSE_ROOT": str(out)},
               impl="student", timeout=600)
    both = proc.stdout + proc.stderr
    points = sum(e.points for e in st.exercises if target in (st.number, e.id))
    assert proc.returncode == 0 and f"points: {points}/{points}" in proc.stdout, both[-4000:]
    if target == "7.1":  # the bench there: the reference it cannot have is refused, in one line
        proc = run([sys.executable, "07_serving/bench.py", "--impl", "solution"], cwd=out,
                   env={"COURSE_ROOT": str(out)}, impl="student", timeout=300)
        assert proc.returncode == 2 and "--impl solution: the reference solution of stage 07" in proc.stderr
        assert "Traceback" not in proc.stderr, proc.stderr


IMPL_BENCHES = [p.relative_to(ROOT).as_posix() for st in manifest.STAGES
                for p in sorted((ROOT / st.folder).glob("bench*.py"))]


@pytest.mark.parametrize("bench", IMPL_BENCHES)
def test_a_bench_takes_impl_and_loads_stage_code_only_after_its_arguments(bench):
    """Each bench of every stage takes `--impl` (course/bench_impl.py) and loads no
    stage package at import time: `--help` works on a learner's package in any state, and in
    a release it measures the learner's package (the reference is withheld there)."""
    text = (ROOT / bench).read_text(encoding="utf-8")
    tree = ast.parse(text)
    assert "add_impl_argument" in text, f"{bench} has no --impl"
    own = next(st for st in manifest.STAGES if bench.startswith(st.folder))
    for node in tree.body:
        for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                break
            assert getattr(call.func, "attr", None) != "load", f"{bench}:{call.lineno} loads stage code at import"
    assert not _withheld_uses(text, {own.module}, top_level_only=True), bench


def test_a_server_bench_stops_at_the_learners_todo_in_one_line():
    """A learner's server answers an exercise still to do with a 500 carrying its
    NotImplementedError; `raise_todo` (course/bench_impl.py, which the server benches call on
    a first probe request) raises it, so `run_bench` ends the bench with that exercise's line
    instead of a traceback (07_serving/bench.py crashed on such a server with KeyError)."""
    from course.bench_impl import raise_todo

    body = ('{"error":{"message":"internal error: NotImplementedError: Exercise 7.1: The token budget: n and '
            'max_tokens against the context \u2014 see 07_serving.ipynb","type":"internal_error"}}')
    with pytest.raises(NotImplementedError, match=r"^Exercise 7\.1: The token budget: n and max_tokens against"):
        raise_todo(body)
    raise_todo('{"error":{"message":"the server is overloaded","code":"overloaded"}}')  # no exercise: nothing
    for bench in ("07_serving/bench.py", "07_serving/bench_host.py"):
        assert "raise_todo(" in (ROOT / bench).read_text(encoding="utf-8"), f"{bench} never probes for a TODO"


# ---- the stage READMEs' and lessons' commands in releases --through 05 and 08 -------------------

COMMANDS_THROUGH = ("05", "08")
_PLACEHOLDER = re.compile(r"(?<![\w-])(?:N|M|S|B|T|FILE|DIR|PATH|MODEL|BASELINE|KEY|ARGS|N\.M|\d\.[xNM])(?![\w-])")
_LONG = ("serve", "eval")  # `course` commands that run for minutes: checked with --help
# The benches and `course profile|bench` run for real in smoke mode (COURSE_BENCH_SMOKE=1, see
# course/bench_impl.py: every row once at tiny sizes), every one of them by default;
# COURSE_RELEASE_BENCH_SMOKE=0 runs them with --help instead, as the other long commands.
# Each smoke runs once a test session (`_smoke_plan`); their figures are in the test's docstring.
BENCH_SMOKE = os.environ.get("COURSE_RELEASE_BENCH_SMOKE", "1") != "0"
_SMOKED = ("profile", "bench") if BENCH_SMOKE else ()  # `course` commands run in smoke mode
_LONG = _LONG + tuple(c for c in ("profile", "bench") if c not in _SMOKED)
_BENCH = re.compile(r"\d\d_\w+/bench\w*\.py")


def _shell_lines(text: str) -> list[str]:
    """The commands of a Markdown text's shell blocks: continuation lines joined, comments
    and `[...]` synopsis options dropped."""
    from course import release

    cmds = []
    for m in release._FENCE.finditer(text):
        if not release.shell_block(m[1], m[2]):
            continue
        start, cd = len(cmds), ""
        for line in m[2].splitlines():
            if re.fullmatch(r"cd \S+", line.strip()):  # the block's later lines run in that folder
                cd = line.strip() + " && "
                continue
            if len(cmds) > start and (cmds[-1].endswith("\\") or (line[:1] in (" ", "\t") and line.strip()
                                                     and not line.lstrip().startswith("#"))):
                cmds[-1] = cmds[-1].rstrip("\\") + " " + line.strip()
            else:
                cmds.append(cd + line if line.strip() and not line.lstrip().startswith("#") else line)
    out = []
    for cmd in cmds:
        cmd = re.sub(r"\s#.*$", "", cmd).strip()
        cmd = re.sub(r"\s*\[[^\[\]]*\]", "", cmd).strip()
        if cmd and not cmd.startswith("#"):
            out.append(cmd)
    return out


def _lesson_lines(nb: Path) -> list[str]:
    """The shell commands a lesson's text gives: inline `course ...`, `python ...`, `pytest ...`
    and its Markdown shell blocks (placeholders such as `course check 1.x` left out)."""
    cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
    out = []
    for c in cells:
        if c["cell_type"] != "markdown":
            continue
        text = "".join(c["source"])
        out += _shell_lines(text)
        out += [" ".join(m[1].split()) for m in re.finditer(r"`((?:course|python3?|pytest) [^`]+)`", text)]
    return [c for c in out if not _PLACEHOLDER.search(c)]


def _stage_of(argv: list[str]) -> manifest.Stage | None:
    for a in argv:
        for st in manifest.STAGES:
            if a == st.number or a.startswith(st.folder) or re.fullmatch(rf"{int(st.number)}\.\d+", a):
                return st
    return None


_NO_PATH = ("--threads", "--repeat", "--json", "--impl", "--out", "--requests", "--quick",  # pick no other code path:
            "--budget", "--flood", "--quiet", "--rows", "--warm", "--window")  # sizes (bench_fair, bench_host)
_SELECTOR = ("--part", "--parts", "--stages")  # a subset of the bench's parts; none: all of them


def _smoke_key(argv: list[str]) -> tuple[str, tuple[str, ...]]:
    """What tells one smoke run from another: (the bench, or `course CMD`; its options, sorted,
    as `--opt` or `--opt=value`) but those that pick no other code path (threads, repeats,
    sizes, --quick, output files, the implementation: with the references copied in, student
    and solution run the same code); `--plot`'s file dropped (its figure is the code path)."""
    target = " ".join(argv[1:4] if argv[1] == "-m" else argv[1:2])
    rest, opts = argv[4 if argv[1] == "-m" else 2:], []
    i = 0
    while i < len(rest):
        name, _, value = rest[i].partition("=")
        if not value and i + 1 < len(rest) and not rest[i + 1].startswith("--"):
            value, i = rest[i + 1], i + 1
        i += 1
        if name not in _NO_PATH:
            opts.append(name if name == "--plot" or not value else f"{name}={value}")
    return target, tuple(sorted(opts))


def _smoke_covers(big: tuple, small: tuple) -> bool:
    """Whether smoke run `big` runs every code path of `small`: the same bench, each option of
    `small` in `big`, and the parts `small` selects (`--part(s)`, `--stages`) among `big`'s."""
    if big[0] != small[0]:
        return False

    def split(opts):
        sel = [o.partition("=")[2] for o in opts if o.partition("=")[0] in _SELECTOR]
        parts = None if not sel or sel[0] == "all" else set(sel[0].split(","))
        return parts, {o for o in opts if o.partition("=")[0] not in _SELECTOR}

    (big_parts, big_rest), (small_parts, small_rest) = split(big[1]), split(small[1])
    parts_ok = big_parts is None or (small_parts is not None and small_parts <= big_parts)
    return parts_ok and small_rest <= big_rest


_SMOKE_RUN: list[tuple] = []  # the smoke keys run in this test session (both releases: each once)


def _smoke_plan(keys: list[tuple | None], done: list[tuple] | None = None) -> list[bool]:
    """Which of a release's smoke runs (their `_smoke_key`s; None: not a smoke run) to run:
    not one whose code paths a run of this session (`_SMOKE_RUN`) or another of these runs
    covers (`_smoke_covers`: `02_data_dedup/bench.py --part tokenizer` is in the plain run's,
    a bench without --plot in the same with it; of two equal runs the first)."""
    done = _SMOKE_RUN if done is None else done
    todo = []
    for i, k in enumerate(keys):
        todo.append(k is not None and not any(_smoke_covers(d, k) for d in done) and not any(
            j != i and o is not None and _smoke_covers(o, k) and (j < i or not _smoke_covers(k, o))
            for j, o in enumerate(keys)))
    return todo



def _plan(cmd: str, out: Path, last: manifest.Stage, owner: manifest.Stage) -> tuple[list[str] | None, dict, Path, str]:
    """(argv to run or None, env, cwd, what a static check found wrong or ''). A command is
    run when it is about the last stage (it names it, or names no stage and is `owner`'s);
    a bench of any released stage and `course profile|bench` run for real in smoke mode
    (env COURSE_BENCH_SMOKE=1, see course/bench_impl.py)."""
    from course.cli import build_parser

    env, cwd = {}, out
    m = re.match(r"cd (\S+) && (.*)", cmd)
    if m:
        cwd, cmd = out / m[1], m[2]
        if not cwd.is_dir():
            return None, env, cwd, f"no folder {m[1]}"
    argv = shlex.split(cmd)
    while argv and re.fullmatch(r"[A-Z_]+=\S*", argv[0]):
        k, v = argv.pop(0).split("=", 1)
        env[k] = v
    prog = argv[0]
    if prog.startswith(".venv/bin/"):
        prog = prog[len(".venv/bin/"):]
    st = _stage_of(argv) or owner
    mine = st is last
    helped = argv + ([] if "--help" in argv else ["--help"])
    if any("/path/" in a for a in argv):  # a placeholder for the learner's own vLLM environment
        script = next((a for a in argv if a.endswith(".py")), None)
        if script is None or not (cwd / script).is_file() or not (BENCH_SMOKE and _BENCH.fullmatch(script)):
            return None, env, cwd, "" if script is None or (cwd / script).is_file() else f"no {script}"
        # a bench's smoke run without it (bench_vllm.py: "skipped: ... needs vLLM", exit 0)
        argv = [a for i, a in enumerate(argv) if "/path/" not in a and "/path/" not in (argv[i + 1:] or [""])[0]]
    if prog == "course":
        try:
            build_parser().parse_args(argv[1:])
        except SystemExit as e:
            if e.code:
                return None, env, cwd, "course does not take these arguments"
        if argv[1] in _SMOKED:  # `course profile` has no smoke mode of its own (course/): its --quick
            rest = argv[2:] + (["--quick"] if argv[1] == "profile" and "--quick" not in argv else [])
            if "--out" in rest:  # a report folder outside the release: one inside it
                rest[rest.index("--out") + 1] = str(out / f"smoke-profile-{Path(rest[rest.index('--out') + 1]).name}")
            return [sys.executable, "-m", "course", argv[1], *rest], {**env, "COURSE_BENCH_SMOKE": "1"}, cwd, ""
        if not mine:
            return None, env, cwd, ""
        return [sys.executable, "-m", "course", *(helped if argv[1] in _LONG else argv)[1:]], env, cwd, ""
    if prog in ("python", "python3"):
        if argv[1] == "-m":
            mod = argv[2]
            paths = [cwd / p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p] + [cwd, out]
            found = any((p / mod.replace(".", "/")).with_suffix(".py").is_file()
                        or (p / mod.replace(".", "/") / "__main__.py").is_file() for p in paths)
            if not found:
                return None, env, cwd, f"no module {mod}"
            if env.get("PYTHONPATH"):
                env["PYTHONPATH"] = os.pathsep.join(str(cwd / p) for p in env["PYTHONPATH"].split(os.pathsep))
            return ([sys.executable, "-m", mod, *helped[3:]] if mine else None), env, cwd, ""
        script = argv[1]
        if not ((cwd / script).is_file() or (cwd / script / "__main__.py").is_file()):
            return None, env, cwd, f"no {script}"
        if BENCH_SMOKE and _BENCH.fullmatch(script) and "--help" not in argv:
            rest = argv[2:]
            for i, a in enumerate(rest[:-1]):  # an output file outside the release: one inside it
                if a in ("--json", "--plot") and Path(rest[i + 1]).is_absolute():
                    rest[i + 1] = str(out / Path(rest[i + 1]).name)
            return [sys.executable, script, *rest], {**env, "COURSE_BENCH_SMOKE": "1"}, cwd, ""
        return ([sys.executable, script, *helped[2:]] if mine else None), env, cwd, ""
    if prog == "pytest":
        paths = [a for a in argv[1:] if not a.startswith("-") and ("/" in a or a[:2].isdigit())]
        if not paths or not all((cwd / p).exists() for p in paths):
            return None, env, cwd, f"no {paths}"
        if "--impl solution" in " ".join(argv) or env.get("COURSE_IMPL") == "solution":
            if st is None or not layout.has_solution(st, out):
                return None, env, cwd, "runs a reference this release withholds"
        if not mine or "--nbval-lax" in argv:
            return None, env, cwd, ""
        return [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:nbval", *argv[1:]], env, cwd, ""
    if prog in ("torchrun", "bash"):
        target = argv[argv.index("-m") + 1].replace(".", "/") if "-m" in argv else argv[-1]
        ok = any((cwd / p).exists() for p in (target, f"{target}.py", f"{target}/__main__.py")) or prog == "torchrun"
        return None, env, cwd, "" if ok else f"no {target}"
    if prog in ("curl", "git", "vllm", "pip", "jupyter"):
        return None, env, cwd, ""  # external programs (curl: against `course serve`, started above it)
    return None, env, cwd, f"unknown program {prog}"


def test_the_smoke_plan_runs_each_code_path_once():
    def key(*argv: str) -> tuple:
        return _smoke_key(["python", *argv])

    dedup = [key("02_data_dedup/bench.py"), key("02_data_dedup/bench.py", "--plot", "a.png", "--json", "a.json"),
             key("02_data_dedup/bench.py", "--part", "tokenizer", "--quick", "--impl", "solution"), None]
    assert _smoke_plan(dedup, done=[]) == [False, True, False, False], dedup
    paged = [key("06_paged_attention/bench.py", "--parts", "decode"),
             key("06_paged_attention/bench.py", "--threads", "1", "--parts", "memory,decode,prefix"),
             key("06_paged_attention/bench.py", "--parts=gpu", "--repeat", "3")]
    assert _smoke_plan(paged, done=[]) == [False, True, True], paged
    assert _smoke_plan(paged + [key("06_paged_attention/bench.py")], done=[]) == [False, False, False, True]
    kv = [key("04_kv_cache/bench.py", "--quant", "--threads", "1"), key("04_kv_cache/bench.py", "--plot", "p.png"),
          key("04_kv_cache/bench.py", "--quant", "--json", "q.json")]
    assert _smoke_plan(kv, done=[]) == [True, True, False], kv
    assert _smoke_plan(kv, done=[kv[0]]) == [False, True, False]  # run in this session's other release
    fair = [key("07_serving/bench_fair.py", "--impl", "solution"), key("07_serving/bench_fair.py", "--budget", "256"),
            key("07_serving/bench_fair.py", "--model", "smollm2", "--rows", "16", "--flood", "48", "--budget", "64")]
    # sizes pick no code path: the SmolLM2 run covers the other two
    assert _smoke_plan(fair, done=[]) == [False, False, True], fair
    prof = [_smoke_key(["python", "-m", "course", "profile", "--stages", "sweep", "--threads", "1", "--quick"]),
            _smoke_key(["python", "-m", "course", "profile", "--quick", "--out", "x"])]
    assert prof[1] == ("-m course profile", ()) and _smoke_plan(prof, done=[]) == [False, True], prof


@pytest.fixture(scope="module", params=COMMANDS_THROUGH)
def released_commands(request, tmp_path_factory):

    return _release(tmp_path_factory, request.param), manifest.stage(request.param)


def test_every_command_of_the_released_stage_readmes_and_lessons_works_there(released_commands):
    """Every shell command of every released stage README and every command a lesson's text
    gives, in releases --through 05 and 08, on the untouched stubs. Within the suite's time:
    the last stage's commands run (`course check`, `course demo`, `course status`, `course
    hint` as they are, unless the root README's test runs them in this release already;
    `pytest` as a collection, `--co`, since `course check` runs the same tests; `python -m M`,
    `course serve|eval` with `--help` appended, once a script: its import and its parser);
    the earlier stages' commands are resolved without running them (the script, module, stage
    folder or test path is there; `course` parses the arguments; `--impl solution` only where
    the reference ships), their runs being their own release's. Every bench command (bench_vllm.py's
    without its placeholder `--vllm-python`) and `course profile|bench` run for real in smoke
    mode (COURSE_BENCH_SMOKE=1: every row once at tiny sizes, figures meaningless), after the
    others, on the learner's packages with each released stage's reference copied in (as a
    learner who has done the exercises): those must end 0 and print their smoke line. Each
    smoke runs once a session (`_smoke_plan`): the last stage's in its own release (05's in
    --through 05, where its reference is withheld), every other stage's in --through 08, and
    not one whose code paths another covers (`_smoke_covers`). Measured (nice -n 10
    .venv/bin/python -m pytest tests/test_release_stages.py -k every_command -p no:xdist -q
    --durations=5, 2026-12-07, two cores, load 0.9-1.0): 153 s wall, 153 s of CPU (user + sys,
    /usr/bin/time), against 47 s and 48 s with COURSE_RELEASE_BENCH_SMOKE=0 (--help instead)
    just after: the 14 smoke runs add about 105 s of CPU (their figures: course/bench_impl.py).
    With 04_kv_cache/bench_load.py's smoke added (a tiny GGUF instead of SmolLM2; 25-27 s of CPU
    alone at load 3-4), the same command with -k "every_command or smoke" took 424 s wall and
    184 s of CPU at load 1.6-3.0 (2026-12-07 01:19, a CI run beside it).

    Each run ends 0 or 1, never a traceback, a refusal or a missing module."""

    out, last = released_commands
    cmds = []
    for st in manifest.STAGES[:manifest.STAGES.index(last) + 1]:
        cmds += [(st, c) for c in _shell_lines((out / st.folder / "README.md").read_text(encoding="utf-8"))]
        cmds += [(st, c) for c in _lesson_lines(out / st.notebook)]
    assert any(st is last for st, _ in cmds) and len(cmds) > 20, cmds
    wrong, ran = [], 0
    # what test_every_command_of_the_released_readme_works_there runs in this release already
    seen = {tuple(shlex.split(c)[1:]) for c in _readme_commands((out / "README.md").read_text(encoding="utf-8"))
            if c.startswith("course ")} if last.number in THROUGH else set()
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    planned = [(st, cmd, *_plan(cmd, out, last, st)) for st, cmd in cmds]
    planned.sort(key=lambda p: "COURSE_BENCH_SMOKE" in p[3])  # the smoke runs last (stable)
    # a smoke run once a session: the last stage's in its own release, the rest in the whole course's
    whole = last is manifest.stage(COMMANDS_THROUGH[-1])
    keys = [_smoke_key(argv) if argv is not None and "COURSE_BENCH_SMOKE" in env
            and (whole or (_stage_of(argv[1:]) or st) is last) else None for st, _, argv, env, _, _ in planned]
    todo = _smoke_plan(keys)
    copied = False
    for i, (st, cmd, argv, env, cwd, why) in enumerate(planned):
        if why:
            wrong.append(f"{st.folder}: `{cmd}`: {why}")
        if argv is None or ("COURSE_BENCH_SMOKE" in env and not todo[i]):
            continue

        # one run a script or `course` command shown with --help (its import and parser), one a test folder
        key = tuple(argv[1:4 if argv[1] == "-m" else 2]) if argv[-1] == "--help" else tuple(argv[1:])
        if argv[1:3] == ["-m", "course"] and argv[3] not in _LONG:
            key = tuple(argv[3:])
        if "COURSE_BENCH_SMOKE" in env:
            key = ("smoke", keys[i])
            _SMOKE_RUN.append(keys[i])
        if key in seen:
            continue
        seen.add(key)
        smoke = "COURSE_BENCH_SMOKE" in env

        if smoke and not copied:  # a learner who has done every released stage's exercises
            for done in manifest.STAGES[:manifest.STAGES.index(last) + 1]:
                for src in layout.solution_dir(done).glob("*.py"):
                    shutil.copy2(src, out / done.folder / done.module / src.name)
            copied = True
        proc = run(argv, cwd=cwd, env={"COURSE_ROOT": str(out), "PATH": path, **env}, impl="student", timeout=300)
        ran += 1
        both = proc.stdout + proc.stderr
        if smoke and (proc.returncode != 0 or ("smoke run: figures meaningless" not in both
                                               and "profile" not in argv[1:4])):
            wrong.append(f"{st.folder}: `{cmd}` (smoke run: {' '.join(argv[1:])}) exited {proc.returncode} "
                         f"without its smoke line or with an error:\n{both[-1500:]}")
        elif (proc.returncode not in (0, 1) or "Traceback" in both or "error:" in both
                or "not in this repository" in both or "ModuleNotFoundError" in both):
            wrong.append(f"{st.folder}: `{cmd}` (ran {' '.join(argv[1:])}) exited {proc.returncode}:\n{both[-1500:]}")
    assert not wrong, "\n".join(wrong)
    assert ran >= 3, ran
