"""`course profile`: profile the stack on the default model and write a Markdown report.

    course profile [--stages timers,ops,memory,sweep,roofline,latency] [--out DIR]
                   [--quick] [--device cpu|cuda] [--dtype float32|float16|bfloat16] [--threads N]

The measurements and the report are stage 08's (`profiling.collect`, `profiling.write_report`),
reached through `course.load` like every other stage's code: the reference solution where
this copy of the course has it, else the learner's module (`course --impl ...` chooses). The report folder is written whole or not at all: everything
goes into a temporary folder beside DIR, which is renamed into place at the end. DIR must
not be a file, nor lie inside one of the folders the course ships (`course/`, `solutions/`,
the stage folders, `tests/`, `.git/`), and an existing DIR is replaced only if it holds an
earlier report (its `report.md`) and nothing else of the learner's.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from course import layout, manifest
from course.loader import load, root

REPORT_FILES = {"report.md", "report.json", "sweep.png", "roofline.png", "latency.png", "trace.json"}


class UsageError(ValueError):
    """A bad argument: reported as `error: ...`, exit status 2."""


def shipped_folders() -> list[Path]:
    base = root()
    return [base / name for name in ("course", "solutions", "tests", ".git", ".github", ".ci")] + \
           [base / st.folder for st in manifest.STAGES]


def parse_sections(arg: str | None, known: tuple[str, ...]) -> list[str]:
    """`--stages` as a list of report sections, in report order; names or stage-08
    exercise ids (8.1 timers … 8.6 latency) are accepted."""
    if arg is None:
        return list(known)
    by_id = {f"8.{i + 1}": name for i, name in enumerate(known)}
    picked = []
    for item in (s.strip() for s in arg.replace(" ", ",").split(",")):
        if not item:
            continue
        name = by_id.get(item, item)
        if name not in known:
            raise UsageError(f"--stages: unknown section {item!r}; choose from {', '.join(known)} "
                             f"(or {', '.join(by_id)})")
        picked.append(name)
    if not picked:
        raise UsageError("--stages: no section named")
    return [s for s in known if s in picked]


def check_out(out: str | Path) -> Path:
    """The resolved report folder, or UsageError when it may not be written."""
    path = Path(out).expanduser().resolve()
    if path.exists() and not path.is_dir():
        raise UsageError(f"--out {out}: is a file, not a folder")
    for shipped in shipped_folders():
        if path == shipped or shipped in path.parents:
            raise UsageError(f"--out {out}: is inside {shipped.relative_to(root())}/, which the course ships; "
                             "write the report elsewhere")
    if path == root() or path in root().parents:
        raise UsageError(f"--out {out}: is the repository itself or holds it")
    if path.is_dir() and any(path.iterdir()):
        names = {p.name for p in path.iterdir()}
        if "report.md" not in names or not names <= REPORT_FILES:
            raise UsageError(f"--out {out}: is a folder holding other files; refusing to replace it "
                             "(name a new folder, or one with an earlier report)")
    if not path.parent.is_dir():
        raise UsageError(f"--out {out}: its parent folder {path.parent} does not exist")
    return path


def _replace_dir(tmp: Path, dest: Path) -> None:
    """Move the finished folder `tmp` to `dest`; an earlier report at dest is removed only
    once the new one is in place."""
    old = None
    if dest.exists():
        old = dest.with_name(f".{dest.name}.old-{int(time.time() * 1e6)}")
        dest.rename(old)
    try:
        tmp.rename(dest)
    except OSError:
        if old is not None:
            old.rename(dest)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def run(args) -> int:
    """The `course profile` command (args from `course.cli`)."""
    impl = getattr(args, "impl", None)
    if impl is None:  # the reference where this copy of the course has it (a learner's release may not)
        impl = "solution" if layout.has_solution(manifest.stage("profiling")) else "student"
    try:
        prof = load("profiling", impl=impl)
        sections = parse_sections(args.stages, tuple(prof.SECTIONS))
        out = check_out(args.out)
        if args.threads is not None and args.threads < 1:
            raise UsageError(f"--threads must be >= 1, got {args.threads}")
        from solutions.device import DeviceError, resolve_device, resolve_dtype

        try:  # the course's one parser of --device / --dtype (solutions/device.py)
            device = resolve_device(getattr(args, "device", "cpu"))
            dtype = resolve_dtype(getattr(args, "dtype", "float32"), device)
        except DeviceError as e:
            raise UsageError(str(e)) from None
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    import torch

    before = torch.get_num_threads()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    umask = os.umask(0)
    os.umask(umask)
    tmp.chmod(0o777 & ~umask)  # mkdtemp makes it private; the report is an ordinary folder
    t0 = time.perf_counter()
    try:
        data = prof.collect(sections=sections, device=device, dtype=dtype, quick=args.quick,
                            trace_path=tmp / "trace.json" if "ops" in sections else None,
                            progress=lambda m: print(f"  {m}", file=sys.stderr, flush=True))
        prof.write_report(data, tmp)
        _replace_dir(tmp, out)
    except NotImplementedError as e:  # --impl student with exercises still to do
        shutil.rmtree(tmp, ignore_errors=True)
        print(f"error: {e} (course profile runs your code with --impl student; "
              "the reference is the default)", file=sys.stderr)
        return 1
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        torch.set_num_threads(before)
    print(f"wrote {out / 'report.md'} ({', '.join(sorted(p.name for p in out.iterdir()))}) "
          f"in {time.perf_counter() - t0:.0f} s")
    rec = (data.get("latency") or {}).get("recommendation")
    if rec:
        print(f"next change ({rec['key']}): {rec['advice']}")
    if "trace.json" in {p.name for p in out.iterdir()}:
        print(f"open {out / 'trace.json'} in https://ui.perfetto.dev to see the decode steps")
    return 0

