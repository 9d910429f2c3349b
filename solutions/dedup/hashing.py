"""A 32-bit hash of strings (given code), computed for many substrings at once.

The polynomial hash of code points c_0 .. c_{m-1} is  sum_j c_j * B**(m-1-j) + m  (the
length m tells "\\0a" from "a"), computed in uint64: wrapping arithmetic is arithmetic
mod 2**64. With prefix sums P[i] = sum_{j<i} c_j * B**-j (B is odd, so it has an
inverse mod 2**64), the polynomial of the substring [l, r) is  B**(r-1) * (P[r] - P[l]):
two array operations for every substring at once, no loop. A final avalanche mix
(MurmurHash3's fmix64) spreads the bits, and the top 32 bits are the shingle's hash.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_B = np.uint64(0x9E3779B97F4A7C15 | 1)
_B_INV = np.uint64(pow(int(_B), -1, 2**64))
_powers_cache: dict[str, np.ndarray] = {"pow": np.ones(1, np.uint64), "inv": np.ones(1, np.uint64)}


def _codepoints(text: str) -> np.ndarray:
    """The code points of `text` as a uint32 array (one element per character)."""
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


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
