"""Exact deduplication (exercise 2.2): a SHA-256 digest per text, the first copy kept."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator


def text_digest(text: str) -> str:
    """SHA-256 of the text's UTF-8 bytes, as a str of 64 lowercase hex digits.

    Equal texts, equal digests. Raises TypeError if `text` is not a str.
    """
    if not isinstance(text, str):
        raise TypeError(f"text_digest expects a str, got {type(text).__name__}")
    # BEGIN SOLUTION 2.2
    # DECISION: what identifies a document (the digest of its UTF-8 bytes), which copy is kept
    #   (always the first one seen), and a lazy stream (one record at a time, never the whole
    #   input).
    # HINT: text_digest: `hashlib.sha256` of the text encoded as UTF-8, as hex.
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
    # END SOLUTION


class ExactDeduper:
    """Streaming exact deduplication: remember a digest of every text seen, not the text.

    State: `self._first`, {digest: id of the first document with that text}. Memory is
    one digest (64 hex characters) and one id per distinct text, however long the text,
    so it streams a corpus far larger than memory. Exact means exact: feed it normalised
    texts, and `"x = 1 "` is still another text than `"x = 1"`.

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
        """Record `text` under `doc_id`; return None if the text is new, else the id of its
        first copy (always the first one seen, however many copies came since; the copy's
        own id is not remembered). Raises TypeError unless both are str.
        """
        if not isinstance(doc_id, str) or not isinstance(text, str):
            raise TypeError(f"add expects (str id, str text), got ({type(doc_id).__name__}, {type(text).__name__})")
        # BEGIN SOLUTION 2.2
        # HINT: ExactDeduper.add: look the text's digest up in `self._first`; store `doc_id`
        #   only when it is absent, and return what was there before (None or the first id).
        digest = text_digest(text)
        first = self._first.get(digest)
        if first is None:
            self._first[digest] = doc_id
        return first
        # END SOLUTION


def exact_dedup(records: Iterable[dict]) -> Iterator[dict]:
    """Yield, in input order, the records whose `"text"` was not seen before (a generator).

    Each record is a dict with at least "id" and "text"; the records yielded are the input
    dicts themselves, unchanged. The first copy of a text is kept. It is lazy: it reads
    the input one record at a time, so an endless stream works. Exact means byte-for-byte
    after whatever normalisation the caller applied, so dedup of its own output removes
    nothing more.
    """
    deduper = ExactDeduper()
    # BEGIN SOLUTION 2.2
    # HINT: exact_dedup: a `for` loop over `records` that `yield`s each record for which
    #   `deduper.add(rec["id"], rec["text"])` returns None.
    for rec in records:
        if deduper.add(rec["id"], rec["text"]) is None:
            yield rec
    # END SOLUTION
