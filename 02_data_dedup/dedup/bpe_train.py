# GENERATED from solutions/dedup/bpe_train.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 02_data_dedup/02_data_dedup.ipynb. Exercises in this file (line of each hole, then the commands):
#   2.13 Training BPE: counts, ties, merges: line 36; `course check 2.13`, `course hint 2.13`
"""Training byte-level BPE (exercise 2.13): the merges a corpus asks for, most frequent first,
with the rules of Stanford CS336's assignment 1 (2025), so one corpus gives one vocabulary."""

from __future__ import annotations

import heapq
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import NamedTuple

from solutions.checks import check_int

from .byte_unicode import byte_chars, bytes_to_token
from .pretokenize import SCHEMES, pretokenize


def learn_merges(pieces: dict[bytes, int], num_merges: int) -> list[tuple[bytes, bytes]]:
    """Up to `num_merges` merges learned from pre-token counts `pieces` ({piece bytes: count}).

    Before the first merge every piece is a sequence of single-byte symbols; merges never
    cross from one piece to another. The count of a pair (x, y) is the sum, over all
    pieces, of the piece's count times how often x, y stand next to each other in it now
    (overlapping pairs each count: b"aaa" seen once holds (b"a", b"a") twice). Merge k is
    the pair of HIGHEST count after merges 0..k-1; a tie goes to the lexicographically
    GREATEST pair, comparing (left bytes, right bytes) as a tuple of bytes (`max` of the
    tied pairs). Merging (x, y) makes each occurrence of x, y in every piece, left to right
    without overlap, one symbol (b"aaa" -> b"aa", b"a"). There are `num_merges` merges, or
    fewer when no piece has two symbols left. Returns the merges in order as (left bytes,
    right bytes); `pieces` is not changed.
    """
    raise NotImplementedError('Exercise 2.13: Training BPE: counts, ties, merges — see 02_data_dedup.ipynb')


@lru_cache(maxsize=1 << 16)
def _desc(b: bytes) -> tuple[int, ...]:
    """A key whose order is the reverse of the bytes' (given): `heapq` pops the smallest and
    the tie rule wants the greatest pair. (-byte values, then 1: a prefix sorts after.)"""
    return (*(-x for x in b), 1)


# ---------------------------------------------------------------- given code
class BPETrainResult(NamedTuple):
    """`tokens` (vocabulary strings, id = index) and `merges` (pairs of them, in rank
    order): what `ByteLevelBPE(result.tokens, result.merges, special_tokens)` takes."""
    tokens: list[str]
    merges: list[tuple[str, str]]


def count_pieces(corpus: Iterable[str], special_tokens: Sequence[str] = (),
                 pretokenizer: str = "gpt2") -> dict[bytes, int]:
    """{UTF-8 bytes of a pre-token: how often it occurs in `corpus`} (given code).

    Each document is cut at its special tokens first (they are removed: no merge may learn
    from or across them), each stretch between them by `pretokenize(., pretokenizer)`.
    Sorted by piece, so the result does not depend on the documents' order.
    """
    if isinstance(corpus, str):
        raise TypeError("corpus must be an iterable of str documents, not one str")
    split = (re.compile("|".join(re.escape(s) for s in sorted(special_tokens, key=len, reverse=True)))
             if special_tokens else None)
    counter: Counter[str] = Counter()
    for doc in corpus:
        if not isinstance(doc, str):
            raise TypeError(f"corpus documents must be str, got {type(doc).__name__}")
        for stretch in (split.split(doc) if split else (doc,)):
            counter.update(pretokenize(stretch, pretokenizer))
    return {piece.encode("utf-8"): counter[piece] for piece in sorted(counter)}


def train_bpe(corpus: Iterable[str], vocab_size: int, special_tokens: Sequence[str] = (), *,
              pretokenizer: str = "gpt2") -> BPETrainResult:
    """A byte-level BPE vocabulary of at most `vocab_size` tokens learned from `corpus` (given).

    `tokens`: the special tokens first (ids 0.., in the given order), then the 256 single
    bytes in byte order (id len(special_tokens) + b spells byte b), then one token per
    merge, in merge order, spelled through `bytes_to_unicode`. Merges are
    `learn_merges(count_pieces(corpus, special_tokens, pretokenizer), ...)`, as strings; a
    merge whose bytes are already a token (two pairs can spell one string) is kept in
    `merges` and adds no token. Fewer tokens when the corpus runs out of pairs.
    ValueError if vocab_size < 256 + len(special_tokens), or for a special token that is
    empty, repeated or one of the 256 byte strings.
    """
    if isinstance(special_tokens, str):
        raise TypeError(f"special_tokens must be a sequence of str, not the string {special_tokens!r}")
    special = list(special_tokens)
    chars = byte_chars()
    for s in special:
        if not isinstance(s, str) or not s:
            raise ValueError(f"special tokens must be non-empty str, got {s!r}")
        if s in chars:
            raise ValueError(f"special token {s!r} is the token of a single byte")
    if len(set(special)) != len(special):
        raise ValueError(f"special_tokens holds a token twice: {special!r}")
    if pretokenizer not in SCHEMES:
        raise ValueError(f"pretokenizer must be one of {SCHEMES}, got {pretokenizer!r}")
    check_int("vocab_size", vocab_size, 256 + len(special))
    base = special + list(chars)
    pieces = count_pieces(corpus, special, pretokenizer)
    n = vocab_size - len(base)
    while True:
        learned = learn_merges(pieces, n)
        tokens, known, merges = list(base), set(base), []
        for a, b in learned:
            if len(tokens) == vocab_size:
                break
            merges.append((bytes_to_token(a), bytes_to_token(b)))
            t = bytes_to_token(a + b)
            if t not in known:
                known.add(t)
                tokens.append(t)
        if len(tokens) == vocab_size or len(learned) < n:
            return BPETrainResult(tokens, merges)
        n += vocab_size - len(tokens)  # some merges spelled a token twice: learn more
