"""Argument checks shared by every stage: one wording for one rule.

    is_int(v)                      a Python or NumPy integer, never a bool
    is_number(v)                   a finite int or float, never a bool
    check_int(name, v, minimum=0, maximum=None) -> int
    check_ints(minimum, name=value, ...)        several at once, same lower bound
    ArgumentParser                 argparse whose refusals read `error: <what>` (exit 2)

A failed check raises ``ValueError("<name> must be an int >= <minimum>, got <value!r>")``
(or ``... an int in <minimum>..<maximum>``), the message every stage's tests and CLIs use.
"""

from __future__ import annotations

import argparse
import math
import numbers
import sys
from typing import TypeGuard

__all__ = ["is_int", "is_number", "check_int", "check_ints", "ArgumentParser"]


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but every refusal reads `error: <what is wrong>` (exit 2) with the usage
    first: the command lines of every stage (dedup, train, server) refuse alike."""

    def error(self, message: str):
        self.print_usage(sys.stderr)
        self.exit(2, f"error: {message}\n")


def is_int(value: object) -> TypeGuard[int]:
    """A Python or NumPy integer (np.int64 ids are as good as ints), never a bool."""
    if type(value) is int:  # the common case first: an ABC check costs ~0.4 us, a prompt has thousands
        return True
    return (isinstance(value, numbers.Integral) and not isinstance(value, bool)
            and type(value).__name__ != "bool_")


def is_number(value: object) -> TypeGuard[float]:
    """A finite int or float (NumPy scalars included), never a bool."""
    return (isinstance(value, numbers.Real) and not isinstance(value, bool)
            and type(value).__name__ != "bool_" and math.isfinite(value))


def check_int(name: str, value, minimum: int = 0, maximum: int | None = None) -> int:
    """`value` as an int, if it is an integer in minimum..maximum; else a ValueError naming `name`."""
    if not is_int(value) or value < minimum or (maximum is not None and value > maximum):
        want = f"an int >= {minimum}" if maximum is None else f"an int in {minimum}..{maximum}"
        raise ValueError(f"{name} must be {want}, got {value!r}")
    return int(value)


def check_ints(minimum: int, **values) -> None:
    """`check_int` for each keyword, in order: ``check_ints(1, num_blocks=n, block_size=b)``."""
    for name, value in values.items():
        check_int(name, value, minimum)
