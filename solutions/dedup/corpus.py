"""The corpus (given code): the standard library's `.py` files and `pydoc_data` topics as
JSON Lines, one `{"id", "text", "source"}` object per document."""

from __future__ import annotations

import json
import os
import sysconfig
from collections.abc import Iterable, Iterator
from pathlib import Path

from solutions.checks import is_int
from solutions.fileio import atomic_write, check_outputs

FIELDS = ("id", "text", "source")


def stdlib_dir() -> Path:
    """The folder of this interpreter's standard library (never site-packages)."""
    return Path(sysconfig.get_paths()["stdlib"]).resolve()


def top_level(source: str) -> str:
    """The top-level package or module a source belongs to.

    >>> top_level("email/mime/text.py"), top_level("os.py"), top_level("pydoc_data.topics:if")
    ('email', 'os', 'pydoc_data')
    """
    return source.split("/", 1)[0].split(":", 1)[0].split(".", 1)[0]


_NOT_STDLIB = {"site-packages", "dist-packages", "__pycache__"}


def _corpus_entries(packages: Iterable[str] | None) -> list[tuple[str, str, object]]:
    """(source, kind, where) for every document of the corpus, sorted by source."""
    wanted = None if packages is None else set(packages)
    root = stdlib_dir()
    entries: list[tuple[str, str, object]] = []
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = [d for d in subfolders if d not in _NOT_STDLIB]  # prune, never descend
        for name in files:
            if name.endswith(".py"):
                path = Path(folder, name)
                entries.append((path.relative_to(root).as_posix(), "file", path))
    from pydoc_data.topics import topics

    entries += [(f"pydoc_data.topics:{name}", "topic", name) for name in topics]
    if wanted is not None:
        entries = [e for e in entries if top_level(e[0]) in wanted]
    return sorted(entries, key=lambda e: e[0])


def iter_corpus(limit: int | None = None, packages: Iterable[str] | None = None,
                stats: dict | None = None) -> Iterator[dict]:
    """Yield the standard-library corpus, one record per document, in a fixed order.

    Records are `{"id", "text", "source"}`: a file `email/utils.py` becomes
    `{"id": "py:email/utils.py", "source": "email/utils.py", ...}` and the documentation
    topic `if` becomes `{"id": "topic:if", "source": "pydoc_data.topics:if", ...}`.
    Documents come sorted by source, so every run (and every machine with the same Python)
    sees the same order. `packages` keeps only these top-level names (see `top_level`);
    `limit` stops after that many documents. Files that are not valid UTF-8 are skipped
    and, if `stats` is a dict, counted in `stats["skipped_not_utf8"]` (their sources in
    `stats["skipped"]`); the text is kept exactly as read, not normalised.
    """
    if limit is not None and (not is_int(limit) or limit < 0):
        raise ValueError(f"limit must be a non-negative int or None, got {limit!r}")
    if isinstance(packages, str):
        raise TypeError(f"packages must be an iterable of names, not the string {packages!r}")
    stats = {} if stats is None else stats
    stats.setdefault("skipped_not_utf8", 0)
    stats.setdefault("skipped", [])
    stats.setdefault("documents", 0)
    from pydoc_data.topics import topics

    for source, kind, where in _corpus_entries(packages):
        if limit is not None and stats["documents"] >= limit:
            return
        if kind == "topic":
            doc_id, text = f"topic:{where}", topics[where]
        else:
            try:
                text = Path(where).read_bytes().decode("utf-8")
            except UnicodeDecodeError:
                stats["skipped_not_utf8"] += 1
                stats["skipped"].append(source)
                continue
            doc_id = f"py:{source}"
        stats["documents"] += 1
        yield {"id": doc_id, "text": text, "source": source}


def build_corpus(path: str | Path, limit: int | None = None,
                 packages: Iterable[str] | None = None) -> dict:
    """Write the corpus to `path` as JSON Lines; return the counts (see `iter_corpus`).

    Written to a temporary file first and renamed, so a half-written corpus never stays;
    a `path` that is a folder or a file the course ships is refused before writing.
    """
    path = Path(path)
    check_outputs(files=[path], what="corpus file")
    stats: dict = {}
    with atomic_write(path) as f:
        for rec in iter_corpus(limit, packages, stats):
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    stats["path"] = str(path)
    return stats
