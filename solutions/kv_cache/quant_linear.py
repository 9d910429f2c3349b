"""Exercise 4.9: `QuantLinear` — an nn.Linear stored as INT8 or INT4, dequantised on the fly."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from solutions.checks import check_int

from .int8_cache import dequantize_int8, quantize_int8
from .weight_quant import dequantize_int4, quantize_int4


def quantize_weight(weight: torch.Tensor, bits: int, group_size: int = 32):
    """A Linear's weight (out, in) float -> (qweight, scale, zero): bits 8: 4.4's
    `quantize_int8` of the weight, one scale per OUTPUT channel (row, over the input dim),
    int8 (out, in) and float32 (out, 1), zero None; bits 4: `quantize_int4(weight, group_size)`."""
    # BEGIN SOLUTION 4.9
    # DECISION: which axis a weight's scale runs over (one per output channel), and on the INT8 path
    #   which operand carries the input scale (x divided, not the weight), with leading dims
    #   flattened for the kernel.
    # HINT: quantize_int8 works over the LAST dim, and a weight's row is one output channel.
    if bits == 8:
        return (*quantize_int8(weight.float()), None)
    return quantize_int4(weight.float(), group_size)
    # END SOLUTION


class QuantLinear(nn.Module):
    """Weight-only quantised stand-in for `linear` (an nn.Linear): forward(x) ~ linear(x).

    Buffers (no parameters): `qweight`, `scale`, `zero` = `quantize_weight(weight * s, bits,
    group_size)`; `bias`, a float32 copy of linear's or None; `input_scale` s (in,) float32 or
    None (then s = 1): AWQ's per-input-channel factor (4.10) — column j is quantised times
    s[j], and `dequantize()` divides it back out. `dequantize(dtype)`: the (out, in) weight
    the layer computes with. forward: x (..., in) floating -> (..., out), x's dtype: the
    layer with that weight and the bias, the weight dequantised at every call — except where
    the given __init__ set `self.use_kernel` (bits 8, the kernel runs here, a width it
    handles): then the same layer by the fused `int8_matmul` of the stored int8 weight, never
    dequantised (bfloat16 inside the kernel). `linear` itself is never modified. Bad input:
    ValueError.
    """

    def __init__(self, linear: nn.Linear, bits: int = 8, group_size: int = 32,
                 input_scale: torch.Tensor | None = None, use_kernel: bool = True):
        super().__init__()
        _check_quant_linear(linear, bits, group_size, input_scale)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.bits, self.group_size = bits, group_size
        # the fused INT8 kernel, where it runs and only for widths it handles (see int8_matmul)
        self.use_kernel = bool(use_kernel and bits == 8 and linear.in_features % KERNEL_WIDTH == 0
                               and int8_kernel_available())
        weight = linear.weight.detach().float()
        if input_scale is not None:
            input_scale = input_scale.detach().float().clone()
            weight = weight * input_scale
        self.register_buffer("input_scale", input_scale)
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().float().clone())
        qweight, scale, zero = quantize_weight(weight, bits, group_size)
        self.register_buffer("qweight", qweight)
        self.register_buffer("scale", scale)
        self.register_buffer("zero", zero)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The (out, in) weight this layer computes with, as `dtype` (a new tensor)."""
        # BEGIN SOLUTION 4.9
        # HINT: 4.4's dequantize_int8 or 4.8's dequantize_int4, in float32; then undo the
        #   input scale (divide column j by input_scale[j]) if there is one; cast last.
        if self.bits == 8:
            w = dequantize_int8(self.qweight, self.scale)
        else:
            w = dequantize_int4(self.qweight, self.scale, self.zero, self.group_size)
        if self.input_scale is not None:
            w = w / self.input_scale
        return w.to(dtype)
        # END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # BEGIN SOLUTION 4.9
        # HINT: The general path is F.linear with the dequantised weight (in x's dtype) and
        #   the bias. The kernel's weight is the stored one, weight * s: which operand must
        #   undo s there, when the weight cannot be touched?
        # HINT: The INT8 kernel takes x as (M, in): flatten the leading dims, and divide x
        #   (not the weight) by the input scale there; add the bias, restore the shape.
        if self.use_kernel:
            lead = x.shape[:-1]
            x2 = x.reshape(-1, self.in_features)
            if self.input_scale is not None:
                x2 = x2 / self.input_scale.to(x.dtype)
            y = int8_matmul(x2, self.qweight, self.scale).to(x.dtype)
            if self.bias is not None:
                y = y + self.bias.to(x.dtype)
            return y.reshape(*lead, self.out_features)
        bias = None if self.bias is None else self.bias.to(x.dtype)
        return F.linear(x, self.dequantize(x.dtype), bias)
        # END SOLUTION

    def weight_bytes(self) -> int:
        """Bytes of what this layer stores for its weight: qweight, scale, zero, input_scale
        (the bias is not counted: it is not quantised)."""
        return sum(t.numel() * t.element_size() for t in (self.qweight, self.scale, self.zero, self.input_scale)
                   if t is not None)

    def extra_repr(self) -> str:
        group = f", group_size={self.group_size}" if self.bits == 4 else ""
        awq = ", input_scale" if self.input_scale is not None else ""
        return f"in_features={self.in_features}, out_features={self.out_features}, bits={self.bits}{group}{awq}"


# ---- given: the fused INT8 kernel, whole-model quantisation, byte counts ------------------

_KERNEL: list[bool] = []
KERNEL_WIDTH = 32  # in_features must be a multiple: see int8_matmul


def int8_kernel_available() -> bool:
    """Whether this PyTorch build runs `torch._weight_int8pack_mm` (x (M, K) @ int8 (N, K).T
    times per-row scales (N,)) on the CPU: the build must have a CPU kernel for it (asked of
    torch's dispatcher, not by catching its error), and that kernel must get a tiny case right.
    Checked once."""
    if not _KERNEL:
        op = "aten::_weight_int8pack_mm"
        ok = hasattr(torch, "_weight_int8pack_mm") and torch._C._dispatch_has_kernel_for_dispatch_key(op, "CPU")
        if ok:
            x, q = torch.ones(2, KERNEL_WIDTH, dtype=torch.bfloat16), torch.ones(4, KERNEL_WIDTH, dtype=torch.int8)
            y = torch._weight_int8pack_mm(x, q, torch.full((4,), 0.5, dtype=torch.bfloat16))
            ok = bool(torch.equal(y.float(), torch.full((2, 4), KERNEL_WIDTH / 2)))
        _KERNEL.append(ok)
    return _KERNEL[0]


def int8_matmul(x: torch.Tensor, qweight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x (M, K) @ (qweight * scale).T with the fused kernel: (M, N) bfloat16. The int8 weight
    is read as int8 and widened inside the kernel; no float copy of it is made. x and the
    scales go in as bfloat16: on the CPU the kernel's float32 path is a slow reference loop
    (bench.py measures both), its bfloat16 path the fast one. With torch 2.13.0+cpu on the
    course machine (AMD EPYC, AVX-512) that path returned garbage or crashed the process for
    K not a multiple of 16, and was right for every K multiple of 32 tried (N 1..1000, M
    1..300): QuantLinear uses it only for in_features a multiple of KERNEL_WIDTH."""
    return torch._weight_int8pack_mm(x.to(torch.bfloat16).contiguous(), qweight,
                                     scale.reshape(-1).to(torch.bfloat16))


def quantize_model(model: nn.Module, bits: int = 8, group_size: int = 32, *, skip: tuple[str, ...] = ("lm_head",),
                   input_scales: dict[str, torch.Tensor] | None = None, use_kernel: bool = True) -> nn.Module:
    """A NEW model (a deep copy; `model` is left as it was) whose every nn.Linear, except the
    ones named in `skip`, is a `QuantLinear(bits, group_size)`. The GPT's `lm_head` is skipped
    by default: its weight IS the token embedding (tied), so quantising it would store the
    matrix twice. `input_scales` {layer name: (in,) tensor} gives AWQ's scales (4.10).
    Bad input: a model that is not an nn.Module (TypeError), bits not 4 or 8, a group_size
    not dividing a layer's width, a scale for a layer that is not quantised (ValueError)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch nn.Module, got {type(model).__name__}")
    _check_bits(bits)
    input_scales = dict(input_scales or {})
    new = copy.deepcopy(model)
    targets = [(name, m) for name, m in new.named_modules() if isinstance(m, nn.Linear) and name not in skip]
    unknown = sorted(set(input_scales) - {name for name, _ in targets})
    if unknown:
        raise ValueError(f"input_scales names layers that are not quantised Linear layers of the model: {unknown}")
    for name, linear in targets:
        parent_name, _, attr = name.rpartition(".")
        parent = new.get_submodule(parent_name) if parent_name else new
        try:
            q = QuantLinear(linear, bits, group_size, input_scales.get(name), use_kernel=use_kernel)
        except ValueError as e:
            raise ValueError(f"layer {name}: {e}") from None
        setattr(parent, attr, q)
    return new.eval()


def weight_bytes(model: nn.Module) -> dict[str, int]:
    """{"linear": bytes the Linear layers store for their weights (a QuantLinear's
    `weight_bytes()`, an nn.Linear's weight unless it is an embedding's too: the tied head),
    "total": every parameter and buffer of the model, each tensor counted once}."""
    embedded = {m.weight.data_ptr() for m in model.modules() if isinstance(m, nn.Embedding)}
    linear = sum(m.weight_bytes() if isinstance(m, QuantLinear) else m.weight.numel() * m.weight.element_size()
                 for m in model.modules() if isinstance(m, QuantLinear)
                 or (isinstance(m, nn.Linear) and m.weight.data_ptr() not in embedded))
    total, counted = 0, set()
    for t in [*model.parameters(), *model.buffers()]:
        if t.data_ptr() not in counted:
            counted.add(t.data_ptr())
            total += t.numel() * t.element_size()
    return {"linear": linear, "total": total}


def _check_bits(bits) -> None:
    if isinstance(bits, bool) or bits not in (4, 8):
        raise ValueError(f"bits must be 4 or 8, got {bits!r}")


def _check_quant_linear(linear, bits, group_size, input_scale) -> None:
    """QuantLinear's argument checks (given)."""
    if not isinstance(linear, nn.Linear):
        raise ValueError(f"linear must be a torch nn.Linear, got {type(linear).__name__}")
    _check_bits(bits)
    check_int("group_size", group_size, 1)
    if bits == 4:
        if linear.in_features % group_size:
            raise ValueError(f"group_size must divide in_features ({linear.in_features}), got {group_size}")
        if linear.in_features % 2:
            raise ValueError(f"in_features must be even to pack two INT4 values per byte, got {linear.in_features}")
    if input_scale is not None:
        if not isinstance(input_scale, torch.Tensor) or tuple(input_scale.shape) != (linear.in_features,):
            shown = tuple(input_scale.shape) if isinstance(input_scale, torch.Tensor) else type(input_scale).__name__
            raise ValueError(f"input_scale must be a tensor of shape ({linear.in_features},), got {shown}")
        if not bool(torch.isfinite(input_scale).all()) or not bool((input_scale > 0).all()):
            raise ValueError("input_scale must be finite and > 0 in every channel")
