"""Argument checks of stage 02, in its wording, on top of the shared `solutions.checks`.

The stage's messages say "a positive int" (>= 1) and "a non-negative int" (>= 0); its
tests match those words, so the checks here keep them and leave the type test to
`solutions.checks.is_int` / `is_number`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from solutions.checks import is_int, is_number


def positive_int(name: str, value: object) -> int:
    """`value` as an int if it is an integer >= 1 (never a bool); else ValueError naming `name`."""
    if not is_int(value) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def non_negative_int(name: str, value: object) -> int:
    """`value` as an int if it is an integer >= 0 (never a bool); else ValueError naming `name`."""
    if not is_int(value) or value < 0:
        raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    return int(value)


def check_threshold(threshold: object) -> None:
    """A Jaccard threshold: a number strictly between 0 and 1."""
    if not is_number(threshold) or not 0.0 < float(threshold) < 1.0:
        raise ValueError(f"threshold must be a number strictly between 0 and 1, got {threshold!r}")


def check_weights(weights: object) -> None:
    """LSH weights: two non-negative numbers (false positives, false negatives), not both 0."""
    if (not isinstance(weights, (tuple, list)) or len(weights) != 2
            or any(not is_number(w) or w < 0 for w in weights) or sum(weights) <= 0):
        raise ValueError(f"weights must be two non-negative numbers (fp, fn), not both zero, got {weights!r}")


def check_fractions(fractions: Sequence[float]) -> np.ndarray:
    """Split fractions: three non-negative shares summing to 1, as a float64 array."""
    try:
        arr = np.asarray(fractions, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"fractions must be three numbers, got {fractions!r}") from None
    if arr.shape != (3,) or np.any(arr < 0) or not np.isclose(arr.sum(), 1.0):
        raise ValueError(f"fractions must be three non-negative shares summing to 1, got {fractions!r}")
    return arr


def check_depth(depth: object) -> None:
    """A source-group depth: an int >= 0 (0: every source is its own group)."""
    if not is_int(depth) or depth < 0:
        raise ValueError(f"group depth must be a non-negative int, got {depth!r}")
