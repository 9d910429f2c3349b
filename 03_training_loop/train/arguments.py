# GENERATED from solutions/train/arguments.py by `course stubs --write`.
# Nothing to write here: given code of stage 03 (03_training_loop/03_training_loop.ipynb).
"""Argument checks of this stage that `solutions.checks` does not have: positive numbers."""

from __future__ import annotations


def check_positive(**values: float) -> None:
    """Each keyword an int or float > 0 (inf allowed; bools, NaN and non-numbers are not), else
    ``ValueError("<name> must be a positive number, got <value!r>")``. Integer counts use
    `solutions.checks.check_int` instead."""
    for name, v in values.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise ValueError(f"{name} must be a positive number, got {v!r}")
