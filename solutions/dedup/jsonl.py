"""Reading JSON Lines (exercise 2.8): every line becomes a record or a reason, never a crash."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from .corpus import FIELDS


def read_jsonl(path: str | Path) -> Iterator[tuple[int, dict | None, str | None]]:
    """Stream a JSON Lines file: yield (line number, record, None) or (line number, None, error).

    Yields one tuple per line of the file, in order, with line numbers from 1 (a final line
    without "\\n" counts; nothing follows the last "\\n"). The record or the reason is
    `_parse_line`'s verdict on that line's bytes alone, so one bad byte costs one line, not
    the file. A bad line is yielded with its reason, never raised, so that the caller can
    count it. Memory: one line at a time.

    Raises:
        FileNotFoundError ("no such input file") if `path` is not a file.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such input file: {path}")
    # BEGIN SOLUTION 2.8
    # DECISION: what pass 1 may keep in memory (no text: line, id, source, size, shingle hashes,
    #   signatures), the order of the stages, and that every line is accounted for (a bad line is
    #   counted, never raised or dropped silently).
    # HINT: read_jsonl: open the file in binary and enumerate its lines from 1, yielding
    #   `(line_no, *_parse_line(raw))`: each line is decoded on its own, so a bad byte
    #   costs one line, not the file.
    with open(path, "rb") as f:
        for line_no, raw in enumerate(f, 1):
            yield (line_no, *_parse_line(raw))
    # END SOLUTION


def _parse_line(raw: bytes) -> tuple[dict | None, str | None]:
    """One line (bytes, its "\\n" or "\\r\\n" included or not): (record, None) or (None, reason).

    A record is a JSON object, from valid UTF-8, with the fields "id", "text" and "source"
    as strings that are valid Unicode (JSON escapes can smuggle in a lone surrogate, which
    is not); other fields are kept. A line that breaks several rules gets the reason of the
    first of them in this list (the tests rely on it): "blank line" (empty or only
    whitespace), "not valid UTF-8 ...", "invalid JSON ...", "not a JSON object ...",
    "missing field(s) <names>" (all of them, in the order id, text, source),
    "field 'id' must be a string ...", "field 'text' holds a lone surrogate ..." (the
    fields in the order id, text, source; for each, not a string before a lone surrogate).
    """
    # BEGIN SOLUTION 2.8
    # HINT: _parse_line: check in the docstring's order and return (None, reason) at the
    #   first failure; a lone surrogate is a str that `.encode("utf-8")` refuses.
    raw = raw.rstrip(b"\r\n")
    if not raw.strip():
        return None, "blank line"
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return None, f"not valid UTF-8 ({e.reason} at byte {e.start})"
    try:
        rec = json.loads(line)
    except json.JSONDecodeError as e:
        return None, f"invalid JSON: {e.msg} (column {e.colno})"
    if not isinstance(rec, dict):
        return None, f"not a JSON object (got {type(rec).__name__})"
    missing = [k for k in FIELDS if k not in rec]
    if missing:
        return None, f"missing field(s) {', '.join(missing)}"
    for k in FIELDS:
        if not isinstance(rec[k], str):
            return None, f"field {k!r} must be a string, got {type(rec[k]).__name__}"
        try:
            rec[k].encode("utf-8")
        except UnicodeEncodeError:
            return None, f"field {k!r} holds a lone surrogate (not valid Unicode)"
    return rec, None
    # END SOLUTION


# What a file that is no JSON Lines text at all starts with (given code: `run_pipeline`
# refuses such an input before it reads a line, naming what the file looks like).
_NOT_TEXT = (
    (b"\x1f\x8b", "a gzip file", "decompress it first (gunzip)"),
    (b"BZh", "a bzip2 file", "decompress it first (bunzip2)"),
    (b"\xfd7zXZ\x00", "an xz file", "decompress it first (unxz)"),
    (b"\x28\xb5\x2f\xfd", "a zstd file", "decompress it first (unzstd)"),
    (b"PK\x03\x04", "a zip archive", "extract the JSON Lines file from it first"),
    (b"\xff\xfe", "UTF-16 text (little-endian byte-order mark)", "convert it to UTF-8 first"),
    (b"\xfe\xff", "UTF-16 text (big-endian byte-order mark)", "convert it to UTF-8 first"),
)


def not_json_lines(path: str | Path) -> str | None:
    """Why the file at `path` cannot be JSON Lines text, from its first bytes, or None.

    "is empty" for a file of 0 bytes; "looks like a gzip file (it starts with the bytes
    1f 8b): decompress it first (gunzip)" and the like for compressed files, archives and
    UTF-16 text. None does not promise that any line is a record: `run_pipeline` also
    refuses a file in which none is.
    """
    with open(path, "rb") as f:
        head = f.read(8)
    if not head:
        return "is empty"
    for magic, what, advice in _NOT_TEXT:
        if head.startswith(magic):
            return f"looks like {what} (it starts with the bytes {magic.hex(' ')}): {advice}"
    return None


def first_line_preview(path: str | Path, width: int = 40) -> str:
    """The start of the file's first line, as Python writes bytes (for error messages)."""
    with open(path, "rb") as f:
        line = f.readline(width + 1).rstrip(b"\r\n")
    return repr(line[:width]) + ("..." if len(line) > width else "")
