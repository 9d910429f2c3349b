# GENERATED from solutions/dedup/jsonl.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 02_data_dedup/02_data_dedup.ipynb. Exercises in this file (line of each hole, then the commands):
#   2.8 The streaming pipeline and report: lines 26, 39; `course check 2.8`, `course hint 2.8`
"""Reading JSON Lines (exercise 2.8): every line becomes a record or a reason, never a crash."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

from .corpus import FIELDS


def read_jsonl(path: str | Path) -> Iterator[tuple[int, dict | None, str | None]]:
    """Stream a JSON Lines file: yield (line number, record, None) or (line number, None, error).

    Line numbers start at 1, one per line of the file (a final line without "\\n" counts;
    nothing follows the last "\\n"). Each line is judged by `_parse_line`; bad lines are
    yielded with the reason, never raised, so that the caller counts them. Raises
    FileNotFoundError ("no such input file") if `path` is not a file.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such input file: {path}")
    raise NotImplementedError('Exercise 2.8: The streaming pipeline and report — see 02_data_dedup.ipynb')


def _parse_line(raw: bytes) -> tuple[dict | None, str | None]:
    """One line (bytes, its "\\n" or "\\r\\n" included or not): (record, None) or (None, reason).

    A record is a JSON object, from valid UTF-8, with the fields "id", "text" and "source"
    as strings that are valid Unicode (JSON escapes can smuggle in a lone surrogate, which
    is not); other fields are kept. The reason, for the first failing check in this order,
    names what is wrong: "blank line" (empty or only whitespace), "not valid UTF-8 ...",
    "invalid JSON ...", "not a JSON object ...", "missing field(s) <names>",
    "field 'id' must be a string ...", "field 'text' holds a lone surrogate ...".
    """
    raise NotImplementedError('Exercise 2.8: The streaming pipeline and report — see 02_data_dedup.ipynb')
