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
    # BEGIN SOLUTION 2.13
    # DECISION: the tie rule (highest count, then the greatest pair as bytes) and what to
    #   recount after a merge (only the pieces that held the merged pair).
    # HINT: Slow and right first: keep each piece as a list of bytes symbols; each step,
    #   count all pairs into a dict, take `max(counts, key=lambda p: (counts[p], p))`,
    #   merge it in every piece. Check it on "low low low lower widest newest" by hand.
    # HINT: Fast: keep the pair counts and, per pair, the set of pieces holding it. After
    #   merging (a, b), only those pieces change: subtract their old pairs, merge, add the
    #   new pairs. A heap of (-count, `_desc(a)`, `_desc(b)`, pair) finds the best pair
    #   (`_desc`, given below, reverses the order of bytes); skip stale entries.
    words = [list(bytes([b]) for b in piece) for piece in pieces]
    weights = list(pieces.values())
    counts: dict[tuple[bytes, bytes], int] = {}
    where: dict[tuple[bytes, bytes], set[int]] = {}
    for w, (syms, n) in enumerate(zip(words, weights)):
        for pair in zip(syms, syms[1:]):
            counts[pair] = counts.get(pair, 0) + n
            where.setdefault(pair, set()).add(w)
    heap = [(-c, _desc(p[0]), _desc(p[1]), p) for p, c in counts.items()]
    heapq.heapify(heap)
    merges: list[tuple[bytes, bytes]] = []
    while heap and len(merges) < num_merges:
        neg, _, _, pair = heapq.heappop(heap)
        if counts.get(pair, 0) != -neg or neg == 0:
            continue  # stale entry (the count changed since it was pushed)
        merges.append(pair)
        a, b = pair
        merged = a + b
        touched: set[tuple[bytes, bytes]] = set()
        for w in sorted(where.pop(pair, ())):
            syms, n = words[w], weights[w]
            for old in zip(syms, syms[1:]):
                counts[old] -= n
                touched.add(old)
            out, i = [], 0
            while i < len(syms):
                if i + 1 < len(syms) and syms[i] == a and syms[i + 1] == b:
                    out.append(merged)
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            words[w] = out
            for new in zip(out, out[1:]):
                counts[new] = counts.get(new, 0) + n
                where.setdefault(new, set()).add(w)
                touched.add(new)
        counts.pop(pair, None)
        touched.discard(pair)
        for p in touched:
            c = counts.get(p, 0)
            if c > 0:
                heapq.heappush(heap, (-c, _desc(p[0]), _desc(p[1]), p))
            else:
                counts.pop(p, None)
    return merges
    # END SOLUTION


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
