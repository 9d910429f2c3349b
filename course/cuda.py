"""Whether this machine has CUDA: asked once a process, torch imported only when asked.

The pytest plugin skips `gpu` tests without it, and scoring leaves those skips out of the
count (`course.scoring`); both ask here, so they never disagree."""

from __future__ import annotations

_HAS_CUDA: bool | None = None


def has_cuda() -> bool:
    """torch sees a CUDA device (False when torch is missing or broken)."""
    global _HAS_CUDA
    if _HAS_CUDA is None:
        try:
            import torch

            _HAS_CUDA = bool(torch.cuda.is_available())
        except Exception:
            _HAS_CUDA = False
    return _HAS_CUDA
