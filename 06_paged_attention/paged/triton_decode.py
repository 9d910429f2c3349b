# GENERATED from solutions/paged/triton_decode.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 06_paged_attention/06_paged_attention.ipynb. Exercises in this file (line of each hole, then the commands):
#   6.5 A Triton paged-decode kernel: lines 40, 70; `course check 6.5`, `course hint 6.5`
"""The Triton paged-decode kernel (6.5): decode attention straight from the pools, no gather."""

from __future__ import annotations

import os

import torch

from .attention import _check_paged_args

try:  # Triton is optional: the dev extra installs it on Linux x86-64
    import triton
    import triton.language as tl

    HAS_TRITON = True
except Exception:  # pragma: no cover - depends on the platform
    triton = tl = None
    HAS_TRITON = False


def _paged_decode_kernel(out_ptr, q_ptr, k_ptr, v_ptr, bt_ptr, seq_lens_ptr, scale,
                         stride_qb, stride_qh, stride_kblock, stride_ktok, stride_khead,
                         stride_btb, stride_ob, stride_oh,
                         HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                         BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr, GROUP: tl.constexpr):
    """Decode attention for one (sequence b, head h) = (tl.program_id(0), tl.program_id(1)),
    launched on grid (B, H). Writes out[b, h] (HEAD_DIM values, in out's dtype) =
    softmax(q[b, h] . K^T * scale) V over the seq_lens[b] cached tokens of row b, whose token
    t lives in slot t % BLOCK_SIZE of block block_table[b, t // BLOCK_SIZE] of the pools'
    head h // GROUP (GROUP query heads share a K/V head: grouped-query attention; 1: none).
    Invariants: fp32 arithmetic; the pools are read block by block in place (nothing of
    size seq_len is materialised, nothing is gathered); a slot at or past seq_len is never
    loaded (it may hold a previous owner's data or NaN); lanes past BLOCK_SIZE / HEAD_DIM
    (BLOCK_T, BLOCK_D: powers of two >= them, as tl.arange needs) are masked; a block id
    (the table may be int32) is int64 before it multiplies a stride, since offsets in a pool
    of more than 2**31 elements pass int32."""
    raise NotImplementedError('Exercise 6.5: A Triton paged-decode kernel — see 06_paged_attention.ipynb')


def paged_decode_triton(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, block_tables: torch.Tensor,
                        q_pos: torch.Tensor, *, scale: float | None = None) -> torch.Tensor:
    """`paged_attention` for decode (T = 1), as a Triton kernel: the same arguments and
    the same numbers (fp32 accumulation), without gathering K/V into a dense copy.

    q (B, H, 1, D); k_pool, v_pool (num_blocks, block_size, H_kv, D) one layer's pools (the
    same strides, contiguous last dim; H_kv divides H: query head h reads K/V head
    h // (H / H_kv), grouped-query attention); block_tables (B, max_blocks) int; q_pos (B, 1): the
    query's position, so row b's keys are 0..q_pos[b, 0]. Returns (B, H, 1, D) in q's
    dtype. CUDA tensors run the compiled kernel; CPU tensors run in Triton's interpreter,
    which needs TRITON_INTERPRET=1 in the environment before triton is first imported
    (slow: for tests on small shapes). RuntimeError where Triton is missing or cannot run
    here; ValueError for bad shapes, T != 1 or mismatched strides (all checked, given).
    """
    if not HAS_TRITON:
        raise RuntimeError("paged_decode_triton needs triton (pip install triton; Linux x86-64)")
    if not q.is_cuda and not triton_interpreting():
        raise RuntimeError("paged_decode_triton on CPU tensors needs Triton's interpreter: set "
                           "TRITON_INTERPRET=1 before triton is first imported (e.g. in a fresh process)")
    _check_paged_args(q, k_pool, v_pool, block_tables, q_pos)
    if q.shape[2] != 1:
        raise ValueError(f"paged_decode_triton is for decode: q must have T = 1, got T = {q.shape[2]}")
    if k_pool.stride() != v_pool.stride() or k_pool.stride(-1) != 1:
        raise ValueError("k_pool and v_pool must have the same strides, with a contiguous last dim")
    B, H, _, D = q.shape
    bs = k_pool.shape[1]
    scale = D ** -0.5 if scale is None else float(scale)
    raise NotImplementedError('Exercise 6.5: A Triton paged-decode kernel — see 06_paged_attention.ipynb')


# -- given: compiling or interpreting the kernel

_KERNELS: dict[tuple[object, bool], object] = {}


def triton_interpreting() -> bool:
    """Whether Triton runs kernels in its interpreter (NumPy on the CPU) in this process.

    That is decided when `triton` is first imported: TRITON_INTERPRET=1 must be in the
    environment then, because `triton.language`'s own helpers (`tl.sum`, `tl.zeros`, ...)
    are built for the interpreter or for the compiler at import time. So tests run the
    kernel on the CPU in a fresh process with that variable set."""
    if not HAS_TRITON:
        return False
    from triton.runtime.jit import JITFunction

    return not isinstance(tl.zeros, JITFunction)


def _kernel(fn=None):
    """A kernel function (default: this file's `_paged_decode_kernel`; 6.9's kernels come
    here too): compiled for the GPU (`triton.jit`), or interpreted on the CPU; made once."""
    fn = _paged_decode_kernel if fn is None else fn
    interpret = triton_interpreting()
    key = (fn, interpret)
    if key not in _KERNELS:
        if interpret:
            from triton.runtime.interpreter import InterpretedFunction

            _KERNELS[key] = InterpretedFunction(fn)
        else:  # triton.jit follows TRITON_INTERPRET as it is now: compile whatever it says
            saved = os.environ.pop("TRITON_INTERPRET", None)
            try:
                _KERNELS[key] = triton.jit(fn)
            finally:
                if saved is not None:
                    os.environ["TRITON_INTERPRET"] = saved
    return _KERNELS[key]
