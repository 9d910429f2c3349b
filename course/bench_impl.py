"""Which implementation a stage's bench measures: `--impl student|solution`.

Every bench takes `--impl` (default: `COURSE_IMPL`, else `student`, as `course.load`
decides), so in a learner's release, where the stage's reference is withheld,
`python NN_stage/bench.py` measures the learner's own package. A bench parses its
arguments before it loads any stage code, so `--help` works on any package, finished or
not. A row that needs the reference solution of a stage this repository does not hold
(`solutions/<module>/`) is skipped with one line that says so (`skip_without`);
`--impl solution` where the reference is absent is refused with `error: ...` (exit 2),
and an exercise still to do stops the bench with one line naming it (exit 1).

Smoke mode, `COURSE_BENCH_SMOKE=1` (read once, at import: `SMOKE`): every bench runs each
of its rows and parts once, at tiny sizes (`args.quick` set, one repeat, no warm-up, one
thread; each bench asks `SMOKE` for sizes below its `--quick` ones: a few requests of a few
tokens, the smallest model a row allows), prints its table under the line "smoke run:
figures meaningless", and so shows that every row's code path runs (a crash after the
arguments shows as one). `chosen_impl` (which `load_impl` calls, right after the arguments)
applies it. tests/test_release_stages.py runs the released READMEs' bench commands so by
default. Measured in releases with the references copied in (user + sys CPU of the bench
and its children, as `/usr/bin/time -f "%e %U %S"` gives; 2026-12-07, load 0.9-1.2 on two
cores; `python -c "import torch"` alone 2.4 s): 01 5.1 s, 02 --plot 10.7, 03 7.5, 04 9.2,
--quant 10.8, --load 8.5, 05 5.8, 06 (all parts) 5.3, 07 bench.py 19.0 (two server starts),
bench_batch.py 7.0, bench_host.py 6.4, bench_vllm.py 3.3 (no vLLM: one "skipped" line), 08 5.6,
`course profile --quick` 10.9; 04_kv_cache/bench_load.py --transformers (the README's
command) 25.3 s and 27.1 s at load 2.9-4.0 (a tiny GGUF instead of SmolLM2-135M, 51.5 s at
load 0.9 before; six fresh Python processes import torch, two of them transformers' Llama).



    from course.bench_impl import add_impl_argument, load_impl, run_bench
    args = bench_args("...", extra=add_impl_argument)
    b = load_impl(args, "batching")
    ...
    if __name__ == "__main__":
        run_bench(main)
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable
from types import ModuleType

from course import layout, manifest
from course.loader import IMPLS, current_impl, load, set_impl

SMOKE = os.environ.get("COURSE_BENCH_SMOKE", "") not in ("", "0")  # smoke mode (see above), read once


def apply_smoke(args: argparse.Namespace) -> bool:
    """In smoke mode, the `--quick` sizes, one repeat, no warm-up and one thread in `args`
    (and torch's and BLAS's: two threads on a busy machine spin, and cost twice the CPU),
    and the line "smoke run: figures meaningless" printed (once); returns `SMOKE`."""
    if SMOKE and not getattr(args, "_smoke", False):
        args._smoke = True
        for name, value in (("quick", True), ("repeat", 1), ("warmup", 0)):
            if hasattr(args, name):
                setattr(args, name, value)
        if isinstance(getattr(args, "threads", None), int):  # bench_args' --threads N
            from course.benchmark import set_threads

            args.threads = 1
            set_threads(1)
        print("smoke run: figures meaningless (COURSE_BENCH_SMOKE=1: --quick sizes or smaller, one repeat, "
              "every row once)", flush=True)
    return SMOKE


def add_impl_argument(p: argparse.ArgumentParser) -> None:
    """`--impl student|solution`: whose package the bench measures."""
    p.add_argument("--impl", choices=IMPLS, default=None,
                   help="whose stage package to measure: student (yours, NN_stage/<module>/) or solution "
                        "(the reference, where this repository has it); default: $COURSE_IMPL, else student")


def has_reference(module: str) -> bool:
    """Whether this repository holds stage `module`'s reference (`solutions/<module>/`)."""
    return layout.has_solution(manifest.stage(module))


def chosen_impl(args: argparse.Namespace, module: str) -> str:
    """The implementation `args.impl` names (default as `course.load`), made this process's
    and its children's (`COURSE_IMPL`); exits 2 when it is the reference and the reference
    is not here. In smoke mode it first applies `apply_smoke(args)`."""
    apply_smoke(args)
    impl = getattr(args, "impl", None) or current_impl()
    st = manifest.stage(module)
    if impl == "solution" and not has_reference(module):
        print(f"error: --impl solution: the reference solution of stage {st.number} (solutions/{st.module}/) "
              "is not in this repository (a learner's release withholds it): measure your own package "
              "with --impl student", file=sys.stderr)
        raise SystemExit(2)
    set_impl(impl)
    return impl


def load_impl(args: argparse.Namespace, module: str) -> ModuleType:
    """`course.load(module)` of the chosen implementation (see `chosen_impl`)."""
    impl = chosen_impl(args, module)
    st = manifest.stage(module)
    where = f"{st.folder}/{st.module}/" if impl == "student" else f"solutions/{st.module}/"
    print(f"measuring the {'learner' if impl == 'student' else 'reference'}'s stage {st.number} package "
          f"({where}; --impl {impl})", flush=True)
    try:
        return load(module, impl=impl)
    except Exception as e:  # a learner's package that does not import: one line, with its file and line
        print(f"error: {where} does not import: {type(e).__name__}: {e}", file=sys.stderr)
        raise SystemExit(1) from None


def skip_without(module: str, what: str) -> bool:
    """True when the reference of stage `module` is here; else prints that `what` (a row
    or a part of the bench) is skipped because it needs that reference, and returns False."""
    if has_reference(module):
        return True
    st = manifest.stage(module)
    print(f"skipped: {what}: needs the reference solution of stage {st.number} (solutions/{st.module}/), "
          "which this repository does not have (a learner's release withholds it)", flush=True)
    return False


def raise_todo(text: str) -> None:
    """Raise the NotImplementedError a learner's server answered with (its 500 carries
    "NotImplementedError: Exercise N.M: ..."), if `text` holds one: `run_bench` then ends the
    bench with that exercise's line instead of a load of failures or a traceback."""
    todo = re.search(r"NotImplementedError: (Exercise \d+\.\d+: [^\"\n]*)", text)
    if todo:
        raise NotImplementedError(todo[1])


def run_bench(main: Callable[[], object]) -> None:
    """Run a bench's `main()`; an exercise still to do ends it with one line (exit 1)
    instead of a traceback."""
    try:
        main()
    except NotImplementedError as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"error: the bench stopped at an exercise still to do: {msg} (check it with `course check`; "
              "where this repository has the reference, --impl solution measures that)", file=sys.stderr)
        raise SystemExit(1) from None
