# GENERATED from solutions/kv_cache/calibrated_quant.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 04_kv_cache/04_kv_cache.ipynb. Exercises in this file (line of each hole, then the commands):
#   4.10 AWQ: activation-aware INT4 scales: line 37; `course check 4.10`, `course hint 4.10`
"""Exercise 4.10: AWQ, activation-aware scales for INT4 weights (Lin et al., arXiv:2306.00978)."""

from __future__ import annotations

import torch
from torch import nn

from solutions.checks import check_int

from .quant_linear import quantize_model
from .weight_quant import dequantize_int4, quantize_int4


def awq_search(weight: torch.Tensor, x: torch.Tensor, group_size: int = 32,
               grid: int = 20) -> tuple[torch.Tensor, float]:
    """AWQ's per-input-channel scales for one Linear's INT4 weight (Lin et al., 2023).

    Args: weight (out, in) floating (not modified); x (N, in) the layer's inputs on
    calibration data; group_size the INT4 group width (divides in); grid >= 1 candidates.
    Returns: (s, alpha), s (in,) float32 and alpha a float: of the candidates below, the one
    whose quantised layer's OUTPUT on x is closest to the float layer's (not the one whose
    weight is closest); on equal errors the smaller alpha.
    Definitions (the tests compare with them):
      a        mean |x| over the N rows, per input channel, float32, clamped to >= 1e-4;
      s_alpha  a ** alpha / sqrt(max(a ** alpha) * min(a ** alpha)), for each alpha =
               k / grid, k = 0 .. grid-1 (alpha 0 is s = 1: round-to-nearest, RTN);
      Wq(s)    dequantize_int4(quantize_int4(weight * s, group_size), group_size) / s:
               column j scaled by s[j] before rounding, and back after;
      err(s)   mean((x @ weight.T - x @ Wq(s).T) ** 2), over all N x out entries.
    So the result's error on x never exceeds RTN's.
    Raises: TypeError, ValueError for bad shapes, group_size or grid (given).
    """
    _check_awq(weight, x, group_size, grid)
    raise NotImplementedError('Exercise 4.10: AWQ: activation-aware INT4 scales — see 04_kv_cache.ipynb')


# ---- given: collect each layer's inputs, quantise a whole model with AWQ -----------------

def layer_inputs(model: nn.Module, ids: torch.Tensor, names: list[str]) -> dict[str, torch.Tensor]:
    """{name: (N, in) float32}: the inputs that the Linear layers `names` of `model` see when
    it runs the calibration batch `ids` (B, T) (N = B * T rows), collected by forward hooks
    on the unquantised model, as AWQ does."""
    got: dict[str, list[torch.Tensor]] = {n: [] for n in names}
    hooks = [model.get_submodule(n).register_forward_pre_hook(
        lambda mod, args, n=n: got[n].append(args[0].detach().reshape(-1, args[0].shape[-1]).float()))
        for n in names]
    try:
        with torch.no_grad():
            model(ids)
    finally:
        for h in hooks:
            h.remove()
    return {n: torch.cat(v) for n, v in got.items()}


def awq_quantize(model: nn.Module, calibration: torch.Tensor, group_size: int = 32, grid: int = 20,
                 skip: tuple[str, ...] = ("lm_head",)) -> tuple[nn.Module, dict[str, float]]:
    """(a NEW INT4 model with AWQ scales, {layer name: chosen alpha}). `calibration` (B, T)
    token ids, from the TRAIN split (never the data the model is evaluated on). Every
    nn.Linear but `skip` gets `awq_search`'s scales on its own inputs; the scales live in the
    QuantLinear's `input_scale` (AWQ folds them into the previous operation where it can;
    here the layer divides by them itself). `model` is left as it was."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch nn.Module, got {type(model).__name__}")
    if not isinstance(calibration, torch.Tensor) or calibration.dim() != 2 or calibration.is_floating_point():
        raise ValueError("calibration must be a (batch, time) tensor of token ids")
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear) and n not in skip]
    inputs = layer_inputs(model, calibration, names)
    scales, alphas = {}, {}
    for n in names:
        scales[n], alphas[n] = awq_search(model.get_submodule(n).weight.detach(), inputs[n], group_size, grid)
    return quantize_model(model, 4, group_size, skip=skip, input_scales=scales), alphas


def _check_awq(weight, x, group_size, grid) -> None:
    """awq_search's argument checks (given)."""
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2 or not weight.is_floating_point():
        raise TypeError("weight must be a 2-D floating tensor (out_features, in_features)")
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.shape[1] != weight.shape[1] or not x.shape[0]:
        shown = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"x must be (N >= 1, in_features={weight.shape[1]}) calibration inputs, got {shown}")
    check_int("grid", grid, 1)
    check_int("group_size", group_size, 1)
