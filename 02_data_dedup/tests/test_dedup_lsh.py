"""Exercises 2.5 (LSH banding and verification) and 2.6 (union-find clustering)."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import course

dd = course.load("dedup")


# ------------------------------------------------------------------------------ 2.5


def _exact_s_curve(s: float, bands: int, rows: int) -> float:
    """1 - (1 - s**rows)**bands in exact rational arithmetic, rounded once to a float."""
    return float(1 - (1 - Fraction(float(s)) ** rows) ** bands)


# An evaluation without cancellation is within 1e-16 relative of the exact value; one that
# subtracts from 1 twice loses up to ~bands ulps of 1 (11 % of P at s = 0.1, b = 8, r = 16).
# Both are right: the check admits an absolute error of 1e-14 or a relative one of 1e-9; a
# wrong probability is off by far more.
S_CURVE_POINTS = [(s, 8, 16) for s in np.linspace(0, 1, 11).tolist()] + [
    (0.1, 8, 16), (0.05, 20, 5), (0.3, 50, 20), (0.93, 3, 2), (0.6, 5, 3), (0.2, 128, 1)]


@pytest.mark.exercise("2.5")
def test_s_curve_formula_and_monte_carlo():
    s = np.linspace(0, 1, 11)
    got = dd.s_curve(s, 8, 16)
    assert isinstance(got, np.ndarray) and got.shape == s.shape, (
        f"s_curve broadcasts: an array of {s.shape} similarities gives an array of that shape, got {got!r}")
    for (sim, b, r), value in zip(S_CURVE_POINTS, [*got.tolist(), *(dd.s_curve(p[0], p[1], p[2])
                                                                    for p in S_CURVE_POINTS[11:])]):
        want = _exact_s_curve(sim, b, r)
        assert abs(value - want) <= 1e-14 + 1e-9 * want, (
            f"s_curve({sim}, bands={b}, rows={r}) = {value!r}, expected {want!r}: the probability that "
            f"a pair of similarity s is a candidate, i.e. that at least one of its {b} bands matches, a band "
            f"matching when all of its {r} rows do (each with probability s), to 1e-14 absolute or 1e-9 "
            f"relative")
    assert dd.s_curve(0.0, 4, 4) == 0.0 and dd.s_curve(1.0, 4, 4) == 1.0
    # Monte Carlo: a band matches when all its rows match, each with probability s.
    rng = np.random.default_rng(0)
    b, r, sim = 5, 3, 0.6
    rows_match = rng.random((200_000, b, r)) < sim
    empirical = rows_match.all(axis=2).any(axis=1).mean()
    assert abs(empirical - dd.s_curve(sim, b, r)) < 0.005  # 5 std of a 200k-sample mean
    grid = dd.s_curve(np.array([[0.5], [0.9]]), np.array([2, 20]), np.array([10, 5]))
    assert grid.shape == (2, 2)


@pytest.mark.exercise("2.5")
def test_error_areas_match_numerical_integration():
    from scipy.integrate import quad

    for t, b, r in [(0.85, 8, 16), (0.5, 25, 5), (0.7, 3, 40), (0.3, 128, 1)]:
        fp, fn = dd.lsh_error_areas(t, b, r)
        want_fp = quad(lambda s: 1 - (1 - s**r) ** b, 0, t)[0]
        want_fn = quad(lambda s: (1 - s**r) ** b, t, 1)[0]
        assert fp == pytest.approx(want_fp, abs=1e-10) and fn == pytest.approx(want_fn, abs=1e-10)


def _brute_force_params(threshold, num_perm, w_fp=0.5, w_fn=0.5):
    """Every (b, r) with b*r <= num_perm, integrated with scipy: the smallest error."""
    from scipy.integrate import quad

    best, errors = None, {}
    for b in range(1, num_perm + 1):
        for r in range(1, num_perm // b + 1):
            fp = quad(lambda s: 1 - (1 - s**r) ** b, 0, threshold)[0]
            fn = quad(lambda s: (1 - s**r) ** b, threshold, 1)[0]
            errors[(b, r)] = w_fp * fp + w_fn * fn
            if best is None or errors[(b, r)] < errors[best]:
                best = (b, r)
    return best, errors


@pytest.mark.exercise("2.5")
@pytest.mark.parametrize("threshold,num_perm,weights", [
    (0.85, 128, (0.5, 0.5)), (0.5, 64, (0.5, 0.5)), (0.7, 100, (0.2, 0.8)), (0.9, 32, (0.9, 0.1)),
])
def test_lsh_params_against_brute_force(threshold, num_perm, weights):
    best, errors = _brute_force_params(threshold, num_perm, *weights)
    got = dd.lsh_params(threshold, num_perm, weights)
    assert got[0] * got[1] <= num_perm
    assert errors[got] == pytest.approx(errors[best], abs=1e-9)  # the same minimum (ties allowed)


@pytest.mark.exercise("2.5")
def test_lsh_params_like_datasketch():
    from datasketch import MinHashLSH
    from datasketch.lsh import _optimal_param

    for t in (0.5, 0.7, 0.85, 0.9):
        assert dd.lsh_params(t, 128) == _optimal_param(t, 128, 0.5, 0.5)
        assert dd.lsh_params(t, 128) == (lambda lsh: (lsh.b, lsh.r))(MinHashLSH(threshold=t, num_perm=128))


def _reference_candidates(sig, bands, rows):
    """Pairs sharing at least one band, with plain dictionaries."""
    out = set()
    for k in range(bands):
        buckets = {}
        for i, row in enumerate(sig[:, k * rows:(k + 1) * rows]):
            buckets.setdefault(row.tobytes(), []).append(i)
        for members in buckets.values():
            out.update(itertools.combinations(members, 2))
    return out


@pytest.mark.exercise("2.5")
@settings(max_examples=40, deadline=None)
@given(st.integers(1, 40), st.integers(1, 4), st.integers(1, 3), st.integers(2, 3), st.integers(0, 2**31))
def test_candidate_pairs_against_dictionary_buckets(n, bands, rows, values, seed):
    """Signatures over a tiny alphabet, so that buckets are large and shared."""
    rng = np.random.default_rng(seed)
    sig = rng.integers(0, values, size=(n, bands * rows + 1)).astype(np.uint32)
    got = dd.candidate_pairs(sig, bands, rows)
    assert got.dtype == np.int64 and got.shape[1] == 2
    assert np.all(got[:, 0] < got[:, 1])
    assert len({tuple(p) for p in got.tolist()}) == len(got)  # each pair once
    assert {tuple(p) for p in got.tolist()} == _reference_candidates(sig, bands, rows)


@pytest.mark.exercise("2.5")
def test_verify_exact_and_estimated():
    keys = [np.array([1, 2, 3, 4], np.uint32), np.array([1, 2, 3, 5], np.uint32), np.array([9], np.uint32)]
    pairs = np.array([[0, 1], [0, 2], [1, 2]])
    kept, sims = dd.verify_pairs(pairs, 0.5, shingle_keys=keys)
    np.testing.assert_array_equal(kept, [[0, 1]])
    np.testing.assert_allclose(sims, [3 / 5])
    sig = np.array([[1, 2, 3, 4], [1, 2, 3, 0], [7, 7, 7, 7]], np.uint32)
    kept, sims = dd.verify_pairs(pairs, 0.75, signatures=sig)
    np.testing.assert_array_equal(kept, [[0, 1]])
    np.testing.assert_allclose(sims, [0.75])


def _recall_precision(found, truth):
    found = {tuple(p) for p in np.asarray(found).tolist()}
    hits = len(found & truth)
    return hits / len(truth), (hits / len(found) if found else 1.0)


# Every candidate is verified, so a false positive costs one Jaccard computation while a
# false negative leaves a duplicate in: the pipeline weights the FN area 0.9, FP 0.1.
WEIGHTS = (0.1, 0.9)


@pytest.mark.exercise("2.5")
def test_planted_near_duplicates_found(planted):
    """Edited copies at J >= 0.9 of each other are found; those at 0.7 and below are not."""
    hasher = dd.MinHasher(num_perm=128, seed=1)
    keys = hasher.shingle_keys(planted.texts)
    sig = hasher.signatures(keys)
    bands, rows = dd.lsh_params(0.85, 128, WEIGHTS)
    assert dd.s_curve(0.9, bands, rows) > 0.95  # why recall can be high
    cands = dd.candidate_pairs(sig, bands, rows)
    exact, _ = dd.verify_pairs(cands, 0.85, shingle_keys=keys)
    recall, precision = _recall_precision(exact, planted.truth)
    assert recall >= 0.95 and precision == 1.0  # exact verification admits no false positive
    estimated, _ = dd.verify_pairs(cands, 0.85, signatures=sig)
    recall, precision = _recall_precision(estimated, planted.truth)
    assert recall >= 0.9 and precision >= 0.95


@pytest.mark.exercise("2.5")
def test_candidates_overlap_with_datasketch_lsh(planted):
    """The same documents through datasketch's MinHash + MinHashLSH, same (b, r).

    Pairs far above the threshold are candidates in both; pairs at J ~ 0.7 are candidates
    with probability ~0.2 in each, independently, so the candidate sets differ there by
    chance. After exact verification both hold the same pairs.
    """
    from datasketch import MinHash, MinHashLSH
    from datasketch.lean_minhash import LeanMinHash

    shingles = [set(s) for s in planted.sets]
    ours_sig = dd.MinHasher(num_perm=128, seed=1).signatures(shingles)
    ours = {tuple(p) for p in dd.candidate_pairs(ours_sig, *dd.lsh_params(0.85, 128, WEIGHTS)).tolist()}
    lsh = MinHashLSH(threshold=0.85, num_perm=128, weights=WEIGHTS)
    assert (lsh.b, lsh.r) == dd.lsh_params(0.85, 128, WEIGHTS)
    sketches = MinHash.bulk([[s.encode("utf-8") for s in doc] for doc in planted.sets], num_perm=128)
    for i, m in enumerate(sketches):
        lsh.insert(i, LeanMinHash(m))
    theirs = {(min(i, j), max(i, j)) for i, m in enumerate(sketches) for j in lsh.query(m) if j != i}
    assert len(ours & theirs) / len(ours | theirs) >= 0.75

    def verified(pairs):
        return {(i, j) for i, j in pairs if dd.jaccard(shingles[i], shingles[j]) >= 0.85}

    v_ours, v_theirs = verified(ours), verified(theirs)
    assert len(v_ours & v_theirs) / len(v_ours | v_theirs) >= 0.95
    assert len(planted.truth - v_ours) <= 0.05 * len(planted.truth)
    assert len(planted.truth - v_theirs) <= 0.05 * len(planted.truth)


@pytest.mark.given
def test_lsh_arguments_rejected():
    with pytest.raises(ValueError, match="threshold"):
        dd.lsh_params(1.2, 128)
    with pytest.raises(ValueError, match="num_perm"):
        dd.lsh_params(0.5, 0)
    with pytest.raises(ValueError, match="weights"):
        dd.lsh_params(0.5, 16, (-1, 1))
    with pytest.raises(ValueError, match="similarities"):
        dd.s_curve(1.5, 2, 2)
    with pytest.raises(ValueError, match="exceeds num_perm"):
        dd.candidate_pairs(np.zeros((3, 8), np.uint32), 3, 3)
    with pytest.raises(ValueError, match="shape"):
        dd.candidate_pairs(np.zeros(8, np.uint32), 2, 2)
    with pytest.raises(ValueError, match="signatures .* or shingle_keys"):
        dd.verify_pairs(np.array([[0, 1]]), 0.5)
    with pytest.raises(ValueError, match="outside"):
        dd.verify_pairs(np.array([[0, 5]]), 0.5, signatures=np.zeros((2, 4), np.uint32))


# ------------------------------------------------------------------------------ 2.6


def _components(n, edges):
    """Connected components by depth-first search: the slow, obvious reference."""
    adj = {i: set() for i in range(n)}
    for i, j in edges:
        adj[i].add(j)
        adj[j].add(i)
    label = [-1] * n
    for start in range(n):
        if label[start] < 0:
            stack, members = [start], []
            label[start] = start
            while stack:
                v = stack.pop()
                members.append(v)
                for w in adj[v]:
                    if label[w] < 0:
                        label[w] = start
                        stack.append(w)
    return label  # start is the smallest member: nodes are visited in increasing order


@pytest.mark.exercise("2.6")
@settings(max_examples=80, deadline=None)
@given(st.integers(1, 60).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=80))))
def test_union_find_matches_components(case):
    n, edges = case
    labels = dd.cluster(n, np.array(edges).reshape(-1, 2))
    assert labels.dtype == np.int64
    np.testing.assert_array_equal(labels, _components(n, edges))
    uf = dd.UnionFind(n)
    merged = [uf.union(i, j) for i, j in edges]
    np.testing.assert_array_equal(uf.labels(), labels)
    assert sum(merged) == n - len(set(labels.tolist()))  # each successful union removes one set
    for i, j in edges:
        assert uf.find(i) == uf.find(j)


@pytest.mark.exercise("2.6")
def test_union_returns_false_inside_a_set_and_labels_are_order_free():
    uf = dd.UnionFind(5)
    assert uf.union(3, 4) and uf.union(4, 1) and not uf.union(1, 3)
    np.testing.assert_array_equal(uf.labels(), [0, 1, 2, 1, 1])
    other = dd.UnionFind(5)
    other.union(1, 4)
    other.union(3, 1)
    np.testing.assert_array_equal(other.labels(), uf.labels())


@pytest.mark.exercise("2.6")
def test_cluster_keeps_first_document_of_each_chain():
    """A~B and B~C but not A~C: still one family; the earliest document is kept."""
    labels = dd.cluster(6, np.array([[4, 2], [2, 5], [0, 3]]))
    np.testing.assert_array_equal(labels, [0, 1, 2, 0, 2, 2])
    keep = labels == np.arange(6)
    np.testing.assert_array_equal(np.flatnonzero(keep), [0, 1, 2])


@pytest.mark.exercise("2.6")
def test_find_halves_the_path():
    """After find(i), i and every other node on its old path point at their former grandparents."""
    uf = dd.UnionFind(6)
    uf.parent = [0, 0, 1, 2, 3, 4]  # the chain 5 -> 4 -> 3 -> 2 -> 1 -> 0
    uf.size = [6, 5, 4, 3, 2, 1]
    assert uf.find(5) == 0
    assert uf.parent == [0, 0, 1, 1, 3, 3], (
        f"path halving: 5 -> 3, 3 -> 1, 1 -> 0 expected, parent = {uf.parent}")
    assert [uf.find(i) for i in range(6)] == [0] * 6  # the set did not change


@pytest.mark.exercise("2.6")
def test_union_find_is_fast_on_a_long_chain():
    """Path halving + union by size: 100k unions along a chain stay shallow."""
    n = 100_000
    uf = dd.UnionFind(n)
    for i in range(n - 1):
        uf.union(i + 1, i)
    root = uf.find(n - 1)
    assert root == uf.find(0), "after unions along the whole chain, find(0) and find(n - 1) name one set"
    assert uf.size[root] == n, (
        f"size at the root of a set of {n} is {uf.size[root]}: union adds the merged set's size to "
        f"the new root's (size is valid at every root), else union by size compares stale sizes")
    depth = max(_depth(uf, i) for i in range(0, n, 997))
    assert depth <= 20, (
        f"a node {depth} links below its root after {n - 1} unions along a chain: union by size "
        f"hangs the smaller set's root under the larger's, which keeps every path <= log2(n) = 17 links")


def _depth(uf, i):
    d = 0
    while uf.parent[i] != i:
        i = uf.parent[i]
        d += 1
    return d


@pytest.mark.given
def test_union_find_arguments_rejected():
    with pytest.raises(ValueError, match="non-negative int"):
        dd.UnionFind(-1)
    with pytest.raises(IndexError, match="outside"):
        dd.UnionFind(3).find(3)
    with pytest.raises(ValueError, match="outside"):
        dd.cluster(2, np.array([[0, 2]]))
