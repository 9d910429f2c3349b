"""Fixtures for the stage-02 tests: planted near-duplicates with exactly known Jaccard."""

from __future__ import annotations

import itertools

import numpy as np
import pytest


def _word_5grams(words: list[str]) -> set[str]:
    return {" ".join(words[i:i + 5]) for i in range(len(words) - 4)}


def _jaccard(a: set, b: set) -> float:
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


class Planted:
    """Base documents of random words plus edited copies at chosen Jaccard levels.

    Replacing a word by a fresh one changes the 5 word-5-grams that contain it; edits are
    spaced at least 5 words apart, so k edits leave J = (S - 5k) / (S + 5k) for S shingles.
    `truth` holds every pair (i < j) whose exact word-5-gram Jaccard is >= threshold,
    computed by brute force over all pairs; `sims` the exact Jaccard of every pair.
    """

    def __init__(self, n_base: int, n_words: int, levels: tuple[float, ...], threshold: float, seed: int):
        rng = np.random.default_rng(seed)
        codes = rng.integers(ord("a"), ord("z") + 1, size=(30000, 8))
        lengths = rng.integers(3, 9, size=30000)
        vocab = sorted({"".join(map(chr, row[:n])) for row, n in zip(codes.tolist(), lengths.tolist())})
        fresh = (f"zq{i}x" for i in itertools.count())
        self.words: list[list[str]] = []
        self.base_of: list[int] = []
        self.level_of: list[float] = []
        n_shingles = n_words - 4
        for b in range(n_base):
            base = list(rng.choice(vocab, n_words))
            self.words.append(base)
            self.base_of.append(b)
            self.level_of.append(1.0)
            for level in levels:
                k = round(n_shingles * (1 - level) / (5 * (1 + level)))
                places = rng.choice(np.arange(2, n_words - 2, 6), size=k, replace=False)
                copy = list(base)
                for p in places:
                    copy[p] = next(fresh)
                self.words.append(copy)
                self.base_of.append(b)
                self.level_of.append(level)
        self.texts = [self._layout(w, rng) for w in self.words]
        self.ids = [f"doc{i}" for i in range(len(self.texts))]
        sets = [_word_5grams(w) for w in self.words]
        self.sims = {}
        for i, j in itertools.combinations(range(len(sets)), 2):
            self.sims[(i, j)] = _jaccard(sets[i], sets[j])
        self.truth = {p for p, s in self.sims.items() if s >= threshold}
        self.sets = sets

    @staticmethod
    def _layout(words: list[str], rng) -> str:
        """Words with line breaks and indentation, so that whitespace is not one kind."""
        lines, i = [], 0
        while i < len(words):
            step = int(rng.integers(6, 14))
            lines.append("    " * int(rng.integers(0, 3)) + " ".join(words[i:i + step]))
            i += step
        return "\n".join(lines)


@pytest.fixture(scope="session")
def planted() -> Planted:
    """30 bases x (1 + 4 copies) of 400 words; copies at J ~ 0.97, 0.92, 0.7, 0.45 to their base."""
    return Planted(n_base=30, n_words=400, levels=(0.97, 0.92, 0.7, 0.45), threshold=0.85, seed=7)
