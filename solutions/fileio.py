"""Writing files so that a learner never loses data (given code, shared by the stages' tools).

Three rules, one function each:

1. **Refuse before writing** (`check_outputs`): an output that would overwrite one of the
   run's inputs, an input that lies inside the output folder, an output that is a
   folder (or a folder that is a file), a folder we cannot write to, and a file the
   course ships (its code, lessons and the committed default model) are all refused with
   a `ValueError` (`UnsafeOutputError`) naming the path, before anything is opened.
2. **Write atomically** (`atomic_write`, `staged_outputs`): write to a temporary file or
   folder next to the target, on the same file system, and `os.replace` it onto the
   target only when it is complete. A run killed halfway leaves the previous outputs
   (or nothing), never a truncated file.
3. **Verify what you load** (`save_checked`, `load_checked`): a checkpoint carries a
   SHA-256 digest of its contents; loading recomputes it (with `weights_only=True`, so
   unpickling can never run code) and a zeroed, truncated or empty file is a clear
   `CheckpointError` naming the file instead of a silent resume from garbage.

Nothing here imports `course`; torch is imported only by the checkpoint functions.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import struct
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent  # solutions/
REPO = PACKAGE.parent
# Folders whose files the course ships: overwriting any file in them loses the course's code.
SHIPPED_FOLDERS = (PACKAGE, REPO / "course")
# Elsewhere in the repository, existing files of these kinds are the learner's code and notes.
SHIPPED_SUFFIXES = (".py", ".ipynb", ".md", ".toml", ".cfg")
PARTIAL = ".partial-"  # prefix of the temporary files and folders this module writes


class UnsafeOutputError(ValueError):
    """An output path that would lose data or cannot be written; raised before writing."""


class CheckpointError(ValueError):
    """A checkpoint file that is empty, truncated, corrupted or not what was expected."""


def _resolve(path: str | Path) -> Path:
    return Path(os.path.abspath(os.path.expanduser(os.fspath(path)))).resolve()


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or path.is_relative_to(folder)


def _same_file(a: Path, b: Path) -> bool:
    if a == b:
        return True
    try:
        return os.path.samefile(a, b)  # hard links, bind mounts
    except OSError:
        return False


def is_shipped(path: str | Path) -> bool:
    """True if `path` lies in the course's packages (`solutions/`, `course/`) or is an existing
    .py/.ipynb/.md/.toml/.cfg file of the repository: code, lessons and notes the course
    ships or the learner wrote. Outputs go elsewhere (the git-ignored `out/`, `data/`)."""
    p = _resolve(path)
    if any(_inside(p, folder) for folder in SHIPPED_FOLDERS):
        return True  # the course's packages: nothing is written there, new or not
    return _inside(p, REPO) and p.suffix in SHIPPED_SUFFIXES and p.is_file()


def check_outputs(*, files: Iterable[str | Path] = (), folder: str | Path | None = None,
                  inputs: Iterable[str | Path] = (), allow: Iterable[str | Path] = (),
                  what: str = "output") -> None:
    """Refuse unsafe outputs before anything is written (raise `UnsafeOutputError`).

    `files`: output files; `folder`: an output folder (its files count as outputs);
    `inputs`: files the run reads. Refused: an output that is an input (also through a
    link), an input inside `folder`, an output that is a folder, a `folder` that is a
    file, a parent we cannot create or write to, two outputs with the same path, and a
    shipped file (`is_shipped`) unless it is in `allow` (an explicit flag's doing).
    """
    files = [Path(f) for f in files]
    inputs = [Path(i) for i in inputs]
    allowed = {_resolve(a) for a in allow}
    seen: dict[Path, str | Path] = {}
    for f in files:
        r = _resolve(f)
        if r in seen:
            raise UnsafeOutputError(f"two outputs are the same file: {seen[r]} and {f}")
        seen[r] = f
    if folder is not None:
        folder = Path(folder)
        rf = _resolve(folder)
        if rf.exists() and not rf.is_dir():
            raise UnsafeOutputError(f"the {what} folder {folder} is a file, not a folder")
        for i in inputs:
            if _inside(_resolve(i), rf):
                raise UnsafeOutputError(f"the input {i} lies inside the {what} folder {folder}: the run would "
                                        "overwrite or remove it; choose an output folder that holds no input")
        _check_writable_parent(rf, folder, what)
    for f in files:
        r = _resolve(f)
        if r.is_dir():
            raise UnsafeOutputError(f"the {what} {f} is a folder; give a file path")
        for i in inputs:
            if _same_file(r, _resolve(i)):
                raise UnsafeOutputError(f"the {what} {f} is the input {i}: writing it would destroy the input")
        if r not in allowed and is_shipped(r):
            home = next((d for d in SHIPPED_FOLDERS if _inside(r, d)), None)
            if home is not None:
                raise UnsafeOutputError(f"the {what} {f} lies in the course's package {home.name}/; refusing to "
                                        "write there (write under out/ or data/ instead)")
            raise UnsafeOutputError(f"the {what} {f} is a file the course ships (or your code or notes); "
                                    "refusing to overwrite it (choose another path)")
        _check_writable_parent(r.parent, Path(f).parent, what)


def _check_writable_parent(target: Path, shown: Path, what: str) -> None:
    """The nearest existing ancestor of `target` must be a folder we can write into."""
    p = target
    while not p.exists():
        p = p.parent
    if not p.is_dir():
        raise UnsafeOutputError(f"cannot create the {what} folder {shown}: {p} is a file, not a folder")
    try:  # os.access says yes to root even on a read-only mount: try it (an empty file, removed)
        fd, probe = tempfile.mkstemp(prefix=f"{PARTIAL}{os.getpid()}-probe.", dir=p)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        if p == target:
            raise UnsafeOutputError(f"the {what} folder {shown} is not writable ({e.strerror})") from None
        raise UnsafeOutputError(f"cannot create the {what} folder {shown}: {p} is not writable "
                                f"({e.strerror})") from None


def _temp_path(target: Path, folder: bool) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    prefix = f"{PARTIAL}{os.getpid()}-{target.name}."
    if folder:
        return Path(tempfile.mkdtemp(prefix=prefix, dir=target.parent))
    fd, name = tempfile.mkstemp(prefix=prefix, dir=target.parent)
    os.close(fd)
    return Path(name)


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "w", **open_kwargs) -> Iterator:
    """Open a temporary file next to `path`; on success rename it onto `path`, else delete it.

    `with atomic_write(p) as f: f.write(...)`: readers see the old file or the whole new
    one, never a half-written one. `mode` is "w" or "wb"; text defaults to UTF-8 and "\\n".
    Temporary files that a killed writer left in the folder are removed first.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"mode must be 'w' or 'wb', got {mode!r}")
    path = Path(path)
    remove_stale_partials(path.parent)  # what a killed writer left here
    if mode == "w":
        open_kwargs.setdefault("encoding", "utf-8")
        open_kwargs.setdefault("newline", "\n")
    tmp = _temp_path(path, folder=False)
    try:
        with open(tmp, mode, **open_kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | Path, text: str) -> Path:
    with atomic_write(path) as f:
        f.write(text)
    return Path(path)


@contextlib.contextmanager
def staged_outputs(out_dir: str | Path, names: Iterable[str]) -> Iterator[Path]:
    """A temporary folder to write the outputs `names` into; moved into `out_dir` on success.

    If `out_dir` does not exist, the whole folder is renamed into place at once. If it
    exists, each output replaces its old version by `os.replace`, the last name last (give
    the report last: it marks a complete set); other files in `out_dir` are left alone.
    On an exception the temporary folder is removed and `out_dir` is as it was.
    A run killed with SIGKILL leaves only a `.partial-*` folder, removed by the next run.
    """
    out_dir = Path(out_dir)
    names = list(names)
    for name in names:
        if (out_dir / name).exists() and not (out_dir / name).is_file():
            raise UnsafeOutputError(f"the output {out_dir / name} is not a file (a folder?); remove it or "
                                    "choose another output folder")
    fresh = not out_dir.exists()
    parent = out_dir.parent if fresh else out_dir
    remove_stale_partials(parent)
    try:
        work = _temp_path(out_dir if fresh else out_dir / "x", folder=True)
    except OSError as e:
        raise UnsafeOutputError(f"cannot write into the output folder {out_dir}: {e.strerror}") from None
    try:
        yield work
        missing = [n for n in names if not (work / n).is_file()]
        if missing:
            raise RuntimeError(f"the run did not write {missing} into {work}")
        if fresh:
            os.chmod(work, 0o755)
            os.replace(work, out_dir)
        else:
            for name in names:
                os.replace(work / name, out_dir / name)
            shutil.rmtree(work)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def remove_stale_partials(folder: str | Path) -> None:
    """Delete `.partial-<pid>-*` files and folders in `folder` whose writer is no longer running."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    for p in folder.glob(f"{PARTIAL}*"):
        try:
            pid = int(p.name[len(PARTIAL):].split("-", 1)[0])
        except ValueError:
            continue
        if pid == os.getpid() or _alive(pid):
            continue
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ---- checkpoints: verified on load ---------------------------------------------------------

CHECKSUM_KEY = "sha256"


def content_digest(obj) -> str:
    """SHA-256 of a checkpoint's contents: dicts (in order), lists, tuples, tensors, scalars.

    Tensors contribute their dtype, shape and bytes, so a single flipped byte in any
    weight or optimizer moment changes the digest.
    """
    import torch

    h = hashlib.sha256()

    def feed(x) -> None:
        if isinstance(x, torch.Tensor):
            t = x.detach().cpu().contiguous()
            h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        elif isinstance(x, dict):
            h.update(b"D%d" % len(x))
            for k, v in x.items():
                feed(k)
                feed(v)
        elif isinstance(x, (list, tuple)):
            h.update(b"L%d" % len(x) if isinstance(x, list) else b"U%d" % len(x))
            for v in x:
                feed(v)
        elif isinstance(x, float):
            h.update(b"F" + struct.pack("<d", x))
        elif x is None or isinstance(x, (bool, int, str, bytes, torch.dtype, torch.Size)):
            h.update(f"{type(x).__name__}:{x!r}".encode())
        else:
            raise TypeError(f"a checkpoint may hold tensors, dicts, lists, tuples and scalars, not "
                            f"{type(x).__name__}")

    feed(obj)
    return h.hexdigest()


def save_checked(path: str | Path, state: dict) -> Path:
    """`torch.save` the dict `state` plus its `content_digest`, atomically; return the path."""
    import torch

    if not isinstance(state, dict) or CHECKSUM_KEY in state:
        raise ValueError(f"state must be a dict without a {CHECKSUM_KEY!r} key")
    path = Path(path)
    payload = {**state, CHECKSUM_KEY: content_digest(state)}
    with atomic_write(path, "wb") as f:
        torch.save(payload, f)
    return path


def load_checked(path: str | Path, *, required: bool = True, keys: Iterable[str] = (),
                 what: str = "checkpoint", map_location: str | None = "cpu") -> dict:
    """Load a file written by `save_checked` (`weights_only=True`) and verify its digest.

    Raises `FileNotFoundError` if there is no file and `CheckpointError` (a ValueError)
    naming the file if it is empty, unreadable, not a dict, misses one of `keys`, or its
    contents do not match the stored digest. `required=False` accepts a file without a
    digest (one written before digests existed) and checks only the rest.
    """
    import pickle
    import zipfile

    import torch

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no {what} at {path}")
    size = path.stat().st_size
    if size == 0:
        raise CheckpointError(f"the {what} {path} is empty (0 bytes): it was never completely written")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except (RuntimeError, EOFError, pickle.UnpicklingError, zipfile.BadZipFile, ValueError, KeyError,
            UnicodeDecodeError, IndexError, AttributeError, TypeError, OSError) as e:
        raise CheckpointError(f"the {what} {path} ({size:,} bytes) is corrupted or truncated and cannot be read "
                              f"({type(e).__name__}); delete it or restore a good copy") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"the {what} {path} holds a {type(state).__name__}, not a checkpoint dict")
    stored = state.pop(CHECKSUM_KEY, None)
    if stored is None and required:
        raise CheckpointError(f"the {what} {path} carries no checksum; it was not written by this course's "
                              "save function, so it cannot be verified")
    missing = [k for k in keys if k not in state]
    if missing:
        raise CheckpointError(f"the {what} {path} is not a {what}: it lacks {missing} (it holds "
                              f"{sorted(map(str, state))})")
    if stored is not None:
        try:
            actual = content_digest(state)
        except TypeError as e:
            raise CheckpointError(f"the {what} {path} holds unexpected contents: {e}") from None
        if actual != stored:
            raise CheckpointError(f"the {what} {path} is corrupted: its contents do not match the checksum "
                                  "stored in it; delete it or restore a good copy")
    return state
