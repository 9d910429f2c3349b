"""`weightless()`: modules built inside it hold no weights of their own and run no random
initialisation, for a state dict to be assigned next (`load_state_dict(sd, assign=True)`), so
that loading a model costs the stored weights once (given code, shared by the loaders of the
course's GPT and of a Llama GGUF file).

    with weightless():
        model = GPT(config)                      # every parameter on the meta device
    model.load_state_dict(sd, assign=True)       # the stored tensors become the parameters

Why not `with torch.device("meta")` alone: the modules still run their initialisers on the
meta tensors, and `normal_` on a meta tensor imports `torch._dynamo` (torch 2.13: its meta
kernel is a Python reference behind `torch._disable_dynamo`). That import took 1.6-2.1 s of
CPU here, on this two-core machine, in every process that loaded a checkpoint and needed no
compiler: each `course check` of stages 03-08, each graded test process, each bench. Built
inside `weightless()`, the course's GPT takes 12 ms and SmolLM2's Llama 0.13 s, and
`torch._dynamo` stays unimported (tests/test_weightless.py)."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch.overrides import TorchFunctionMode

# torch.nn.init's random initialisers and the in-place fills they call
_INITIALISERS = frozenset({"normal_", "uniform_", "trunc_normal_", "kaiming_normal_", "kaiming_uniform_",
                           "xavier_normal_", "xavier_uniform_", "orthogonal_", "sparse_"})


class _NoInitOnMeta(TorchFunctionMode):
    """A random initialiser called on a meta tensor returns the tensor as it is (there is
    nothing to fill); every other call, and every call on real data, runs as usual."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__name__", "") in _INITIALISERS:
            tensor = args[0] if args else kwargs.get("tensor")
            if isinstance(tensor, torch.Tensor) and tensor.is_meta:
                return tensor
        return func(*args, **kwargs)


@contextmanager
def weightless() -> Iterator[None]:
    """Tensors created inside are on the meta device (no memory), and random initialisers on
    them do nothing. Assign real weights before use: a meta parameter has no data."""
    with torch.device("meta"), _NoInitOnMeta():
        yield
