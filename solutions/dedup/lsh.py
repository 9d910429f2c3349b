"""LSH banding (exercise 2.5): choose bands x rows, find candidate pairs, verify them."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .arguments import check_threshold, check_weights, positive_int
from .minhash import estimate_jaccard, jaccard


def s_curve(s: float | np.ndarray, bands: int | np.ndarray, rows: int | np.ndarray) -> float | np.ndarray:
    """P(candidate): the probability that two documents of Jaccard s become a candidate pair.

    Their signatures are cut into `bands` bands of `rows` positions each; they are a
    candidate when they agree on every position of at least one band (see
    `candidate_pairs`), and each position agrees independently with probability s (the
    MinHash property). The closed form follows from these two facts: a polynomial in s of
    degree bands * rows with P(0) = 0 and P(1) = 1, S-shaped, steepest near (1/b)**(1/r).
    Broadcasts s, bands and rows against each other (float64 array); all scalars give a
    Python float. Raises ValueError for a similarity outside [0, 1] or NaN
    ("similarities ..."), bands or rows < 1.
    """
    s_arr = np.asarray(s, dtype=np.float64)
    if np.any((s_arr < 0) | (s_arr > 1)) or np.any(np.isnan(s_arr)):
        raise ValueError(f"similarities must lie in [0, 1], got {s!r}")
    if np.any(np.asarray(bands) < 1) or np.any(np.asarray(rows) < 1):
        raise ValueError(f"bands and rows must be >= 1, got bands={bands!r}, rows={rows!r}")
    # BEGIN SOLUTION 2.5
    # DECISION: the probability model behind the S-curve (a band matches when all its rows agree;
    #   the pair is missed when every band fails), the integration rule that is exact for a
    #   polynomial, the tie-break among equal errors, and how to bucket a band's rows so that
    #   repeats across bands are removed.
    # HINT: s_curve: the complement is easier: when is a pair NOT a candidate? Work out the
    #   probability that one band matches first, then that all b bands fail.
    # HINT: s_curve: one band matches when all of its r positions agree: s**r. The pair is
    #   missed when every one of the b bands fails, each independently: (1 - s**r)**b.
    p = 1.0 - (1.0 - s_arr ** np.asarray(rows, np.float64)) ** np.asarray(bands, np.float64)
    return float(p) if p.ndim == 0 else p
    # END SOLUTION


def lsh_error_areas(threshold: float, bands, rows) -> tuple[np.ndarray, np.ndarray]:
    """(false-positive area, false-negative area) under the S-curve for each (bands, rows).

    FP = ∫_0^t P(s) ds: pairs below the threshold that still become candidates (cost:
    verification work). FN = ∫_t^1 (1 - P(s)) ds: pairs above it that are missed (cost:
    duplicates left in). Both float64 arrays of the broadcast shape of bands and rows (0-d
    for scalars), exact to 1e-10. Raises ValueError for a threshold not in (0, 1), bands
    or rows < 1.
    """
    check_threshold(threshold)
    bands, rows = np.broadcast_arrays(np.asarray(bands, np.int64), np.asarray(rows, np.int64))
    if np.any(bands < 1) or np.any(rows < 1):
        raise ValueError(f"bands and rows must be >= 1, got {bands!r}, {rows!r}")
    # BEGIN SOLUTION 2.5
    # HINT: lsh_error_areas: an m-node Gauss-Legendre rule is exact for every polynomial of
    #   degree up to 2m - 1, and P has degree b·r: pick m from the largest b·r asked, not a
    #   fixed handful. (Expanding P by the binomial theorem is exact on paper, but its
    #   alternating terms carry coefficients up to C(128, 64) ~ 2.4e37 and cancel away every
    #   digit of a float64.)
    # HINT: lsh_error_areas: P is a polynomial of degree b·r in s, so Gauss-Legendre quadrature
    #   with degree // 2 + 1 nodes (`np.polynomial.legendre.leggauss`) integrates it exactly:
    #   map the nodes from [-1, 1] to [lo, hi], scale the weights by (hi - lo) / 2, and
    #   evaluate `s_curve` at all nodes for all (b, r) at once.
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
    """The (bands, rows), two Python ints, with bands * rows <= num_perm that minimise the error.

    Error = w_fp * FP area + w_fn * FN area (see `lsh_error_areas`; `weights` = (w_fp, w_fn)),
    over every b >= 1, r >= 1 with b * r <= num_perm. Among equal errors the smallest bands,
    then the smallest rows, wins: the answer `datasketch`'s `MinHashLSH` picks. Raises
    ValueError for a bad threshold, num_perm or weights.
    """
    check_threshold(threshold)
    positive_int("num_perm", num_perm)
    check_weights(weights)
    # BEGIN SOLUTION 2.5
    # HINT: lsh_params: list every (b, r) with b outer and r inner (that order settles ties),
    #   get all their areas in one `lsh_error_areas` call, and take `np.argmin` of the
    #   weighted sum (it returns the first minimum).
    b, r = np.array([(b, r) for b in range(1, num_perm + 1) for r in range(1, num_perm // b + 1)]).T
    fp, fn = lsh_error_areas(threshold, b, r)
    best = int(np.argmin(weights[0] * fp + weights[1] * fn))  # first minimum wins ties
    return int(b[best]), int(r[best])
    # END SOLUTION


def candidate_pairs(signatures: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """All pairs (i, j), i < j, whose signatures agree on every row of at least one band.

    Band k is the columns [k*rows, (k+1)*rows) of `signatures` (n_docs, num_perm); columns
    after bands*rows are not used. Documents with identical band rows share a bucket, and
    every two documents in a bucket are a candidate. Returns int64, shape (m, 2), sorted
    (by i, then j), each pair once however many bands it shares; (0, 2) when there are none.
    Raises ValueError if `signatures` is not 2-D ("shape"), if bands * rows exceeds
    num_perm ("exceeds num_perm"), or bands or rows is not a positive int.
    """
    signatures = np.asarray(signatures)
    if signatures.ndim != 2:
        raise ValueError(f"signatures must have shape (n_docs, num_perm), got {signatures.shape}")
    positive_int("bands", bands)
    positive_int("rows", rows)
    if bands * rows > signatures.shape[1]:
        raise ValueError(f"bands * rows = {bands * rows} exceeds num_perm = {signatures.shape[1]}")
    # BEGIN SOLUTION 2.5
    # HINT: candidate_pairs: per band, give equal rows one bucket label (`np.unique(...,
    #   return_inverse=True)` on the band's rows, each viewed as one `np.void` value), and
    #   `_pairs_within_groups(labels)` lists the pairs; encode (i, j) as i * n + j so that one
    #   `np.unique` over all bands removes repeats and sorts them.
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


def verify_pairs(pairs: np.ndarray, threshold: float, *, signatures: np.ndarray | None = None,
                 shingle_keys: Sequence[np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The candidate pairs whose similarity is >= threshold: (pairs int64 (k, 2), sims float64 (k,)).

    With `shingle_keys` (each document's sorted distinct shingle hashes) the similarity is
    the exact Jaccard of the two sets; otherwise the estimate from the `signatures` rows. A
    pair exactly at the threshold is kept; kept pairs stay in their input order. Candidates
    are only candidates: a pair can share a band by chance. Raises ValueError with neither
    input ("needs signatures ... or shingle_keys") or a pair outside the documents ("outside").
    """
    check_threshold(threshold)
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    if shingle_keys is None and signatures is None:
        raise ValueError("verify_pairs needs signatures (estimated Jaccard) or shingle_keys (exact Jaccard)")
    n = len(shingle_keys) if shingle_keys is not None else len(signatures)
    if pairs.size and (pairs.min() < 0 or pairs.max() >= n):
        raise ValueError(f"pairs refer to documents outside 0..{n - 1}")
    # BEGIN SOLUTION 2.5
    # HINT: verify_pairs: `jaccard(keys[i], keys[j])` per pair, or `estimate_jaccard` of the
    #   two signature rows of all pairs at once; then keep `sims >= threshold` in both arrays.
    if shingle_keys is not None:
        sims = np.array([jaccard(shingle_keys[i], shingle_keys[j]) for i, j in pairs], dtype=np.float64)
    else:
        sims = np.asarray(estimate_jaccard(signatures[pairs[:, 0]], signatures[pairs[:, 1]]), dtype=np.float64)
    keep = sims >= threshold
    return pairs[keep], sims[keep]
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
