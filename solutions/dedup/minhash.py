"""MinHash (exercise 2.4): signatures whose agreement estimates Jaccard similarity."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from .arguments import non_negative_int, positive_int
from .hashing import hash_strings, sorted_unique
from .shingles import SHINGLE_KINDS, shingle_hashes

EMPTY = np.uint32(0xFFFFFFFF)  # the signature value of a document with no shingles


def estimate_jaccard(sig_a: np.ndarray, sig_b: np.ndarray) -> float | np.ndarray:
    """The share of positions where two signatures agree: an unbiased Jaccard estimate.

    Its standard deviation is sqrt(J (1 - J) / num_perm). Broadcasts over leading axes:
    signatures of shape (m, num_perm) give a float64 array of m estimates, (m, num_perm)
    against (num_perm,) too; two 1-D signatures give a Python float. Raises ValueError
    ("... the same last dimension ...") when the last dimensions differ or an input is 0-d.
    """
    sig_a, sig_b = np.asarray(sig_a), np.asarray(sig_b)
    if sig_a.ndim == 0 or sig_b.ndim == 0 or sig_a.shape[-1] != sig_b.shape[-1]:
        raise ValueError(f"signatures must have the same last dimension (num_perm), got shapes "
                         f"{sig_a.shape} and {sig_b.shape}")
    # BEGIN SOLUTION 2.4
    # DECISION: the data layout that makes MinHash fast: which axis holds the permutations and which
    #   the keys, how many documents' keys go into one NumPy call (a block), and how a document's
    #   minimum is combined across the blocks it spans.
    # HINT: estimate_jaccard: compare element-wise, take the mean over the last axis, and
    #   turn a 0-d result into a Python `float`.
    agree = np.mean(sig_a == sig_b, axis=-1)
    return float(agree) if agree.ndim == 0 else agree
    # END SOLUTION


class MinHasher:
    """MinHash signatures for many documents at once, vectorised with NumPy.

    Permutation i is the universal hash  h_i(x) = (a_i * x + b_i) mod 2**32  with a_i odd,
    applied to a shingle's 32-bit hash x (already well mixed, see `span_hashes`). With a_i
    odd, h_i is a bijection of the 32-bit values: a random reordering of all shingles. The
    signature of a document is, for every i, the smallest h_i over its shingles; two
    documents agree at position i with probability equal to their Jaccard similarity.

    Attributes: `a`, `b` (uint32, shape (num_perm,), drawn from `seed`: the same seed, the
    same permutations), `num_perm`, `seed`, `shingle` ("word" or "char") and `n`.
    """

    def __init__(self, num_perm: int = 128, seed: int = 1, *, shingle: str = "word", n: int = 5) -> None:
        positive_int("num_perm", num_perm)
        non_negative_int("seed", seed)
        if shingle not in SHINGLE_KINDS:
            raise ValueError(f"shingle must be one of {SHINGLE_KINDS}, got {shingle!r}")
        positive_int("n", n)
        self.num_perm, self.seed, self.shingle, self.n = int(num_perm), int(seed), shingle, int(n)
        rng = np.random.default_rng(seed)
        self.a = (rng.integers(0, 2**31, num_perm, dtype=np.uint32) * np.uint32(2)) + np.uint32(1)
        self.b = rng.integers(0, 2**32, num_perm, dtype=np.uint32)

    def signatures(self, docs: Sequence, rows_per_block: int = 512) -> np.ndarray:
        """MinHash signatures of all `docs`, uint32, shape (len(docs), num_perm).

        `docs` is a list of texts (shingled with this hasher's `shingle` kind and `n`), of
        shingle sets (sets, frozensets, lists or tuples of strings) or of integer arrays of
        shingle hashes (as `shingle_hashes` returns); see `shingle_keys`, whose errors it
        raises. Row d, position i is  min over the distinct keys x of document d of
        (a[i] * x + b[i]) mod 2**32;  a document without shingles gets `EMPTY` everywhere.
        A row depends only on its document: not on the other documents, their order, or
        `rows_per_block`, a positive int that sizes the blocks the work is done in (what one
        unit of it holds is yours to choose): it bounds the memory, never the result.
        """
        keys = self.shingle_keys(docs)
        positive_int("rows_per_block", rows_per_block)
        # BEGIN SOLUTION 2.4
        # HINT: signatures: per document the definition is one expression,
        #   `(a[:, None] * keys + b).min(axis=1)` in uint32 (it wraps mod 2**32 by itself);
        #   make it fast by hashing the keys of many documents together, a block at a time.
        # HINT: signatures: cut each document's keys into rows of 32 (pad its last row with
        #   its first key: a repeated key cannot change a minimum); for a block of rows,
        #   `np.multiply(a[:, None, None], rows.T, out=...)` + b has shape (num_perm, 32, rows);
        #   `min` over axis 1, then `np.minimum.reduceat` over each document's run of rows, and
        #   `np.minimum` into the result (a document's rows may span two blocks).
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

    def __repr__(self) -> str:
        return f"MinHasher(num_perm={self.num_perm}, seed={self.seed}, shingle={self.shingle!r}, n={self.n})"

    def shingle_keys(self, docs: Sequence) -> list[np.ndarray]:
        """Each document's distinct shingle hashes (uint32, sorted): the sets MinHash sees.

        Raises TypeError if `docs` is a str/bytes/dict or not a sequence ("list of
        documents"), or for a document of another type ("docs[i] ..."); ValueError for an
        array that is not 1-D integer values in 0..2**32-1.
        """
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
