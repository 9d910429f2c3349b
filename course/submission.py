"""Step 1 of grading, the learner's side: which files of a submission are graded.

The graded files are the `.py` files directly in the stage package (`NN_stage/<module>/`):
the course's own files (its stubs) and any helper module the learner adds there and imports
from an exercise file. Each is taken only as a plain file inside the submission (no link,
at most `MAX_FILE_BYTES`, at most `MAX_HELPERS` added ones), and every one of them passes the
same static checks before anything runs (`course.integrity`). A course file the submission
lacks is graded as the course's stub. Other files (data, notes) are not taken. What no run
may take as code (a subfolder of modules, a `conftest.py`, too many modules) is refused
identically by `course grade`, `pytest` and `course check`, before any test runs
(`refused_additions`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from course import layout, manifest

MAX_FILE_BYTES = 4 << 20
MAX_HELPERS = 32  # helper modules a learner may add to one stage package
NOT_HELPERS = ("conftest.py",)  # pytest would treat them as its own


class SubmissionError(ValueError):
    """A submission that cannot be graded as given (a link, a huge file, not a folder)."""


def _is_link_below(path: Path, base: Path) -> bool:
    return path.is_symlink() or any(p.is_symlink() for p in path.parents if base in (p, *p.parents) and p != base)


def _read_plain(path: Path, rel: str) -> tuple[str | None, str | None]:
    """(text, None) of a plain file of at most MAX_FILE_BYTES, else (None, why not)."""
    if not path.is_file():
        return None, f"{rel} in the submission is not a file"
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as e:
        return None, f"{rel} could not be read: {e.strerror}"
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        return None, f"{rel} is larger than {MAX_FILE_BYTES >> 20} MiB"
    return data.decode("utf-8", errors="replace"), None


def helper_names(st: manifest.Stage, base: Path) -> list[str]:
    """The `.py` files directly in `base`'s stage package that the course's package lacks
    (links included: they are refused with a note, never followed)."""
    folder = layout.stub_dir(st, base)
    if not folder.is_dir() or folder.is_symlink():
        return []
    own = set(layout.file_names(st))
    return sorted(p.name for p in folder.iterdir() if p.suffix == ".py" and p.name not in own)


def refused_additions(st: manifest.Stage, base: Path) -> list[str]:
    """What `base`'s stage package holds that no run may take as the learner's code: a
    subfolder with modules, a `conftest.py`, more than MAX_HELPERS helper modules. `course
    grade` scores the stage 0 with this message, and `pytest` and `course check` stop with
    it before running a test, so a learner meets it before submitting."""
    folder = layout.stub_dir(st, base)
    if not folder.is_dir() or folder.is_symlink():
        return []
    pkg = f"{st.folder}/{st.module}/"
    out = [f"refused before grading: {layout.stub_rel(st, p.name)}/ is a folder inside the stage package; only "
           f"the .py files directly in {pkg} are graded: move its modules up, next to the exercise files"
           for p in sorted(folder.iterdir()) if p.is_dir() and p.name != "__pycache__" and any(p.rglob("*.py"))]
    names = helper_names(st, base)
    out += [f"refused before grading: {layout.stub_rel(st, n)} is pytest's own file name; rename it"
            for n in names if n in NOT_HELPERS]
    if len(names) > MAX_HELPERS:
        out.append(f"refused before grading: {pkg} holds {len(names)} added modules; at most {MAX_HELPERS} "
                   "are graded")
    return out


def read_stubs(submission: Path, st: manifest.Stage) -> tuple[dict[str, str], list[str]]:
    """({file name: the learner's text}, notes) for the graded files of the stage package:
    the course's files and the learner's helper modules, only plain files inside the
    submission. A course file that is missing, a link or unreadable is left out (its stub is
    graded) with a note; so is a helper module that is a link or unreadable."""
    texts: dict[str, str] = {}
    notes: list[str] = []
    helpers = [n for n in helper_names(st, submission) if n not in NOT_HELPERS]
    for name in [*layout.file_names(st), *helpers]:
        path = layout.stub_dir(st, submission) / name
        rel = layout.stub_rel(st, name)
        if _is_link_below(path, submission):
            notes.append(f"{rel} in the submission is a link; only plain files are graded")
            continue
        if not path.exists():
            notes.append(f"{rel} is not in the submission; its stub was graded")
            continue
        text, why = _read_plain(path, rel)
        if why:
            notes.append(why)
        else:
            texts[name] = text
    return texts, notes


def graded_texts(st: manifest.Stage, base: Path) -> tuple[dict[str, str], list[str]]:
    """The learner's files as graded: `read_stubs`, and the course's own stub for each
    course file the submission lacks."""
    texts, notes = read_stubs(base, st)
    for name in layout.file_names(st):
        if name not in texts and (layout.stub_dir(st) / name).is_file():
            texts[name] = (layout.stub_dir(st) / name).read_text(encoding="utf-8")
    return texts, notes


def hints_used(base: Path, st: manifest.Stage) -> dict[str, int]:
    """{exercise id: hints shown} of a stage, from the learner's `.course/progress.json`
    (read as plain JSON, never run; a missing, odd or huge file is no hints). The learner
    writes that file, so it is information for the instructor, never points."""
    path = base / ".course" / "progress.json"
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_FILE_BYTES:
            return {}
        data = json.loads(path.read_text(encoding="utf-8"))
        hints = data.get("_hints", {}) if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}
    ids = [e.id for e in st.exercises]
    return {k: v for k in ids for v in [hints.get(k)] if isinstance(v, int) and not isinstance(v, bool) and v > 0}
