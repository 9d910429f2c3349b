# GENERATED from solutions/autograd/data.py by `course stubs --write`.
# Nothing to write here: given code of stage 01 (01_autograd/01_autograd.ipynb).
"""Data for the stage's classifier: interleaved spirals (given code)."""

from __future__ import annotations

import numpy as np

from solutions.checks import check_int, is_number


def make_spirals(n_per_class: int = 100, n_classes: int = 3, noise: float = 0.2,
                 rng: np.random.Generator | int | None = 0) -> tuple[np.ndarray, np.ndarray]:
    """Interleaved 2-D spirals: X (N, 2) float32 in about [-1, 1], y (N,) int64 class ids.

    Class c's points sweep out one arm: radius r in [0, 1], angle 4r + 2 pi c / n_classes,
    plus Gaussian noise on the angle. No straight line separates them: a good first test
    that a network learns a non-linear boundary.
    """
    check_int("n_per_class", n_per_class, 1)
    check_int("n_classes", n_classes, 2)
    if not is_number(noise) or noise < 0:
        raise ValueError(f"noise must be a number >= 0, got {noise!r}")
    rng = np.random.default_rng(rng)
    r = np.tile(np.linspace(0.0, 1.0, n_per_class), n_classes)
    y = np.repeat(np.arange(n_classes), n_per_class)
    angle = 4.0 * r + 2 * np.pi * y / n_classes + rng.normal(0.0, noise, r.shape)
    X = np.stack([r * np.sin(angle), r * np.cos(angle)], axis=1)
    return X.astype(np.float32), y.astype(np.int64)
