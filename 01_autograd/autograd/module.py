# GENERATED from solutions/autograd/module.py by `course stubs --write`.
# Nothing to write here: given code of stage 01 (01_autograd/01_autograd.ipynb).
"""Module: a container of parameters, like `torch.nn.Module`, much reduced (given code)."""

from __future__ import annotations

from collections.abc import Iterator

from .tensor import Tensor


class Module:
    """A container of parameters, like `torch.nn.Module`, much reduced.

    `parameters()` finds every Tensor attribute that requires grad, and those of every
    Module attribute (or list/tuple of Modules), depth first in the order the attributes
    were set, each once. Calling a module calls its `forward`.
    """

    def parameters(self) -> Iterator[Tensor]:
        seen: set[int] = set()
        for p in self._walk():
            if id(p) not in seen:
                seen.add(id(p))
                yield p

    def _walk(self) -> Iterator[Tensor]:
        for value in vars(self).values():
            items = value if isinstance(value, (list, tuple)) else (value,)
            for item in items:
                if isinstance(item, Tensor) and item.requires_grad:
                    yield item
                elif isinstance(item, Module):
                    yield from item._walk()

    def zero_grad(self) -> None:
        for p in self.parameters():
            p.zero_grad()

    def forward(self, *args: object) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *args: object) -> Tensor:
        return self.forward(*args)
