"""Where the course's models run, and in what precision (given code, shared by every tool).

One pair of options, with the same names and the same checks on every command line that runs
a model (`course serve`, `course demo`, `course profile`, `python -m solutions.server`, the
benches of stages 04-08):

    --device cpu|cuda           (also cuda:N)                          default cpu
    --dtype float32|float16|bfloat16                                    default float32

    from solutions.device import add_device_arguments, device_from_args
    add_device_arguments(parser)
    args = parser.parse_args()
    device, dtype = device_from_args(args)       # DeviceError (a ValueError) when not possible
    model, tok = load_default(device=device, dtype=dtype)

`resolve_device` refuses `cuda` where torch sees no CUDA device; `resolve_dtype` refuses a
dtype the device cannot compute in (it runs a tiny probe of the model's operations once per
(device, dtype)): bfloat16 and float16 both work on the CPU with torch 2.13 (slowly: the
point is that the reduced-precision path can be tested on a machine without a GPU);
bfloat16 on a GPU needs native support (compute capability 8.0 or newer).
"""

from __future__ import annotations

import argparse
import functools
import re
import sys

import torch

DEVICE_NAMES = ("cpu", "cuda")
DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class DeviceError(ValueError):
    """A device or dtype that is not a known name, or not usable on this machine."""


def dtype_name(dtype: torch.dtype) -> str:
    """torch.bfloat16 -> "bfloat16" (the option's spelling)."""
    return str(dtype).replace("torch.", "")


def resolve_device(name: str | torch.device) -> torch.device:
    """`cpu`, `cuda` or `cuda:N` (or a torch.device) -> a torch.device that exists here.

    `cuda` becomes the current CUDA device with its index (`cuda:0`), so it compares equal to
    the device of the tensors placed on it. DeviceError when the name is not one of those, or
    CUDA (that device index) is not available."""
    text = str(name).strip() if isinstance(name, (str, torch.device)) else None
    if text is None or not re.fullmatch(r"cpu|cuda(:\d+)?", text):
        raise DeviceError(f"--device must be one of {', '.join(DEVICE_NAMES)} (or cuda:N), got {name!r}")
    if text == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        why = ("this torch was built without CUDA" if torch.version.cuda is None
               else f"torch has CUDA {torch.version.cuda} but sees no GPU")
        raise DeviceError(f"--device {text}: CUDA is not available here ({why}, torch {torch.__version__}); "
                          "use --device cpu")
    index = torch.cuda.current_device() if text == "cuda" else int(text.split(":")[1])
    if index >= torch.cuda.device_count():
        raise DeviceError(f"--device {text}: there are only {torch.cuda.device_count()} CUDA device(s) here")
    return torch.device("cuda", index)


def resolve_dtype(name: str | torch.dtype, device: str | torch.device = "cpu") -> torch.dtype:
    """`float32`, `float16` or `bfloat16` (or one of those torch.dtypes) -> the torch.dtype,
    checked to compute on `device` (resolved with `resolve_device` first). DeviceError naming
    the dtype and the device when it does not."""
    if isinstance(name, torch.dtype):
        dtype = name if name in DTYPES.values() else None
    else:
        dtype = DTYPES.get(str(name).strip()) if isinstance(name, str) else None
    if dtype is None:
        raise DeviceError(f"--dtype must be one of {', '.join(DTYPES)}, got {name!r}")
    device = resolve_device(device)
    why = _unsupported(dtype, str(device))
    if why:
        raise DeviceError(f"--dtype {dtype_name(dtype)} is not supported on {device}: {why}")
    return dtype


@functools.cache
def _unsupported(dtype: torch.dtype, device: str) -> str | None:
    """Why the model's operations cannot run in `dtype` on `device` (None: they can)."""
    dev = torch.device(device)
    if dev.type == "cuda" and dtype is torch.bfloat16 and torch.version.hip is None:
        major, minor = torch.cuda.get_device_capability(dev)
        if major < 8:
            return f"{torch.cuda.get_device_name(dev)} (compute capability {major}.{minor}) has no native bfloat16"
    try:  # the operations a decode step runs: embedding, layer norm, linear, attention, softmax
        with torch.no_grad():
            ids, table = torch.tensor([[0, 1]], device=dev), torch.ones(2, 8, dtype=dtype, device=dev)
            x = torch.nn.functional.embedding(ids, table)
            x = torch.nn.functional.layer_norm(x, (8,))
            x = torch.nn.functional.linear(x, torch.ones(8, 8, dtype=dtype, device=dev))
            q = x.view(1, 1, 2, 8)
            y = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
            y = torch.nn.functional.gelu(y, approximate="tanh").float().softmax(-1)
            if not bool(torch.isfinite(y).all()):
                return "a probe computation gave non-finite values"
    except (RuntimeError, TypeError) as e:  # torch: "not implemented for 'BFloat16'", no kernel for the backend
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return None


def add_device_arguments(parser: argparse.ArgumentParser, *, device: str = "cpu", dtype: str = "float32") -> None:
    """Add `--device` and `--dtype` (strings; `device_from_args` checks them) to `parser`."""
    parser.add_argument("--device", default=device, metavar="cpu|cuda",
                        help=f"where the model runs: cpu or cuda (cuda:N for another GPU; default {device})")
    parser.add_argument("--dtype", default=dtype, metavar="|".join(DTYPES),
                        help=f"the model's weights, activations and KV cache: {', '.join(DTYPES)} "
                             f"(default {dtype}; bfloat16 works on the CPU too, slowly)")


def device_from_args(args) -> tuple[torch.device, torch.dtype]:
    """(device, dtype) of parsed `--device` / `--dtype` options; DeviceError when not usable."""
    device = resolve_device(args.device)
    return device, resolve_dtype(args.dtype, device)


def device_or_exit(args) -> tuple[torch.device, torch.dtype]:
    """`device_from_args`, for a command line: a DeviceError prints `error: ...` on stderr
    and exits with status 2 (no traceback)."""
    try:
        return device_from_args(args)
    except DeviceError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None



# ---- where a reduced-precision run must give float32's greedy tokens ------------------------

def greedy_margins(model, prompt: list[int], tokens: list[int]) -> list[float]:
    """For each of `tokens` (a greedy continuation of `prompt`), `model`'s top-1 minus top-2
    logit at the position that chose it, in float32 (one full forward over prompt + tokens).

    A run in another precision moves every logit by some error e; greedy can only choose
    differently where this margin is below 2e. So two precisions must agree token for token
    up to the first position whose margin is that small (`must_agree`), and need not after
    it: once one token differs, the two continuations have different contexts."""
    if not tokens:
        return []
    weight = model.transformer.wte.weight
    seq = torch.tensor([list(prompt) + list(tokens)[:-1]], device=weight.device)
    with torch.no_grad():
        logits = model(seq)[0, len(prompt) - 1:].float()
    top = logits.topk(2, dim=-1).values
    return (top[:, 0] - top[:, 1]).tolist()


def must_agree(margins: list[float], tolerance: float) -> int:
    """How many leading tokens must agree: the index of the first margin below `tolerance`
    (len(margins) when none is)."""
    return next((i for i, m in enumerate(margins) if m < tolerance), len(margins))
