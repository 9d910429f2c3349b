# GENERATED from solutions/dedup/splits.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 02_data_dedup/02_data_dedup.ipynb. Exercises in this file (line of each hole, then the commands):
#   2.7 Splits without leakage: line 39; `course check 2.7`, `course hint 2.7`
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
    raise NotImplementedError('Exercise 2.7: Splits without leakage — see 02_data_dedup.ipynb')


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
