"""Byte-level BPE encoding and decoding (exercises 2.11, 2.12): text -> token ids -> text.

Sennrich et al. 2016 ("Neural Machine Translation of Rare Words with Subword Units") learn
merges; GPT-2 (Radford et al. 2019) runs them on bytes, so any text has an encoding. To
encode, each pre-token's bytes start as single-byte tokens and the learned merges are
applied by rank, the earliest-learned first, until none applies.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterable, Sequence
from functools import lru_cache

from solutions.checks import is_int

from .byte_unicode import byte_chars, token_to_bytes
from .pretokenize import SCHEMES, pretokenize


def merge_ids(ids: Sequence[int], ranks: dict[tuple[int, int], tuple[int, int]]) -> list[int]:
    """One pre-token's ids after BPE: `ids` with the merges of `ranks` applied by rank.

    `ranks[(a, b)] = (rank, c)`: the adjacent pair of ids a, b may merge into id c, and
    rank 0 is the first merge learned. The rule: each merge done is, among the adjacent
    pairs present at that moment, the one of LOWEST rank, at its leftmost occurrence; the
    result holds no adjacent pair that has a rank. So with a, a -> aa, `[a, a, a]` gives
    `[aa, a]`. How often a pair occurs, or where it is, never matters beyond that.
    Returns a new list (`ids` itself, a list or tuple, is not changed); fewer than two ids
    come back as they are.
    """
    # BEGIN SOLUTION 2.11
    # DECISION: which pair merges next: the lowest rank among the adjacent pairs NOW (after
    #   every merge the neighbours change), never the most frequent pair nor the first one.
    # HINT: The simple loop: while True, find the adjacent pair with the smallest rank
    #   (`min` over `ranks.get(pair)` for the pairs present); none: stop. Replace its
    #   leftmost occurrence by the merged id, and look again.
    # HINT: That is O(n^2) for a long piece (a run of 5,000 spaces is one pre-token). Fast:
    #   a heap of (rank, position, merged id) and a doubly linked list of live positions;
    #   pop, skip an entry whose pair is no longer there, merge, push the two new
    #   neighbouring pairs.
    n = len(ids)
    if n < 2:
        return list(ids)
    if n == 2:
        m = ranks.get((ids[0], ids[1]))
        return [m[1]] if m is not None else list(ids)
    sym = list(ids)
    nxt = list(range(1, n + 1))
    prv = list(range(-1, n - 1))
    heap = []
    for i in range(n - 1):
        m = ranks.get((sym[i], sym[i + 1]))
        if m is not None:
            heap.append((m[0], i, m[1]))
    if not heap:
        return sym
    heapq.heapify(heap)
    alive = [True] * n
    while heap:
        rank, i, new = heapq.heappop(heap)
        j = nxt[i]
        if not alive[i] or j >= n or ranks.get((sym[i], sym[j])) != (rank, new):
            continue  # stale: one side merged away since this entry was pushed
        sym[i] = new
        alive[j] = False
        k = nxt[i] = nxt[j]
        if k < n:
            prv[k] = i
            m = ranks.get((new, sym[k]))
            if m is not None:
                heapq.heappush(heap, (m[0], i, m[1]))
        p = prv[i]
        if p >= 0:
            m = ranks.get((sym[p], new))
            if m is not None:
                heapq.heappush(heap, (m[0], p, m[1]))
    return [s for s, a in zip(sym, alive) if a]
    # END SOLUTION


class ByteLevelBPE:
    """A byte-level BPE tokenizer from a vocabulary and its merges, as GPT-2 defines it.

    `tokens[i]` is the vocabulary string of id i, spelled through `bytes_to_unicode` (as
    GGUF's `tokenizer.ggml.tokens` and Hugging Face's `vocab.json` hold it: `"Ġthe"` is the
    bytes b" the"); `merges` in rank order, as "a b" strings (GGUF's
    `tokenizer.ggml.merges`) or (a, b) pairs. `special_tokens` (each one of `tokens`) are
    kept whole wherever they occur in a text; `pretokenizer` is a scheme of `pretokenize`.

    Given attributes the exercises use: `ranks` (the `merge_ids` table, ids), `byte_ids`
    (the id of each single byte, a list of 256), `special_ids` ({special token: id}),
    `special_pattern` (a compiled regex matching any special token, the longest where two
    start at one place; None without special tokens), `token_bytes` (the bytes of each id)
    and `cache` ({pre-token: its ids}, which `encode` may fill).
    """

    def encode(self, text: str) -> list[int]:
        """The token ids of `text`.

        Special tokens are found leftmost first (of two that start at one place, the
        longer) and each is one id, `special_ids[token]`, whatever surrounds it. The result
        is, in text order, those ids and, for every stretch of text between them (a special
        token never reaches the pre-tokenizer), the ids of each of the stretch's pieces under
        `self.pretokenizer`'s scheme: the piece's UTF-8 bytes as single-byte ids (`byte_ids`)
        merged by rank, by `merge_ids`'s rule. `[]` for `""`, and `decode(encode(t)) == t`
        for any str `t` without lone surrogates. Raises TypeError if `text` is not a str;
        ValueError (given code) for text whose bytes this vocabulary has no token for.
        """
        if not isinstance(text, str):
            raise TypeError(f"encode expects a str, got {type(text).__name__}")
        bad = self._unencodable.search(text)
        if bad is not None:
            raise ValueError(f"text holds {bad.group()!r} at {bad.start()}: its UTF-8 bytes "
                             f"{bad.group().encode('utf-8', 'surrogatepass').hex(' ')} are not valid UTF-8 "
                             "or include a byte this vocabulary has no token for")
        # BEGIN SOLUTION 2.11
        # HINT: First the special tokens: walk `self.special_pattern.finditer(text)`; the
        #   text before each match is ordinary text, the match itself one id
        #   (`self.special_ids`); then the text after the last match.
        # HINT: `_encode_ordinary` (its own hole, below): for each piece of `pretokenize`, look
        #   it up in `self.cache`; on a miss, `merge_ids([self.byte_ids[b] for b in
        #   piece.encode("utf-8")], self.ranks)` and remember it. A corpus repeats its
        #   pieces: the cache is the speed.
        out: list[int] = []
        pos = 0
        if self.special_pattern is not None:
            for m in self.special_pattern.finditer(text):
                if m.start() > pos:
                    out += self._encode_ordinary(text[pos:m.start()])
                out.append(self.special_ids[m.group()])
                pos = m.end()
        if pos < len(text):
            out += self._encode_ordinary(text[pos:] if pos else text)
        return out
        # END SOLUTION

    def _encode_ordinary(self, text: str) -> list[int]:
        """The ids of `text` that holds no special token (what `encode` does between them)."""
        # BEGIN SOLUTION 2.11
        cache, ranks, byte_ids = self.cache, self.ranks, self.byte_ids
        out: list[int] = []
        for piece in pretokenize(text, self.pretokenizer):
            ids = cache.get(piece)
            if ids is None:
                ids = cache[piece] = merge_ids([byte_ids[b] for b in piece.encode("utf-8")], ranks)
            out += ids
        return out
        # END SOLUTION

    def decode(self, ids: Iterable[int]) -> str:
        """The text that any sequence of ids spells: their tokens' bytes (`token_bytes[id]`),
        in order, read as UTF-8.

        A character whose bytes are split over two or more tokens comes back whole. Bytes
        that do not form valid UTF-8 (half a character: a model may emit any id after any
        other) become U+FFFD, as many and where `bytes.decode(..., errors="replace")` puts
        them in those bytes; decoding never raises on them. Raises ValueError for an id
        outside 0..vocab_size-1 and TypeError for an id that is not an int (NumPy ints are
        ints)."""
        # BEGIN SOLUTION 2.12
        # DECISION: where UTF-8 decoding happens: once, over the joined bytes of all
        #   tokens (a character can span tokens), with errors replaced, not per token.
        # HINT: A character can begin in one token and end in the next, so no token's bytes
        #   can be read as UTF-8 on their own: read them once you have them all.
        # HINT: Check each id (an int, 0 <= id < vocab_size), collect `self.token_bytes[id]`,
        #   `b"".join` them, then `.decode("utf-8", errors="replace")`.
        table, n, parts = self.token_bytes, len(self.token_bytes), []
        for i in ids:
            if not is_int(i):
                raise TypeError(f"token ids must be ints, got {type(i).__name__} {i!r}")
            if not 0 <= i < n:
                raise ValueError(f"token id {i} is outside the vocabulary 0..{n - 1}")
            parts.append(table[i])
        return b"".join(parts).decode("utf-8", errors="replace")
        # END SOLUTION

    # ------------------------------------------------------------ given code
    def __init__(self, tokens: Sequence[str], merges: Sequence[str] | Sequence[tuple[str, str]],
                 special_tokens: Sequence[str] = (), pretokenizer: str = "gpt2"):
        if isinstance(tokens, str) or not all(isinstance(t, str) for t in tokens):
            raise TypeError("tokens must be a sequence of str")
        if pretokenizer not in SCHEMES:
            raise ValueError(f"pretokenizer must be one of {SCHEMES}, got {pretokenizer!r}")
        if isinstance(special_tokens, str):
            raise TypeError(f"special_tokens must be a sequence of str, not the string {special_tokens!r}")
        self.tokens = list(tokens)
        self.pretokenizer = pretokenizer
        self._ids: dict[str, int] = {}
        for i, t in enumerate(self.tokens):
            if self._ids.setdefault(t, i) != i:
                raise ValueError(f"tokens holds {t!r} twice (ids {self._ids[t]} and {i})")
        chars = byte_chars()
        # a vocabulary may lack bytes no text of its training data held (SmolLM2's lacks 21:
        # six control characters, and lead bytes of code points no text uses); `encode`
        # refuses the characters they spell instead of dropping them
        self.byte_ids = [self._ids.get(chars[b], -1) for b in range(256)]
        self.missing_bytes = tuple(b for b in range(256) if self.byte_ids[b] < 0)
        self._unencodable = _unencodable_pattern(self.missing_bytes)
        self.ranks: dict[tuple[int, int], tuple[int, int]] = {}
        for rank, merge in enumerate(merges):
            pair = merge.split(" ") if isinstance(merge, str) else merge
            if len(pair) != 2 or not all(isinstance(p, str) and p for p in pair):
                raise ValueError(f"merge {rank} must be 'a b' or a pair (a, b) of tokens, got {merge!r}")
            a, b = pair
            for t in (a, b, a + b):
                if t not in self._ids:
                    raise ValueError(f"merge {rank} {merge!r}: {t!r} is not one of tokens")
            self.ranks.setdefault((self._ids[a], self._ids[b]), (rank, self._ids[a + b]))
        self.special_ids: dict[str, int] = {}
        for s in special_tokens:
            if not isinstance(s, str) or not s:
                raise ValueError(f"special tokens must be non-empty str, got {s!r}")
            if s not in self._ids:
                raise ValueError(f"special token {s!r} is not one of tokens")
            self.special_ids[s] = self._ids[s]
        longest_first = sorted(self.special_ids, key=len, reverse=True)
        self.special_pattern = re.compile("|".join(map(re.escape, longest_first))) if self.special_ids else None
        self.token_bytes = [token_to_bytes(t) for t in self.tokens]
        self.cache: dict[str, list[int]] = {}

    @property
    def vocab_size(self) -> int:
        """The number of ids, `len(tokens)`."""
        return len(self.tokens)

    def token_to_id(self, token: str) -> int:
        """The id of a vocabulary string (`"Ġthe"`, `"<|im_end|>"`); ValueError if absent."""
        try:
            return self._ids[token]
        except (KeyError, TypeError):
            raise ValueError(f"{token!r} is not a token of this vocabulary") from None

    def id_to_token(self, i: int) -> str:
        """The vocabulary string of id i; ValueError outside 0..vocab_size-1."""
        if not is_int(i) or not 0 <= i < len(self.tokens):
            raise ValueError(f"token id {i!r} is outside the vocabulary 0..{len(self.tokens) - 1}")
        return self.tokens[int(i)]

    def __repr__(self) -> str:
        return (f"ByteLevelBPE(vocab_size={self.vocab_size}, merges={len(self.ranks)}, "
                f"special_tokens={len(self.special_ids)}, pretokenizer={self.pretokenizer!r})")


@lru_cache(maxsize=16)
def _unencodable_pattern(missing: tuple[int, ...]) -> re.Pattern:
    """A regex matching every character whose UTF-8 encoding holds one of the bytes
    `missing`, and every lone surrogate (no UTF-8 holds one)."""
    absent = set(missing)
    bad = [cp for cp in range(0x80) if cp in absent]
    for base in range(0x80, 0x110000, 64):  # 64 code points share all bytes but the last
        if 0xD800 <= base <= 0xDFFF:
            continue
        if not absent.isdisjoint(chr(base).encode("utf-8")[:-1]):
            bad.extend(range(base, base + 64))
        else:
            bad.extend(base + k for k in range(64) if 0x80 | k in absent)
    ranges: list[list[int]] = []
    for cp in bad:
        if ranges and ranges[-1][1] == cp - 1:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp])
    body = "".join(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in ranges)
    return re.compile(f"[{body}\ud800-\udfff]")
