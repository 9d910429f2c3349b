"""Clustering (exercise 2.6): union-find over the verified pairs, one label per family."""

from __future__ import annotations

import numpy as np

from solutions.checks import is_int

from .arguments import non_negative_int


class UnionFind:
    """Disjoint sets over 0..n-1: `union(i, j)` merges two sets, `find(i)` names i's set.

    State: `parent` (a list: `parent[i] == i` exactly for a set's root) and `size` (a list:
    the size of the set, valid at its root). Raises ValueError unless n is an int >= 0.
    """

    def __init__(self, n: int) -> None:
        non_negative_int("n", n)
        self.parent = list(range(n))
        self.size = [1] * n

    def find(self, i: int) -> int:
        """The root of i's set: the same int for every member of one set.

        The sets never change; the trees get flatter (path halving): afterwards i, and every
        other node above it on its old path to the root, points at its former grandparent.
        Raises IndexError ("outside") unless i is an int in 0..n-1.
        """
        i = self._check(i)
        # BEGIN SOLUTION 2.6
        # DECISION: the union-find invariants: union by size (the larger root stays), path halving
        #   in find, and labels that do not depend on the order of the unions (the smallest member).
        # HINT: find: follow `parent` until `parent[i] == i`; at each step first set
        #   `parent[i] = parent[parent[i]]` (path halving), then move i up.
        parent = self.parent
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i
        # END SOLUTION

    def union(self, i: int, j: int) -> bool:
        """Merge the sets of i and j: True if they were two sets, False if already one (i == j too).

        Union by size: the root of the larger set becomes the root of the merged one, so a
        find never climbs more than log2(n) links. Raises IndexError as `find`.
        """
        # BEGIN SOLUTION 2.6
        # HINT: union: find both roots; the same root means False; otherwise hang the smaller
        #   set's root under the larger one's and add its size there.
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
        always get the same labels (`[0, 1, 2, 1, 1]` for the sets {0}, {1, 3, 4}, {2}).
        """
        # BEGIN SOLUTION 2.6
        # HINT: labels: the root of every element, then the smallest element per root
        #   (`np.minimum.at` into an array indexed by root), looked up for every element.
        roots = np.array([self.find(i) for i in range(len(self.parent))], dtype=np.int64)
        smallest = np.full(len(roots), len(roots), dtype=np.int64)
        np.minimum.at(smallest, roots, np.arange(len(roots)))
        return smallest[roots]
        # END SOLUTION

    def __len__(self) -> int:
        return len(self.parent)

    def _check(self, i: int) -> int:
        if not is_int(i) or not 0 <= i < len(self.parent):
            raise IndexError(f"element {i!r} is outside 0..{len(self.parent) - 1}")
        return int(i)


def cluster(n: int, pairs: np.ndarray) -> np.ndarray:
    """Cluster labels of n documents linked by `pairs` (shape (m, 2)): int64, shape (n,).

    Near-duplicate is not transitive (A~B and B~C does not mean A~C), but a chain of
    edits is one family of copies, so clusters are the connected components of the pairs,
    and a document's label is the smallest index in its component: the document that came
    first in the input, the one the pipeline keeps (keep mask: `labels == np.arange(n)`).
    `cluster(6, [[4, 2], [2, 5], [0, 3]])` is `[0, 1, 2, 0, 2, 2]`; n = 0 gives shape (0,).
    Raises ValueError if a pair refers to a document outside 0..n-1 ("outside").
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
