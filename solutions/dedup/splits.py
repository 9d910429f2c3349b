"""Splits without leakage (exercise 2.7): whole groups and clusters to one split each."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from .arguments import check_depth, check_fractions
from .clusters import UnionFind


def assign_splits(sources: Sequence[str], labels: np.ndarray | None = None,
                  fractions: Sequence[float] = (0.8, 0.1, 0.1), group_depth: int = 2,
                  salt: str = "") -> np.ndarray:
    """The split of every document, 0 = train, 1 = val, 2 = test: int8, shape (n,).

    Documents are joined into units, transitively: the same source group
    (`source_group(source, group_depth)`) or the same near-duplicate cluster (document i
    joins document `labels[i]`, as `cluster` returns them; None: no clusters). Each unit
    goes to one split, fixed by its name alone (the smallest group name among its members):
    x = `_unit_interval(salt + name)` in [0, 1) lands in split 0 if x < f0, 1 if x < f0 + f1,
    else 2. So a unit keeps its split when the rest of the corpus changes, the shares follow
    `fractions` over many units, and another salt reshuffles. Raises TypeError if `sources`
    is one str ("sequence"); ValueError for labels not of shape (n,), bad fractions or depth.
    """
    if isinstance(sources, str):
        raise TypeError("sources must be a sequence of source strings, not one string")
    n = len(sources)
    labels = np.arange(n) if labels is None else np.asarray(labels)
    if labels.shape != (n,):
        raise ValueError(f"labels must have shape ({n},), got {labels.shape}")
    fractions = check_fractions(fractions)
    check_depth(group_depth)
    # BEGIN SOLUTION 2.7
    # DECISION: what a unit is (the transitive closure of same source group and same cluster, so no
    #   leak crosses splits), what names it (the smallest group name), and how a hash of salt + name
    #   picks the split so that a unit keeps it when the corpus changes.
    # HINT: units are connected components again: one UnionFind over the documents, with a
    #   union of each document with the first document of its source group, and of i with
    #   labels[i].
    # HINT: name each unit by the smallest group name among its members; its split is where
    #   `_unit_interval(salt + name)` falls among the edges `np.cumsum(fractions)[:-1]`
    #   (`np.searchsorted(edges, x, side="right")`).
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


def source_group(source: str, depth: int = 2) -> str:
    """The group a source belongs to: its first `depth` path components (0: the source).

    Sources are '/'-separated paths. With depth 2, `test/test_asyncio/test_tasks.py` is in
    group `test/test_asyncio` (the tests of one package travel together) while
    `test/test_os.py` and `asyncio/tasks.py` are their own groups.
    """
    if not isinstance(source, str):
        raise TypeError(f"source must be a str, got {type(source).__name__}")
    check_depth(depth)
    return source if depth == 0 else "/".join(source.split("/")[:depth])


def _unit_interval(name: str) -> float:
    """A number in [0, 1) fixed by `name`: the first 8 bytes of its SHA-256 / 2**64."""
    return int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "big") / 2**64
