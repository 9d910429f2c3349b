"""Stage 02: a data pipeline that cleans a corpus and removes its duplicates.

A language model learns what its training data repeats. If a text appears twenty times it
is learned twenty times over, and if a copy of a test document sits in the training set the
test score measures memory instead of skill. This stage writes the pipeline that stands
between raw text and the training loop of stage 03:

    JSON Lines in ──> normalise ──> quality filters ──> exact dedup (SHA-256)
        ──> shingles ──> MinHash signatures ──> LSH bands ──> verified pairs
        ──> clusters (union-find), one kept per cluster ──> train / val / test by source

The corpus is real text nobody here wrote and every machine has: the CPython standard
library's `.py` files and the documentation topics in `pydoc_data.topics`. Its duplicates
(empty-ish `__init__.py` files, copied test helpers, near-identical codec tables) are the
lesson's examples.

The one idea behind near-duplicate detection: the Jaccard similarity of two shingle sets,
|A ∩ B| / |A ∪ B|, equals the probability that a random permutation of all shingles puts
the same element first in both sets. A MinHash signature records the first element under
`num_perm` random permutations, so comparing signatures position by position estimates
Jaccard without ever intersecting the sets, and LSH bands turn "estimate every pair" into
"look only at pairs that share a bucket".

    python -m solutions.dedup --build-corpus corpus.jsonl
    python -m solutions.dedup corpus.jsonl out/ --threshold 0.85 --num-perm 128

Exercises: 2.1 normalisation and quality filters, 2.2 exact deduplication, 2.3 shingling,
2.4 MinHash, 2.5 LSH banding, 2.6 clustering, 2.7 leak-free splits, 2.8 the pipeline.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import sys
import sysconfig
import tempfile
import time
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np
from tqdm import tqdm

from solutions.fileio import atomic_write, check_outputs, staged_outputs, write_text_atomic

SPLITS = ("train", "val", "test")
FIELDS = ("id", "text", "source")
# what run_pipeline writes into its output folder; the report last (it marks a complete set)
OUTPUT_FILES = (*(f"{name}.jsonl" for name in SPLITS), "removed.jsonl", "report.json")

# ============================================================================ the corpus
# Given code: the corpus is one JSON object per line, {"id", "text", "source"}.


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
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
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


# ============================================================ 2.1 normalisation and filters


def normalize_text(text: str) -> str:
    """The canonical form of a document, so that equal-looking texts become equal strings.

    In order: Unicode NFC (an accented letter written as one code point or as letter +
    combining accent becomes the same code point); line endings `\\r\\n` and `\\r` become
    `\\n`; trailing whitespace is removed from every line; blank lines at the start and
    the end are dropped. Indentation and blank lines inside are kept: in code they matter.
    Idempotent: `normalize_text(normalize_text(t)) == normalize_text(t)`.
    """
    if not isinstance(text, str):
        raise TypeError(f"normalize_text expects a str, got {type(text).__name__}")
    # BEGIN SOLUTION 2.1
    text = unicodedata.normalize("NFC", text)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    return text.strip("\n")
    # END SOLUTION


@dataclass(frozen=True)
class QualityConfig:
    """Bounds a document must meet to be kept (checked in this order, first failure wins).

    - `too_short`: fewer than `min_chars` characters (stubs, empty `__init__.py` files);
    - `too_long`: more than `max_chars` characters (generated tables, data dumps);
    - `not_printable`: the share of printable characters (everything but control
      characters; tab and newline count as printable) is below `min_printable`;
    - `long_line`: a line longer than `max_line_chars` (minified or generated data);
    - `few_letters`: the share of letters is below `min_letters` (number tables, hex dumps).
    """

    min_chars: int = 100
    max_chars: int = 500_000
    min_printable: float = 0.98
    max_line_chars: int = 1_000
    min_letters: float = 0.25

    def __post_init__(self) -> None:
        for name in ("min_chars", "max_chars", "max_line_chars"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"QualityConfig.{name} must be a non-negative int, got {v!r}")
        if self.min_chars > self.max_chars:
            raise ValueError(f"QualityConfig.min_chars ({self.min_chars}) > max_chars ({self.max_chars})")
        for name in ("min_printable", "min_letters"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0.0 <= v <= 1.0:
                raise ValueError(f"QualityConfig.{name} must be a share in [0, 1], got {v!r}")


QUALITY_REASONS = ("too_short", "too_long", "not_printable", "long_line", "few_letters")

# Named sets of bounds. `code` is the course's corpus (Python sources and pydoc topics): a
# line over 1,000 characters there is generated data. Prose is often written one paragraph
# per line, so `text` allows lines as long as a document and wants more letters instead.
QUALITY_PROFILES: dict[str, QualityConfig] = {
    "code": QualityConfig(),
    "text": QualityConfig(min_chars=50, max_line_chars=500_000, min_letters=0.5),
}
PROFILE_HELP = {
    "code": "source code (the course's corpus): 100..500,000 characters, lines of at most 1,000 "
            "characters, >= 98% printable, >= 25% letters",
    "text": "prose (one paragraph per line is fine): 50..500,000 characters, no line limit below the "
            "document's, >= 98% printable, >= 50% letters",
}


def quality_profile(name: str) -> QualityConfig:
    """The named quality bounds: `"code"` (the default) or `"text"` (see QUALITY_PROFILES)."""
    if name not in QUALITY_PROFILES:
        raise ValueError(f"profile must be one of {sorted(QUALITY_PROFILES)}, got {name!r}")
    return QUALITY_PROFILES[name]


def profile_name(config: QualityConfig) -> str:
    """The name of the profile `config` equals, or "custom" (shown in the report)."""
    return next((name for name, prof in QUALITY_PROFILES.items() if prof == config), "custom")


def _codepoints(text: str) -> np.ndarray:
    """The code points of `text` as a uint32 array (one element per character)."""
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


def quality_reason(text: str, config: QualityConfig | None = None) -> str | None:
    """Why `text` (already normalised) fails the quality bounds, or None if it passes.

    Returns the first failing reason of `QUALITY_REASONS`, in that order, so each dropped
    document is counted once, under one name. Character shares are computed on the code
    points as arrays: control characters are code points below 32 (except tab and
    newline) and 127-159; letters are what `str.isalpha` accepts.
    """
    if not isinstance(text, str):
        raise TypeError(f"quality_reason expects a str, got {type(text).__name__}")
    config = QualityConfig() if config is None else config
    if not isinstance(config, QualityConfig):
        raise TypeError(f"config must be a QualityConfig, got {type(config).__name__}")
    # BEGIN SOLUTION 2.1
    n = len(text)
    if n < config.min_chars:
        return "too_short"
    if n > config.max_chars:
        return "too_long"
    if n == 0:  # min_chars == 0 lets an empty text through; it has no shares to test
        return None
    cp = _codepoints(text)
    control = ((cp < 32) & (cp != 9) & (cp != 10)) | ((cp >= 127) & (cp < 160))
    if 1.0 - control.mean() < config.min_printable:
        return "not_printable"
    if max(map(len, text.split("\n"))) > config.max_line_chars:
        return "long_line"
    letters = np.count_nonzero(((cp | 32) >= ord("a")) & ((cp | 32) <= ord("z")))
    values, counts = np.unique(cp[cp >= 128], return_counts=True)  # few distinct non-ASCII
    letters += counts[[chr(v).isalpha() for v in values.tolist()]].sum()
    if letters / n < config.min_letters:
        return "few_letters"
    return None
    # END SOLUTION


# ================================================================= 2.2 exact deduplication


def text_digest(text: str) -> str:
    """SHA-256 of the text's UTF-8 bytes, as 64 hex digits: equal texts, equal digests."""
    if not isinstance(text, str):
        raise TypeError(f"text_digest expects a str, got {type(text).__name__}")
    # BEGIN SOLUTION 2.2
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
    # END SOLUTION


class ExactDeduper:
    """Streaming exact deduplication: remember a digest of every text seen, not the text.

    Memory is one digest (64 hex characters) and the first copy's id per distinct
    document, a few hundred bytes however long the document, so it streams a corpus far
    larger than memory. Feed it normalised texts: two files that
    differ only in line endings or trailing spaces are then the same document.

    >>> d = ExactDeduper()
    >>> d.add("a", "hello"), d.add("b", "world"), d.add("c", "hello")
    (None, None, 'a')
    """

    def __init__(self) -> None:
        self._first: dict[str, str] = {}  # digest -> id of the first document with it

    def __len__(self) -> int:
        """The number of distinct texts seen so far."""
        return len(self._first)

    def add(self, doc_id: str, text: str) -> str | None:
        """None if `text` is new (and remember it as `doc_id`'s); else the first copy's id."""
        if not isinstance(doc_id, str) or not isinstance(text, str):
            raise TypeError(f"add expects (str id, str text), got ({type(doc_id).__name__}, {type(text).__name__})")
        # BEGIN SOLUTION 2.2
        digest = text_digest(text)
        first = self._first.get(digest)
        if first is None:
            self._first[digest] = doc_id
        return first
        # END SOLUTION


def exact_dedup(records: Iterable[dict]) -> Iterator[dict]:
    """Yield the records whose `"text"` has not been seen before, in order (a generator).

    The first copy is kept. Exact means byte-for-byte after whatever normalisation the
    caller applied; dedup of its own output removes nothing more.
    """
    deduper = ExactDeduper()
    # BEGIN SOLUTION 2.2
    for rec in records:
        if deduper.add(rec["id"], rec["text"]) is None:
            yield rec
    # END SOLUTION


# ============================================================================ 2.3 shingles


def char_shingles(text: str, k: int = 5) -> set[str]:
    """The set of character k-grams of `text` (the readable definition).

    `char_shingles("abcd", 3) == {"abc", "bcd"}`. A non-empty text shorter than k is one
    shingle, the text itself (so short documents still compare); an empty text has none.
    """
    _check_positive_int("k", k)
    if not isinstance(text, str):
        raise TypeError(f"char_shingles expects a str, got {type(text).__name__}")
    # BEGIN SOLUTION 2.3
    if len(text) < k:
        return {text} if text else set()
    return {text[i:i + k] for i in range(len(text) - k + 1)}
    # END SOLUTION


def word_shingles(text: str, n: int = 5) -> set[str]:
    """The set of word n-grams of `text`, each written as its words joined by one space.

    Words are what `str.split()` returns (runs of non-whitespace), so the n-grams do not
    depend on indentation or line breaks: `word_shingles("a  b\\nc", 2) == {"a b", "b c"}`.
    A text with fewer than n words is one shingle, all of its words; an empty one has none.
    """
    _check_positive_int("n", n)
    if not isinstance(text, str):
        raise TypeError(f"word_shingles expects a str, got {type(text).__name__}")
    # BEGIN SOLUTION 2.3
    words = text.split()
    if len(words) < n:
        return {" ".join(words)} if words else set()
    return {" ".join(words[i:i + n]) for i in range(len(words) - n + 1)}
    # END SOLUTION


# Given code: a 32-bit hash of a string that can be computed for many substrings at once.
#
# The polynomial hash of code points c_0 .. c_{m-1} is  sum_j c_j * B**(m-1-j) + m  (the
# length m tells "\0a" from "a"), computed in uint64: wrapping arithmetic is arithmetic
# mod 2**64. With prefix sums P[i] = sum_{j<i} c_j * B**-j (B is odd, so it has an
# inverse mod 2**64), the polynomial of the substring [l, r) is  B**(r-1) * (P[r] - P[l]):
# two array operations for every substring at once, no loop. A final avalanche mix
# (MurmurHash3's fmix64) spreads the bits, and the top 32 bits are the shingle's hash.
_B = np.uint64(0x9E3779B97F4A7C15 | 1)
_B_INV = np.uint64(pow(int(_B), -1, 2**64))
_powers_cache: dict[str, np.ndarray] = {"pow": np.ones(1, np.uint64), "inv": np.ones(1, np.uint64)}


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(B**i, B**-i) mod 2**64 for i < n, cached and grown by doubling."""
    have = len(_powers_cache["pow"])
    if have < n:
        m = max(n, 2 * have)
        with np.errstate(over="ignore"):
            for key, base in (("pow", _B), ("inv", _B_INV)):
                powers = np.full(m, base, dtype=np.uint64)
                powers[0] = 1
                _powers_cache[key] = np.cumprod(powers, dtype=np.uint64)
    return _powers_cache["pow"][:n], _powers_cache["inv"][:n]


def _mix64(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser, in place: every output bit depends on every input bit."""
    for multiplier in (0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53):
        h ^= h >> np.uint64(33)
        h *= np.uint64(multiplier)
    h ^= h >> np.uint64(33)
    return h


def span_hashes(codes: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The 32-bit hash of every substring codes[starts[i]:ends[i]], as uint32, shape (m,).

    `codes` are a text's code points (see `_codepoints`); spans must be non-empty. The
    hash depends only on the substring's content, never on where it sits.
    """
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    if starts.shape != ends.shape or starts.ndim != 1:
        raise ValueError(f"starts and ends must be 1-D of one shape, got {starts.shape} and {ends.shape}")
    if starts.size == 0:
        return np.empty(0, np.uint32)
    lengths = ends - starts
    if lengths.min() < 1 or starts.min() < 0 or ends.max() > len(codes):
        raise ValueError(f"spans must be non-empty and inside the {len(codes)} code points")
    pw, inv = _powers(len(codes) + 1)
    prefix = np.zeros(len(codes) + 1, np.uint64)
    np.cumsum(np.multiply(codes, inv[:len(codes)], dtype=np.uint64), out=prefix[1:])
    h = np.take(prefix, ends)
    h -= np.take(prefix, starts)
    h *= np.take(pw, ends - 1)
    h += lengths.view(np.uint64)
    return (_mix64(h) >> np.uint64(32)).astype(np.uint32)


def hash_strings(strings: Sequence[str], block: int = 4096) -> np.ndarray:
    """The 32-bit hash (the same one as `span_hashes`) of each string, uint32, shape (m,).

    Strings are joined into one and hashed as spans of it, so there is no Python loop per
    string: `hash_strings(["ab", "c"])` hashes the spans [0, 2) and [2, 3) of "abc". They
    are joined `block` at a time, so that the arrays stay small enough for the CPU cache.
    """
    strings = list(strings)
    out = np.empty(len(strings), dtype=np.uint32)
    for lo in range(0, len(strings), block):
        part = strings[lo:lo + block]
        try:
            joined = "".join(part)
        except TypeError:
            bad = next(s for s in part if not isinstance(s, str))
            raise TypeError(f"hash_strings expects strings, got a {type(bad).__name__}: {bad!r}") from None
        lengths = np.fromiter(map(len, part), dtype=np.int64, count=len(part))
        if np.any(lengths == 0):
            raise ValueError("hash_strings cannot hash the empty string (a shingle has at least one character)")
        ends = np.cumsum(lengths)
        out[lo:lo + len(part)] = span_hashes(_codepoints(joined), ends - lengths, ends)
    return out


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """The distinct values, sorted: `np.unique` as sort + "differs from its left neighbour".

    (Faster than `np.unique` on integer arrays here, which hashes before it sorts.)
    """
    values = np.sort(values)
    if values.size < 2:
        return values
    return values[np.concatenate(([True], values[1:] != values[:-1]))]


SHINGLE_KINDS = ("word", "char")

# _IS_SPACE[c]: is code point c whitespace for str.split()? A table over all of Unicode
# (1.1 MB), so that one gather classifies every character of a text.
_IS_SPACE = np.zeros(0x110000, dtype=bool)
_IS_SPACE[[c for c in range(0x3001) if chr(c).isspace()]] = True  # none lies above U+3000


def words_joined(codes: np.ndarray) -> np.ndarray:
    """The code points of `" ".join(text.split())`, computed from the text's code points.

    Whitespace runs between words become one space; whitespace before the first or after
    the last word disappears. Array operations only, no Python string per word.
    """
    space = np.take(_IS_SPACE, codes)
    keep = ~space
    if not keep.any():
        return codes[:0]
    keep[:-1] |= space[:-1] & keep[1:]  # the last space of each run before a word ...
    keep[: np.argmin(space)] = False  # ... except the run before the first word
    joined = codes[keep]
    joined[space[keep]] = ord(" ")
    return joined


def shingle_hashes(text: str, kind: str = "word", n: int = 5) -> np.ndarray:
    """The sorted, distinct 32-bit hashes of the text's shingles, without building them.

    Exactly `np.unique(hash_strings(list(word_shingles(text, n))))` (or `char_shingles`
    for kind="char"), but computed as spans of one string: character k-grams are the
    spans [i, i+k) of the text's code points; word n-grams are spans of the code points
    of `" ".join(text.split())` (`words_joined`), from the start of word i to the end of
    word i+n-1. Returns uint32, shape (n_shingles,).
    """
    if kind not in SHINGLE_KINDS:
        raise ValueError(f"kind must be one of {SHINGLE_KINDS}, got {kind!r}")
    _check_positive_int("n", n)
    if not isinstance(text, str):
        raise TypeError(f"shingle_hashes expects a str, got {type(text).__name__}")
    # BEGIN SOLUTION 2.3
    codes = _codepoints(text)
    if kind == "word":
        codes = words_joined(codes)
    length = len(codes)
    if length == 0:
        return np.empty(0, np.uint32)
    if kind == "char":
        starts = np.arange(max(length - n + 1, 1))
        ends = np.minimum(starts + n, length)
    else:
        spaces = np.flatnonzero(codes == ord(" "))
        word_starts = np.concatenate(([0], spaces + 1))
        word_ends = np.concatenate((spaces, [length]))
        if len(word_starts) < n:  # fewer than n words: one shingle, all of them
            starts, ends = np.array([0]), np.array([length])
        else:  # n-gram i runs from the start of word i to the end of word i + n - 1
            starts, ends = word_starts[: len(word_starts) - n + 1], word_ends[n - 1:]
    return sorted_unique(span_hashes(codes, starts, ends))
    # END SOLUTION


def _check_positive_int(name: str, value: object) -> None:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


# ============================================================================= 2.4 MinHash

EMPTY = np.uint32(0xFFFFFFFF)  # the signature value of a document with no shingles


class MinHasher:
    """MinHash signatures for many documents at once, vectorised with NumPy.

    Permutation i is the universal hash  h_i(x) = (a_i * x + b_i) mod 2**32  with a_i odd,
    applied to a shingle's 32-bit hash x (already well mixed, see `span_hashes`). With a_i
    odd, h_i is a bijection of the 32-bit values: a random reordering of all shingles. The
    signature of a document is, for every i, the smallest h_i over its shingles; two
    documents agree at position i with probability equal to their Jaccard similarity.

    `signatures(docs)` accepts a list of texts (shingled with this hasher's `shingle`
    kind and `n`), a list of shingle sets (sets, frozensets, lists or tuples of strings),
    or a list of integer arrays of shingle hashes (as `shingle_hashes` returns), and
    returns a uint32 array of shape (n_docs, num_perm).
    """

    def __init__(self, num_perm: int = 128, seed: int = 1, *, shingle: str = "word", n: int = 5) -> None:
        _check_positive_int("num_perm", num_perm)
        if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {seed!r}")
        if shingle not in SHINGLE_KINDS:
            raise ValueError(f"shingle must be one of {SHINGLE_KINDS}, got {shingle!r}")
        _check_positive_int("n", n)
        self.num_perm, self.seed, self.shingle, self.n = int(num_perm), int(seed), shingle, int(n)
        rng = np.random.default_rng(seed)
        self.a = (rng.integers(0, 2**31, num_perm, dtype=np.uint32) * np.uint32(2)) + np.uint32(1)
        self.b = rng.integers(0, 2**32, num_perm, dtype=np.uint32)

    def __repr__(self) -> str:
        return f"MinHasher(num_perm={self.num_perm}, seed={self.seed}, shingle={self.shingle!r}, n={self.n})"

    def shingle_keys(self, docs: Sequence) -> list[np.ndarray]:
        """Each document's distinct shingle hashes (uint32, sorted): the sets MinHash sees."""
        if isinstance(docs, (str, bytes, dict)) or not isinstance(docs, Sequence):
            raise TypeError(f"docs must be a list of documents, got {type(docs).__name__}")
        keys = []
        for i, doc in enumerate(docs):
            if isinstance(doc, str):
                keys.append(shingle_hashes(doc, self.shingle, self.n))
            elif isinstance(doc, np.ndarray):
                if doc.ndim != 1 or (doc.size and (doc.dtype.kind not in "iu" or doc.min() < 0
                                                   or doc.max() > 0xFFFFFFFF)):
                    raise ValueError(f"docs[{i}]: an array of shingle hashes must be 1-D uint32 values, "
                                     f"got dtype {doc.dtype} shape {doc.shape}")
                doc = doc.astype(np.uint32)
                keys.append(doc if np.all(doc[1:] > doc[:-1]) else sorted_unique(doc))
            elif isinstance(doc, (set, frozenset, list, tuple)):
                keys.append(sorted_unique(hash_strings(list(doc))))
            else:
                raise TypeError(f"docs[{i}] must be a text, a set of shingle strings or an array of "
                                f"shingle hashes, got {type(doc).__name__}")
        return keys

    def signatures(self, docs: Sequence, rows_per_block: int = 512) -> np.ndarray:
        """MinHash signatures of all `docs`, uint32, shape (len(docs), num_perm).

        Hash every shingle once (`shingle_keys`), then apply all permutations as array
        operations over all documents' shingles together, a block of keys at a time:
        `a[:, None] * keys + b` is one NumPy expression for every (permutation, key) pair
        of the block, shape (num_perm, block). The minimum per document is a minimum over
        rows: each document's keys are padded to a multiple of 32 by repeating its first
        key (a repeated key cannot change a minimum) and cut into rows of 32 keys that
        all belong to one document, so one `min` over the row axis and one `reduceat`
        over each document's run of rows finish the job. Permutations lie along the
        first axis and keys along the last, so every NumPy loop runs over long,
        contiguous memory. A document without shingles gets `EMPTY` everywhere.
        """
        keys = self.shingle_keys(docs)
        _check_positive_int("rows_per_block", rows_per_block)
        # BEGIN SOLUTION 2.4
        width = 32
        n_docs = len(keys)
        sig = np.full((n_docs, self.num_perm), EMPTY, dtype=np.uint32)
        lengths = np.array([len(k) for k in keys], dtype=np.int64)
        if lengths.sum() == 0:
            return sig
        # Rows of `width` keys, each row from one document; a document's last row is padded
        # with its first key. (One copy per document, not per key.)
        padded = -(-lengths // width) * width
        rows = np.empty((padded.sum() // width, width), dtype=np.uint32)
        flat_rows, pos = rows.reshape(-1), 0
        for k, size in zip(keys, padded.tolist()):
            flat_rows[pos:pos + len(k)] = k
            flat_rows[pos + len(k):pos + size] = k[:1]
            pos += size
        row_doc = np.repeat(np.arange(n_docs), padded // width)
        a, b = self.a[:, None, None], self.b[:, None, None]
        buffer = np.empty((self.num_perm, width, rows_per_block), dtype=np.uint32)
        for lo in range(0, len(rows), rows_per_block):
            block = np.ascontiguousarray(rows[lo:lo + rows_per_block].T)  # (width, rows)
            h = buffer[:, :, :block.shape[1]]
            np.multiply(a, block, out=h)  # (num_perm, width, rows): h_i of every key, mod 2**32
            np.add(h, b, out=h)
            row_min = h.min(axis=1)  # (num_perm, rows): the minimum of each row
            doc = row_doc[lo:lo + rows_per_block]
            first = np.flatnonzero(np.concatenate(([True], doc[1:] != doc[:-1])))
            ids = doc[first]  # the documents in this block, each a run of rows
            sig[ids] = np.minimum(sig[ids], np.minimum.reduceat(row_min, first, axis=1).T)
        return sig
        # END SOLUTION


def estimate_jaccard(sig_a: np.ndarray, sig_b: np.ndarray) -> float | np.ndarray:
    """The share of positions where two signatures agree: an unbiased Jaccard estimate.

    Its standard deviation is sqrt(J (1 - J) / num_perm). Broadcasts over leading axes:
    signatures of shape (m, num_perm) give m estimates; two 1-D signatures give a float.
    """
    sig_a, sig_b = np.asarray(sig_a), np.asarray(sig_b)
    if sig_a.ndim == 0 or sig_b.ndim == 0 or sig_a.shape[-1] != sig_b.shape[-1]:
        raise ValueError(f"signatures must have the same last dimension (num_perm), got shapes "
                         f"{sig_a.shape} and {sig_b.shape}")
    # BEGIN SOLUTION 2.4
    agree = np.mean(sig_a == sig_b, axis=-1)
    return float(agree) if agree.ndim == 0 else agree
    # END SOLUTION


def jaccard(a: Iterable, b: Iterable) -> float:
    """Exact Jaccard similarity |A ∩ B| / |A ∪ B| of two sets (or sorted unique arrays).

    Two empty sets are identical: 1.0.
    """
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        inter = len(np.intersect1d(a, b, assume_unique=True))
        union = len(a) + len(b) - inter
    else:
        a, b = set(a), set(b)
        inter, union = len(a & b), len(a | b)
    return 1.0 if union == 0 else inter / union


# ============================================================================ 2.5 LSH bands


def s_curve(s: float | np.ndarray, bands: int | np.ndarray, rows: int | np.ndarray) -> float | np.ndarray:
    """Probability that two documents of Jaccard s share at least one band bucket.

    One band of `rows` signature positions matches with probability s**rows; it fails
    with 1 - s**rows; all `bands` bands fail with (1 - s**rows)**bands. So
    P(candidate) = 1 - (1 - s**r)**b: an S-shaped curve that rises steeply near
    (1/b)**(1/r). Broadcasts over arrays.
    """
    s_arr = np.asarray(s, dtype=np.float64)
    if np.any((s_arr < 0) | (s_arr > 1)) or np.any(np.isnan(s_arr)):
        raise ValueError(f"similarities must lie in [0, 1], got {s!r}")
    if np.any(np.asarray(bands) < 1) or np.any(np.asarray(rows) < 1):
        raise ValueError(f"bands and rows must be >= 1, got bands={bands!r}, rows={rows!r}")
    # BEGIN SOLUTION 2.5
    p = 1.0 - (1.0 - s_arr ** np.asarray(rows, np.float64)) ** np.asarray(bands, np.float64)
    return float(p) if p.ndim == 0 else p
    # END SOLUTION


def lsh_error_areas(threshold: float, bands, rows) -> tuple[np.ndarray, np.ndarray]:
    """(false-positive area, false-negative area) under the S-curve for each (bands, rows).

    FP = ∫_0^t P(s) ds: pairs below the threshold that still become candidates (cost:
    verification work). FN = ∫_t^1 (1 - P(s)) ds: pairs above it that are missed (cost:
    duplicates left in). P is a polynomial of degree b·r in s, so Gauss-Legendre
    quadrature with ceil((b·r + 1) / 2) nodes integrates it exactly.
    """
    _check_threshold(threshold)
    bands, rows = np.broadcast_arrays(np.asarray(bands, np.int64), np.asarray(rows, np.int64))
    if np.any(bands < 1) or np.any(rows < 1):
        raise ValueError(f"bands and rows must be >= 1, got {bands!r}, {rows!r}")
    # BEGIN SOLUTION 2.5
    degree = int((bands * rows).max()) if bands.size else 1
    nodes, weights = np.polynomial.legendre.leggauss(degree // 2 + 1)  # exact up to degree 2m-1

    def integral(lo: float, hi: float, integrand) -> np.ndarray:
        s = (hi - lo) / 2 * nodes + (hi + lo) / 2  # nodes mapped from [-1, 1] to [lo, hi]
        return (hi - lo) / 2 * (integrand(s[:, None]) * weights[:, None]).sum(axis=0)

    flat_b, flat_r = bands.ravel(), rows.ravel()
    fp = integral(0.0, threshold, lambda s: s_curve(s, flat_b, flat_r))
    fn = integral(threshold, 1.0, lambda s: 1.0 - s_curve(s, flat_b, flat_r))
    return fp.reshape(bands.shape), fn.reshape(bands.shape)
    # END SOLUTION


def lsh_params(threshold: float, num_perm: int, weights: tuple[float, float] = (0.5, 0.5)) -> tuple[int, int]:
    """The (bands, rows) with bands * rows <= num_perm that minimise the weighted error.

    Error = w_fp * FP area + w_fn * FN area (see `lsh_error_areas`); among equal errors the
    smallest bands, then the smallest rows, wins (the order `datasketch` searches in).
    """
    _check_threshold(threshold)
    _check_positive_int("num_perm", num_perm)
    _check_weights(weights)
    # BEGIN SOLUTION 2.5
    b, r = np.array([(b, r) for b in range(1, num_perm + 1) for r in range(1, num_perm // b + 1)]).T
    fp, fn = lsh_error_areas(threshold, b, r)
    best = int(np.argmin(weights[0] * fp + weights[1] * fn))  # first minimum wins ties
    return int(b[best]), int(r[best])
    # END SOLUTION


def candidate_pairs(signatures: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """All pairs (i, j), i < j, that agree on every row of at least one band.

    Band k is the columns [k*rows, (k+1)*rows) of the signatures. Documents with identical
    band rows fall into the same bucket (here: the same row of `np.unique`), and every
    two documents in a bucket become a candidate. Returns int64, shape (m, 2), sorted,
    each pair once however many bands it shares.
    """
    signatures = np.asarray(signatures)
    if signatures.ndim != 2:
        raise ValueError(f"signatures must have shape (n_docs, num_perm), got {signatures.shape}")
    _check_positive_int("bands", bands)
    _check_positive_int("rows", rows)
    if bands * rows > signatures.shape[1]:
        raise ValueError(f"bands * rows = {bands * rows} exceeds num_perm = {signatures.shape[1]}")
    # BEGIN SOLUTION 2.5
    n = len(signatures)
    found = [np.empty(0, np.int64)]
    for k in range(bands):
        band = np.ascontiguousarray(signatures[:, k * rows:(k + 1) * rows])
        _, bucket = np.unique(band.view(np.dtype((np.void, band.dtype.itemsize * rows))).ravel(),
                              return_inverse=True)
        i, j = _pairs_within_groups(bucket.ravel())
        found.append(i * n + j)
    codes = np.unique(np.concatenate(found))
    return np.stack([codes // max(n, 1), codes % max(n, 1)], axis=1).astype(np.int64)
    # END SOLUTION


def _pairs_within_groups(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every pair (i, j), i < j, of positions with equal labels, without a loop per group.

    Sort the positions by label; the element at place t of a group of size m pairs with
    the m - 1 - t elements after it in the group.
    """
    order = np.argsort(labels, kind="stable")
    sorted_labels = labels[order]
    group_start = np.flatnonzero(np.r_[True, sorted_labels[1:] != sorted_labels[:-1]])
    size = np.diff(np.r_[group_start, len(labels)])
    place = np.arange(len(labels)) - np.repeat(group_start, size)  # t: place in its group
    partners = np.repeat(size, size) - 1 - place
    left = np.repeat(np.arange(len(labels)), partners)
    step = np.arange(len(left)) - np.repeat(np.cumsum(partners) - partners, partners) + 1
    i, j = order[left], order[left + step]
    return np.minimum(i, j).astype(np.int64), np.maximum(i, j).astype(np.int64)


def verify_pairs(pairs: np.ndarray, threshold: float, *, signatures: np.ndarray | None = None,
                 shingle_keys: Sequence[np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Keep the candidate pairs whose similarity is >= threshold: (pairs, similarities).

    With `shingle_keys` (each document's sorted distinct shingle hashes) the similarity is
    the exact Jaccard of the two sets; otherwise the signature estimate. Candidates are
    only candidates: a pair can share a band by chance, and the S-curve lets some through
    well below the threshold.
    """
    _check_threshold(threshold)
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    if shingle_keys is None and signatures is None:
        raise ValueError("verify_pairs needs signatures (estimated Jaccard) or shingle_keys (exact Jaccard)")
    n = len(shingle_keys) if shingle_keys is not None else len(signatures)
    if pairs.size and (pairs.min() < 0 or pairs.max() >= n):
        raise ValueError(f"pairs refer to documents outside 0..{n - 1}")
    # BEGIN SOLUTION 2.5
    if shingle_keys is not None:
        sims = np.array([jaccard(shingle_keys[i], shingle_keys[j]) for i, j in pairs], dtype=np.float64)
    else:
        sims = np.asarray(estimate_jaccard(signatures[pairs[:, 0]], signatures[pairs[:, 1]]), dtype=np.float64)
    keep = sims >= threshold
    return pairs[keep], sims[keep]
    # END SOLUTION


def _check_weights(weights: object) -> None:
    if (not isinstance(weights, (tuple, list)) or len(weights) != 2
            or any(not isinstance(w, (int, float)) or isinstance(w, bool) or w < 0 for w in weights)
            or sum(weights) <= 0):
        raise ValueError(f"weights must be two non-negative numbers (fp, fn), not both zero, got {weights!r}")


def _check_threshold(threshold: object) -> None:
    if not isinstance(threshold, (int, float, np.floating)) or isinstance(threshold, bool) \
            or not 0.0 < float(threshold) < 1.0:
        raise ValueError(f"threshold must be a number strictly between 0 and 1, got {threshold!r}")


# ======================================================================= 2.6 clustering


class UnionFind:
    """Disjoint sets over 0..n-1: `union(i, j)` merges, `find(i)` names i's set.

    Union by size keeps trees shallow; path halving (every node visited on a find points
    to its grandparent) flattens them further, so a long sequence of operations costs
    nearly constant time each.
    """

    def __init__(self, n: int) -> None:
        if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 0:
            raise ValueError(f"n must be a non-negative int, got {n!r}")
        self.parent = list(range(n))
        self.size = [1] * n

    def __len__(self) -> int:
        return len(self.parent)

    def _check(self, i: int) -> int:
        if not isinstance(i, (int, np.integer)) or isinstance(i, bool) or not 0 <= i < len(self.parent):
            raise IndexError(f"element {i!r} is outside 0..{len(self.parent) - 1}")
        return int(i)

    def find(self, i: int) -> int:
        """The representative (root) of i's set."""
        i = self._check(i)
        # BEGIN SOLUTION 2.6
        parent = self.parent
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i
        # END SOLUTION

    def union(self, i: int, j: int) -> bool:
        """Merge the sets of i and j; False if they were already one set."""
        # BEGIN SOLUTION 2.6
        ri, rj = self.find(i), self.find(j)
        if ri == rj:
            return False
        if self.size[ri] < self.size[rj]:
            ri, rj = rj, ri
        self.parent[rj] = ri
        self.size[ri] += self.size[rj]
        return True
        # END SOLUTION

    def labels(self) -> np.ndarray:
        """For every element, the smallest element of its set (int64, shape (n,)).

        Smallest-member labels do not depend on the order of the unions: the same sets
        always get the same labels.
        """
        # BEGIN SOLUTION 2.6
        roots = np.array([self.find(i) for i in range(len(self.parent))], dtype=np.int64)
        smallest = np.full(len(roots), len(roots), dtype=np.int64)
        np.minimum.at(smallest, roots, np.arange(len(roots)))
        return smallest[roots]
        # END SOLUTION


def cluster(n: int, pairs: np.ndarray) -> np.ndarray:
    """Cluster labels of n documents linked by `pairs`: label = smallest index in cluster.

    Near-duplicate is not transitive (A~B and B~C does not mean A~C), but a chain of
    edits is one family of copies, so clusters are the connected components of the
    verified pairs. The representative kept from each cluster is the document with the
    smallest index, i.e. the one that came first in the input: the same rule as exact
    deduplication, deterministic, and stable when the pipeline runs on its own output.
    Keep mask: `labels == np.arange(n)`.
    """
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    if pairs.size and (pairs.min() < 0 or pairs.max() >= n):
        raise ValueError(f"pairs refer to documents outside 0..{n - 1}")
    # BEGIN SOLUTION 2.6
    uf = UnionFind(n)
    for i, j in pairs.tolist():
        uf.union(i, j)
    return uf.labels()
    # END SOLUTION


# ==================================================================== 2.7 leak-free splits


def source_group(source: str, depth: int = 2) -> str:
    """The group a source belongs to: its first `depth` path components (0: the source).

    Sources are '/'-separated paths. With depth 2, `test/test_asyncio/test_tasks.py` is in
    group `test/test_asyncio` (the tests of one package travel together) while
    `test/test_os.py` and `asyncio/tasks.py` are their own groups.
    """
    if not isinstance(source, str):
        raise TypeError(f"source must be a str, got {type(source).__name__}")
    _check_depth(depth)
    return source if depth == 0 else "/".join(source.split("/")[:depth])


def assign_splits(sources: Sequence[str], labels: np.ndarray | None = None,
                  fractions: Sequence[float] = (0.8, 0.1, 0.1), group_depth: int = 2,
                  salt: str = "") -> np.ndarray:
    """The split (0 = train, 1 = val, 2 = test) of every document, with no leakage.

    A random split by document leaks: two files of one package, or two near-copies, end
    up on both sides and the test score rewards memorising. So documents are joined into
    units: same source group (`source_group(source, group_depth)`) or same near-duplicate
    cluster (`labels`, as `cluster` returns) means same unit, transitively. Each unit goes
    to one split, chosen by a hash of the unit's name (its smallest group name, salted):
    the SHA-256 as a number in [0, 1) falls into one of the `fractions` intervals. A unit
    keeps its split when the rest of the corpus changes. Returns int8, shape (n,).
    """
    if isinstance(sources, str):
        raise TypeError("sources must be a sequence of source strings, not one string")
    n = len(sources)
    if labels is None:
        labels = np.arange(n)
    labels = np.asarray(labels)
    if labels.shape != (n,):
        raise ValueError(f"labels must have shape ({n},), got {labels.shape}")
    fractions = _check_fractions(fractions)
    _check_depth(group_depth)
    # BEGIN SOLUTION 2.7
    groups = [source_group(s, group_depth) for s in sources]
    uf = UnionFind(n)
    first_of_group: dict[str, int] = {}
    for i, g in enumerate(groups):
        uf.union(i, first_of_group.setdefault(g, i))
    for i, lab in enumerate(labels.tolist()):
        uf.union(i, lab)
    unit = uf.labels()
    names: dict[int, str] = {}
    for i, u in enumerate(unit.tolist()):
        names[u] = min(names.get(u, groups[i]), groups[i])
    edges = np.cumsum(fractions)[:-1]
    split_of_unit = {u: int(np.searchsorted(edges, _unit_interval(salt + name), side="right"))
                     for u, name in names.items()}
    return np.array([split_of_unit[u] for u in unit.tolist()], dtype=np.int8)
    # END SOLUTION


def _check_fractions(fractions: Sequence[float]) -> np.ndarray:
    try:
        arr = np.asarray(fractions, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"fractions must be three numbers, got {fractions!r}") from None
    if arr.shape != (3,) or np.any(arr < 0) or not np.isclose(arr.sum(), 1.0):
        raise ValueError(f"fractions must be three non-negative shares summing to 1, got {fractions!r}")
    return arr


def _check_depth(depth: object) -> None:
    if not isinstance(depth, int) or isinstance(depth, bool) or depth < 0:
        raise ValueError(f"group depth must be a non-negative int, got {depth!r}")


def _unit_interval(name: str) -> float:
    """A number in [0, 1) fixed by `name`: the first 8 bytes of its SHA-256 / 2**64."""
    return int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "big") / 2**64


# ========================================================================= 2.8 the pipeline


@dataclass(frozen=True)
class PipelineConfig:
    """Every knob of `run_pipeline` (the CLI flags map onto these)."""

    threshold: float = 0.85
    num_perm: int = 128
    seed: int = 1
    shingle: str = "word"
    n: int = 5
    verify: str = "exact"  # "exact": Jaccard of the shingle sets; "estimate": from signatures
    # LSH weights of the (false-positive, false-negative) areas. Every candidate is verified,
    # so a false positive costs one Jaccard computation while a false negative leaves a
    # duplicate in the data: weigh misses 9 times more (0.85, 128 -> 11 bands x 11 rows).
    lsh_weights: tuple[float, float] = (0.1, 0.9)
    fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)
    group_depth: int = 2
    batch_size: int = 512  # documents per MinHash batch while streaming
    quality: QualityConfig = field(default_factory=QualityConfig)

    def __post_init__(self) -> None:
        _check_threshold(self.threshold)
        if self.verify not in ("exact", "estimate"):
            raise ValueError(f"verify must be 'exact' or 'estimate', got {self.verify!r}")
        _check_positive_int("batch_size", self.batch_size)
        MinHasher(self.num_perm, self.seed, shingle=self.shingle, n=self.n)  # validates those
        _check_fractions(self.fractions)
        _check_weights(self.lsh_weights)
        _check_depth(self.group_depth)
        if not isinstance(self.quality, QualityConfig):
            raise TypeError(f"quality must be a QualityConfig, got {type(self.quality).__name__}")

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["fractions"] = list(self.fractions)
        d["lsh_weights"] = list(self.lsh_weights)
        return d


def read_jsonl(path: str | Path) -> Iterator[tuple[int, dict | None, str | None]]:
    """Stream a JSON Lines file: yield (line number, record, None) or (line number, None, error).

    A line is a record only if it is valid UTF-8, parses as a JSON object, and has the
    fields "id", "text" and "source" as strings that are valid Unicode (no lone
    surrogates, which JSON escapes can smuggle in). Anything else is yielded with the
    reason, never raised, so that the caller counts it: blank lines, broken JSON, a list
    instead of an object, a missing field, a number where a string belongs. Line numbers
    start at 1; `\\r\\n` line endings are accepted.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such input file: {path}")
    # BEGIN SOLUTION 2.8
    with open(path, "rb") as f:
        for line_no, raw in enumerate(f, 1):
            yield (line_no, *_parse_line(raw))
    # END SOLUTION


def _parse_line(raw: bytes) -> tuple[dict | None, str | None]:
    # BEGIN SOLUTION 2.8
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


def run_pipeline(in_path: str | Path, out_dir: str | Path, config: PipelineConfig | None = None,
                 progress: bool = True) -> dict:
    """Clean and deduplicate a JSON Lines corpus; write the splits and a report.

    Outputs (`OUTPUT_FILES`) in `out_dir`: `train.jsonl`, `val.jsonl`, `test.jsonl` (the
    input records that were kept, `"text"` normalised, other fields unchanged);
    `removed.jsonl` (one line per
    removed record: its line, id, source, reason and, for duplicates, `duplicate_of`, the
    id of the kept copy); `report.json` (the counts, see `format_report`). Returns the
    report.

    Two streaming passes over the input. Pass 1 reads line by line (a tqdm bar over the
    bytes): parse (malformed lines are counted with their line numbers), normalise,
    filter, exact-dedup, shingle and MinHash in batches; only the signatures and the
    shingle hashes stay in memory, never the texts. Then LSH candidates, verification,
    clusters, one representative per cluster, splits. Pass 2 reads the input again and
    writes every kept record to its split.

    Accounting, always: input lines = malformed + filtered + exact duplicates + near
    duplicates + kept. Running the pipeline on its own output removes nothing more.

    Your part (2.8) writes train/val/test/removed.jsonl into `work_dir` and builds the
    dict `report`; the given code around it adds the timing and the quality profile,
    checks the accounting and writes report.json. Nothing is lost: an input inside
    `out_dir`, an `out_dir` that is a file or not writable, an output path that is a
    folder are refused (`UnsafeOutputError`, a ValueError) before anything is written;
    `work_dir` is a fresh temporary folder next to the outputs, moved into `out_dir` only
    when the run finishes (report.json last), so a run that fails or is killed leaves
    the previous outputs.
    """
    config = PipelineConfig() if config is None else config
    if not isinstance(config, PipelineConfig):
        raise TypeError(f"config must be a PipelineConfig, got {type(config).__name__}")
    in_path, out_dir = Path(in_path), Path(out_dir)
    if in_path.is_dir():
        raise ValueError(f"in_path {in_path} is a folder; give a JSON Lines file")
    if not in_path.is_file():
        raise FileNotFoundError(f"no such input file: {in_path}")
    check_outputs(folder=out_dir, files=[out_dir / name for name in OUTPUT_FILES], inputs=[in_path])
    started = time.perf_counter()
    with staged_outputs(out_dir, OUTPUT_FILES) as work_dir:
        # BEGIN SOLUTION 2.8
        hasher = MinHasher(config.num_perm, config.seed, shingle=config.shingle, n=config.n)
        deduper = ExactDeduper()
        report: dict = {
            "input": str(in_path), "input_lines": 0, "malformed": 0, "malformed_lines": [],
            "filtered": {reason: 0 for reason in QUALITY_REASONS},
            "exact_duplicates": 0, "near_duplicates": 0,
        }
        # per document that reaches near-dedup: line, id, source, size; and its shingles
        lines, ids, sources, sizes = [], [], [], []
        keys: list[np.ndarray] = []
        sig_blocks, pending = [], []
        removed = open(work_dir / "removed.jsonl", "w", encoding="utf-8", newline="\n")

        def remove(line_no: int, rec: dict, reason: str, duplicate_of: str | None = None) -> None:
            row = {"line": line_no, "id": rec["id"], "source": rec["source"], "reason": reason}
            if duplicate_of is not None:
                row["duplicate_of"] = duplicate_of
            removed.write(json.dumps(row, ensure_ascii=False) + "\n")

        with removed, tqdm(total=in_path.stat().st_size, unit="B", unit_scale=True,
                           desc="dedup pass 1", disable=not progress) as bar:
            with open(in_path, "rb") as f:
                for line_no, raw in enumerate(f, 1):
                    bar.update(len(raw))
                    report["input_lines"] += 1
                    rec, error = _parse_line(raw)
                    if error is not None:
                        report["malformed"] += 1
                        report["malformed_lines"].append({"line": line_no, "error": error})
                        continue
                    text = normalize_text(rec["text"])
                    reason = quality_reason(text, config.quality)
                    if reason is not None:
                        report["filtered"][reason] += 1
                        remove(line_no, rec, reason)
                        continue
                    first = deduper.add(rec["id"], text)
                    if first is not None:
                        report["exact_duplicates"] += 1
                        remove(line_no, rec, "exact_duplicate", first)
                        continue
                    lines.append(line_no)
                    ids.append(rec["id"])
                    sources.append(rec["source"])
                    sizes.append(len(text))
                    keys.append(shingle_hashes(text, config.shingle, config.n))
                    pending.append(keys[-1])
                    if len(pending) >= config.batch_size:
                        sig_blocks.append(hasher.signatures(pending))
                        pending = []
            if pending or not sig_blocks:
                sig_blocks.append(hasher.signatures(pending))
            signatures = np.concatenate(sig_blocks)

            bands, rows = lsh_params(config.threshold, config.num_perm, config.lsh_weights)
            candidates = candidate_pairs(signatures, bands, rows)
            pairs, _ = verify_pairs(candidates, config.threshold, signatures=signatures,
                                    shingle_keys=keys if config.verify == "exact" else None)
            labels = cluster(len(ids), pairs)
            keep = labels == np.arange(len(ids))
            for i in np.flatnonzero(~keep).tolist():
                report["near_duplicates"] += 1
                remove(lines[i], {"id": ids[i], "source": sources[i]}, "near_duplicate", ids[labels[i]])

        split = assign_splits(sources, labels, config.fractions, config.group_depth, salt=str(config.seed))
        split_of_line = {lines[i]: int(split[i]) for i in np.flatnonzero(keep).tolist()}
        outs = [open(work_dir / f"{name}.jsonl", "w", encoding="utf-8", newline="\n") for name in SPLITS]
        try:
            for line_no, rec, _ in tqdm(read_jsonl(in_path), desc="dedup pass 2", unit=" lines",
                                        total=report["input_lines"], disable=not progress):
                s = split_of_line.get(line_no)
                if s is not None:
                    rec["text"] = normalize_text(rec["text"])
                    outs[s].write(json.dumps(rec, ensure_ascii=False) + "\n")
        finally:
            for f in outs:
                f.close()

        kept_idx = np.flatnonzero(keep)
        sizes_arr = np.array(sizes, dtype=np.int64)
        members: dict[int, list[str]] = {}
        for i in np.flatnonzero(np.bincount(labels, minlength=len(ids))[labels] > 1).tolist():
            members.setdefault(int(labels[i]), []).append(ids[i])
        report.update({
            "kept": {name: int(np.count_nonzero(split[kept_idx] == s)) for s, name in enumerate(SPLITS)},
            "kept_chars": {name: int(sizes_arr[kept_idx][split[kept_idx] == s].sum()) for s, name in enumerate(SPLITS)},
            "near_duplicate_clusters": len(members),
            "clusters": list(members.values()),
            "candidate_pairs": int(len(candidates)),
            "verified_pairs": int(len(pairs)),
            "params": {**config.to_dict(), "bands": bands, "rows": rows},
            "outputs": {name: f"{name}.jsonl" for name in (*SPLITS, "removed")},
        })
        # END SOLUTION
        report["quality_profile"] = profile_name(config.quality)
        report["seconds"] = round(time.perf_counter() - started, 3)
        report["docs_per_second"] = round(report["input_lines"] / max(report["seconds"], 1e-9), 1)
        if accounted(report) != report["input_lines"]:
            raise AssertionError(f"lost documents: input {report['input_lines']} != accounted {accounted(report)}")
        (work_dir / "report.json").write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n",
                                              encoding="utf-8")
    return report


def accounted(report: dict) -> int:
    """malformed + filtered + exact duplicates + near duplicates + kept: must equal the input."""
    return (report["malformed"] + sum(report["filtered"].values()) + report["exact_duplicates"]
            + report["near_duplicates"] + sum(report["kept"].values()))


def format_report(report: dict) -> str:
    """The report as a printed table, one row per way a document can leave or stay."""
    rows = [("input lines", report["input_lines"]), ("malformed", report["malformed"])]
    rows += [(f"filtered: {reason}", count) for reason, count in report["filtered"].items()]
    rows += [("exact duplicates", report["exact_duplicates"]),
             (f"near duplicates ({report.get('near_duplicate_clusters', 0)} clusters)", report["near_duplicates"])]
    rows += [(f"kept: {name}", count) for name, count in report["kept"].items()]
    width = max(len(r[0]) for r in rows) + 2
    total = accounted(report)
    mark = "ok" if total == report["input_lines"] else "MISMATCH"
    out = [f"{'':<{width}}{'documents':>10}", "-" * (width + 10)]
    out += [f"{name:<{width}}{count:>10}" for name, count in rows]
    out += ["-" * (width + 10), f"{'accounted for':<{width}}{total:>10}  {mark}"]
    if "quality_profile" in report:
        out.append(f"quality filters: {report['quality_profile']} profile")
    if report.get("malformed_lines"):
        shown = ", ".join(f"{m['line']} ({m['error']})" for m in report["malformed_lines"][:5])
        more = len(report["malformed_lines"]) - 5
        out.append(f"malformed lines: {shown}" + (f", and {more} more" if more > 0 else ""))
    return "\n".join(out)


def build_train_split(out_dir: str | Path, *, limit: int | None = None,
                      config: PipelineConfig | None = None, progress: bool = False) -> Path:
    """The train split of the standard-library corpus, built once and cached (for stage 03).

    Builds the corpus in a temporary file next to `out_dir` (deleted afterwards: an input
    may not lie inside the output folder) and runs the pipeline into `out_dir`, unless a
    previous run with the same Python, limit and configuration left its report there;
    returns the path of `train.jsonl` (records {"id", "text", "source"}).
    """
    config = PipelineConfig() if config is None else config
    out_dir = Path(out_dir)
    cache_key = {"python": sys.version, "stdlib": str(stdlib_dir()), "limit": limit, "config": config.to_dict()}
    train = out_dir / "train.jsonl"
    report_path = out_dir / "report.json"
    if train.is_file() and report_path.is_file():
        try:
            if json.loads(report_path.read_text(encoding="utf-8")).get("cache_key") == cache_key:
                return train
        except (json.JSONDecodeError, OSError):
            pass
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".partial-{os.getpid()}-corpus.", suffix=".jsonl", dir=out_dir.parent)
    os.close(fd)
    corpus = Path(name)
    try:
        build_corpus(corpus, limit=limit)
        report = run_pipeline(corpus, out_dir, config, progress=progress)
    finally:
        corpus.unlink(missing_ok=True)
    report["cache_key"] = cache_key
    write_text_atomic(report_path, json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    return train


# ============================================================================ command line


class _Parser(argparse.ArgumentParser):
    """argparse, but every refusal reads `error: <what is wrong>` (exit 2) with the usage first."""

    def error(self, message: str):
        self.print_usage(sys.stderr)
        self.exit(2, f"error: {message}\n")


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m solutions.dedup IN.jsonl OUT_DIR [options]` or `--build-corpus FILE`.

    Exit status: 0 done; 2 bad arguments or unsafe paths (`error: ...` on stderr, nothing
    written); 1 the run failed while writing (the previous outputs are left as they were).
    """
    d = PipelineConfig()
    profiles = "; ".join(f"{name}: {text}" for name, text in PROFILE_HELP.items())
    p = _Parser(
        prog="python -m solutions.dedup",
        description="Normalise, filter, deduplicate (exact and MinHash/LSH) and split a JSON Lines corpus "
                    "of {id, text, source} records. Outputs are written to a temporary folder and moved "
                    "into OUT_DIR only when complete; an input inside OUT_DIR is refused.")
    p.add_argument("input", nargs="?", help="input JSON Lines file")
    p.add_argument("out_dir", nargs="?", help="output folder (train/val/test.jsonl, removed.jsonl, report.json); "
                                              "must not hold the input")
    p.add_argument("--build-corpus", metavar="FILE", help="write the standard-library corpus to FILE and exit")
    p.add_argument("--limit", type=int, default=None, help="with --build-corpus: at most this many documents")
    p.add_argument("--packages", nargs="+", default=None, help="with --build-corpus: only these top-level packages")
    p.add_argument("--threshold", type=float, default=d.threshold, help="near-duplicate Jaccard threshold")
    p.add_argument("--num-perm", type=int, default=d.num_perm, help="MinHash permutations")
    p.add_argument("--seed", type=int, default=d.seed, help="MinHash and split seed")
    p.add_argument("--shingle", choices=SHINGLE_KINDS, default=d.shingle, help="word n-grams or character k-grams")
    p.add_argument("--ngram", type=int, default=d.n, help="n (words) or k (characters) per shingle")
    p.add_argument("--verify", choices=("exact", "estimate"), default=d.verify, help="how candidate pairs are verified")
    p.add_argument("--fn-weight", type=float, default=d.lsh_weights[1],
                   help="LSH: weight of missed pairs (false negatives); false positives get 1 - this")
    p.add_argument("--fractions", type=float, nargs=3, default=d.fractions, metavar=("TRAIN", "VAL", "TEST"))
    p.add_argument("--group-depth", type=int, default=d.group_depth, help="path components naming a source group")
    p.add_argument("--profile", choices=sorted(QUALITY_PROFILES), default="code",
                   help=("quality filters (default: code). " + profiles).replace("%", "%%"))
    g = p.add_argument_group("quality bounds", "override one bound of the --profile (the report then says "
                                               "'custom')")
    g.add_argument("--min-chars", type=int, default=None)
    g.add_argument("--max-chars", type=int, default=None)
    g.add_argument("--max-line-chars", type=int, default=None)
    g.add_argument("--min-printable", type=float, default=None)
    g.add_argument("--min-letters", type=float, default=None)
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    args = p.parse_args(argv)
    if args.build_corpus and (args.input or args.out_dir):
        p.error("give either --build-corpus FILE or IN.jsonl OUT_DIR, not both")
    if not args.build_corpus and (args.limit is not None or args.packages is not None):
        p.error("--limit and --packages go with --build-corpus FILE")
    if not args.build_corpus and (not args.input or not args.out_dir):
        p.error("give IN.jsonl and OUT_DIR (or --build-corpus FILE)")
    if not 0.0 <= args.fn_weight <= 1.0:
        p.error(f"--fn-weight must be in [0, 1], got {args.fn_weight}")
    try:
        if args.build_corpus:
            stats = build_corpus(args.build_corpus, limit=args.limit, packages=args.packages)
            print(f"wrote {stats['documents']} documents to {stats['path']} "
                  f"({stats['skipped_not_utf8']} files skipped: not UTF-8)")
            return 0
        bounds = {k: getattr(args, k) for k in ("min_chars", "max_chars", "max_line_chars", "min_printable",
                                                 "min_letters") if getattr(args, k) is not None}
        config = PipelineConfig(
            threshold=args.threshold, num_perm=args.num_perm, seed=args.seed, shingle=args.shingle,
            n=args.ngram, verify=args.verify, lsh_weights=(1.0 - args.fn_weight, args.fn_weight),
            fractions=tuple(args.fractions), group_depth=args.group_depth,
            quality=dataclasses.replace(quality_profile(args.profile), **bounds))
        report = run_pipeline(args.input, args.out_dir, config, progress=not args.no_progress)
    except (ValueError, TypeError, FileNotFoundError) as e:
        return _fail(e, 2)
    except OSError as e:
        return _fail(e, 1)
    print(format_report(report))
    print(f"\n{report['seconds']:.1f} s, {report['docs_per_second']:.0f} documents/s; "
          f"wrote {args.out_dir}/{{train,val,test,removed}}.jsonl and report.json")
    return 0


def _fail(e: BaseException, code: int) -> int:
    message = str(e) if not isinstance(e, OSError) or not e.strerror else f"{e.strerror}: {e.filename}"
    print(f"error: {message}", file=sys.stderr)
    return code


def demo() -> None:
    """Build a bounded slice of the standard-library corpus, clean it, print the report."""
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.jsonl"
        stats = build_corpus(corpus, packages=["encodings", "email", "json", "test", "pydoc_data"], limit=1200)
        print(f"corpus: {stats['documents']} documents from the standard library at {stdlib_dir()} "
              f"({stats['skipped_not_utf8']} files skipped: not UTF-8)")
        report = run_pipeline(corpus, Path(tmp) / "out", progress=False)
        print(format_report(report))
        print(f"\n{report['seconds']:.1f} s; {report['candidate_pairs']} LSH candidate pairs, "
              f"{report['verified_pairs']} verified (bands x rows = {report['params']['bands']} x "
              f"{report['params']['rows']})")
        for members in report["clusters"][:5]:
            print("  cluster:", ", ".join(members[:4]) + (" ..." if len(members) > 4 else ""))


if __name__ == "__main__":
    sys.exit(main())
