# GENERATED from solutions/dedup/quality.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 02_data_dedup/02_data_dedup.ipynb. Exercises in this file (line of each hole, then the commands):
#   2.1 Normalisation and quality filters: line 34; `course check 2.1`, `course hint 2.1`
"""Quality filters (exercise 2.1): why a document is not worth training on, in one word."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from solutions.checks import is_int, is_number

from .hashing import _codepoints


def quality_reason(text: str, config: QualityConfig | None = None) -> str | None:
    """The first bound of `config` that `text` (already normalised) fails, or None.

    Returns one of `QUALITY_REASONS`, checked in that order (see `QualityConfig`), so a
    dropped document is counted once, under one name. Every bound is inclusive: exactly
    `min_chars` or `max_chars` characters, or a line of exactly `max_line_chars` (lines
    split at "\\n", counted without it), passes. With `min_chars=0` the empty text passes.
    Shares are over all characters: control characters are the code points below 32 other
    than tab and newline, and 127-159; letters are what `str.isalpha` accepts (non-ASCII
    ones too). A share below its bound fails; equal to it passes. `config=None` means
    `QualityConfig()`. Raises TypeError if `text` is not a str or `config` not a QualityConfig.
    """
    if not isinstance(text, str):
        raise TypeError(f"quality_reason expects a str, got {type(text).__name__}")
    config = QualityConfig() if config is None else config
    if not isinstance(config, QualityConfig):
        raise TypeError(f"config must be a QualityConfig, got {type(config).__name__}")
    raise NotImplementedError('Exercise 2.1: Normalisation and quality filters — see 02_data_dedup.ipynb')


@dataclass(frozen=True)
class QualityConfig:
    """Bounds a document must meet to be kept (checked in this order, first failure wins).

    - `too_short`: fewer than `min_chars` characters (stubs, empty `__init__.py` files);
    - `too_long`: more than `max_chars` characters (generated tables, data dumps);
    - `not_printable`: the share of printable characters (everything but control
      characters; tab and newline count as printable) is below `min_printable`;
    - `long_line`: a line longer than `max_line_chars` (minified or generated data);
    - `few_letters`: the share of letters is below `min_letters` (number tables, hex dumps).
    """

    min_chars: int = 100
    max_chars: int = 500_000
    min_printable: float = 0.98
    max_line_chars: int = 1_000
    min_letters: float = 0.25

    def __post_init__(self) -> None:
        for name in ("min_chars", "max_chars", "max_line_chars"):
            v = getattr(self, name)
            if not is_int(v) or v < 0:
                raise ValueError(f"QualityConfig.{name} must be a non-negative int, got {v!r}")
        if self.min_chars > self.max_chars:
            raise ValueError(f"QualityConfig.min_chars ({self.min_chars}) > max_chars ({self.max_chars})")
        for name in ("min_printable", "min_letters"):
            v = getattr(self, name)
            if not is_number(v) or not 0.0 <= v <= 1.0:
                raise ValueError(f"QualityConfig.{name} must be a share in [0, 1], got {v!r}")


QUALITY_REASONS = ("too_short", "too_long", "not_printable", "long_line", "few_letters")

# Named sets of bounds. `code` is the course's corpus (Python sources and pydoc topics): a
# line over 1,000 characters there is generated data. Prose is often written one paragraph
# per line, so `text` allows lines as long as a document and wants more letters instead.
QUALITY_PROFILES: dict[str, QualityConfig] = {
    "code": QualityConfig(),
    "text": QualityConfig(min_chars=50, max_line_chars=500_000, min_letters=0.5),
}
PROFILE_HELP = {
    "code": "source code (the course's corpus): 100..500,000 characters, lines of at most 1,000 "
            "characters, >= 98% printable, >= 25% letters",
    "text": "prose (one paragraph per line is fine): 50..500,000 characters, no line limit below the "
            "document's, >= 98% printable, >= 50% letters",
}


def quality_profile(name: str) -> QualityConfig:
    """The named quality bounds: `"code"` (the default) or `"text"` (see QUALITY_PROFILES)."""
    if name not in QUALITY_PROFILES:
        raise ValueError(f"profile must be one of {sorted(QUALITY_PROFILES)}, got {name!r}")
    return QUALITY_PROFILES[name]


def profile_name(config: QualityConfig) -> str:
    """The name of the profile `config` equals, or "custom" (shown in the report)."""
    return next((name for name, prof in QUALITY_PROFILES.items() if prof == config), "custom")
