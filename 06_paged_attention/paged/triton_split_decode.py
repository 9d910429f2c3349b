# GENERATED from solutions/paged/triton_split_decode.py by `course stubs --write`: fill in the bodies that raise NotImplementedError.
# The lesson is 06_paged_attention/06_paged_attention.ipynb. Exercises in this file (line of each hole, then the commands):
#   6.9 Going further: a split-K (flash-decoding) paged-decode kernel: lines 36, 47, 70; `course check 6.9`, `course hint 6.9`
"""Going further (6.9): paged decode the way production kernels do it — split-K ("flash-decoding")."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from solutions.checks import check_int

from .attention import _check_paged_args
from .triton_decode import HAS_TRITON, _kernel, tl, triton_interpreting


def _split_decode_kernel(m_ptr, l_ptr, acc_ptr, q_ptr, k_ptr, v_ptr, bt_ptr, seq_lens_ptr, scale, blocks_per_split,
                         stride_qb, stride_qh, stride_kblock, stride_ktok, stride_khead, stride_btb,
                         stride_mb, stride_mh, stride_ab, stride_ah, stride_as,
                         HEAD_DIM: tl.constexpr, GROUP: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                         BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_G: tl.constexpr,
                         BLOCKS_PER_ITER: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """Grid (B, KV_HEADS, num_splits): program (b, kv_h, s) covers the GROUP query heads
    h = kv_h * GROUP + g (g < GROUP; query head h reads KV head h // GROUP) over split s of
    row b: its blocks s * blocks_per_split .. min((s + 1) * blocks_per_split, cdiv(seq_len,
    BLOCK_SIZE)) - 1, tokens < seq_lens[b] only (slots past it may hold NaN: never loaded).
    Afterwards, for each of those heads h, with scores x_t = q[b, h] . k_t * scale (fp32)
    over the split's tokens t: m[b, h, s] = max_t x_t, l[b, h, s] = sum_t exp(x_t - m),
    acc[b, h, s, :] = sum_t exp(x_t - m) v_t (fp32); an empty split (a row shorter than
    its start) leaves m = -inf, l = 0, acc = 0. Reads BLOCKS_PER_ITER blocks per loop
    iteration (a tile of BLOCKS_PER_ITER * BLOCK_T token lanes); the products are `tl.dot`s
    (tensor cores) with `input_precision=DOT_PRECISION`: the wrapper pads BLOCK_G, BLOCK_D
    and the tile to >= 16 (tl.dot's minimum) and the padded lanes are masked. Block ids are
    widened to int64 before they multiply the block stride."""
    raise NotImplementedError('Exercise 6.9: Going further: a split-K (flash-decoding) paged-decode kernel — see 06_paged_attention.ipynb')


def _merge_splits_kernel(out_ptr, m_ptr, l_ptr, acc_ptr, num_splits,
                         stride_mb, stride_mh, stride_ab, stride_ah, stride_as, stride_ob, stride_oh,
                         HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr):
    """Grid (B, H): out[b, h] = the softmax attention over all of row b's tokens, from the
    num_splits partial results (m, l, acc) of `_split_decode_kernel`: the same softmax as
    one pass over all the tokens, up to rounding, with no split's exponent overflowing;
    empty splits (m = -inf, l = 0, acc = 0) add nothing (and never make a NaN). Stored in
    out's dtype."""
    raise NotImplementedError('Exercise 6.9: Going further: a split-K (flash-decoding) paged-decode kernel — see 06_paged_attention.ipynb')


def paged_decode_split(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, block_tables: torch.Tensor,
                       q_pos: torch.Tensor, *, scale: float | None = None, blocks_per_split: int | None = None,
                       blocks_per_iter: int | None = None) -> torch.Tensor:
    """`paged_decode_triton`'s call and numbers (decode, T = 1, fp32 accumulation, slots
    past a row's length never read), by two kernels: `_split_decode_kernel` over
    (row, KV head, split), then `_merge_splits_kernel` over (row, head). k_pool, v_pool may
    have fewer heads than q: (num_blocks, block_size, KV_HEADS, D) with KV_HEADS dividing H,
    query head h reading KV head h // (H // KV_HEADS) (grouped-query attention; KV_HEADS == H
    is plain multi-head). Returns (B, H, 1, D) in q's dtype. The split plan (splits, blocks
    per split and per iteration, padded tiles) is `split_plan`'s for this call (given; the
    keywords override it); the partial results are fp32 tensors m, l (B, H, splits) and acc
    (B, H, splits, D). RuntimeError where Triton is missing or cannot run here (CPU tensors
    need TRITON_INTERPRET=1, as for 6.5; bfloat16 only on CUDA); ValueError for bad shapes
    or plans (given)."""
    B, H, D, kv_heads = _check_split_args(q, k_pool, v_pool, block_tables, q_pos)
    plan = split_plan(B, kv_heads, H // kv_heads, block_tables.shape[1], k_pool.shape[1], D, sms=_num_sms(q),
                      blocks_per_split=blocks_per_split, blocks_per_iter=blocks_per_iter)
    _check_runnable(q, k_pool)
    scale = D ** -0.5 if scale is None else float(scale)
    precision = "ieee" if k_pool.dtype == torch.float32 else "tf32"  # fp32 exactly; fp16/bf16: tensor cores
    raise NotImplementedError('Exercise 6.9: Going further: a split-K (flash-decoding) paged-decode kernel — see 06_paged_attention.ipynb')


# -- given: the split plan, and the checks

#: The plan's policy. A decode step reads every cached K/V byte once, so it is bound by
#: memory bandwidth, and a GPU reaches its bandwidth only with enough loads in flight: at
#: least TARGET_PROGRAMS_PER_SM programs per multiprocessor (132 on an H200) when the
#: sequences allow it. A row is split only as far as every split keeps MIN_SPLIT_TOKENS
#: tokens (below that, the fixed cost of a program and of its partial result dominates);
#: never into more than MAX_SPLITS. Each iteration reads TILE_TOKENS tokens (K and V of
#: 64 tokens x 128 dims in fp16: 32 KiB).
TARGET_PROGRAMS_PER_SM = 2
H200_SMS = 132
MIN_SPLIT_TOKENS = 128
MAX_SPLITS = 32
TILE_TOKENS = 64
DOT_MIN = 16  # tl.dot needs every dimension >= 16 on a GPU


@dataclass(frozen=True)
class SplitPlan:
    """How `paged_decode_split` cuts one call: `num_splits` programs per (row, KV head),
    each over `blocks_per_split` blocks (the last split of the longest row may be shorter,
    a shorter row's later splits empty), `blocks_per_iter` blocks a loop iteration; the
    padded tile sizes (powers of two): `block_t` >= block_size, `block_d` >= head_dim,
    `block_g` >= the query heads per KV head, `block_s` >= num_splits (and >= 2)."""

    num_splits: int
    blocks_per_split: int
    blocks_per_iter: int
    block_size: int
    block_t: int
    block_d: int
    block_g: int
    block_s: int

    @property
    def split_tokens(self) -> int:
        """Tokens of one full split."""
        return self.blocks_per_split * self.block_size


def _pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def split_plan(batch: int, kv_heads: int, group: int, max_blocks: int, block_size: int, head_dim: int, *,
               sms: int = H200_SMS, blocks_per_split: int | None = None,
               blocks_per_iter: int | None = None) -> SplitPlan:
    """The plan for B = `batch` rows of up to `max_blocks` blocks (the block table's width:
    known without reading the lengths back from the device), `kv_heads` KV heads of
    `group` query heads each. Defaults: blocks_per_iter = TILE_TOKENS // block_t (at least
    1); splits = ceil(TARGET_PROGRAMS_PER_SM * sms / (batch * kv_heads)), at most
    max_blocks * block_size // MIN_SPLIT_TOKENS (at least 1) and MAX_SPLITS;
    blocks_per_split = ceil(max_blocks / splits); num_splits = ceil(max_blocks /
    blocks_per_split) (a split's last iteration may be part masked: masked lanes load
    nothing). E.g. on an H200 with 32 KV heads and blocks of 16: B = 1, L = 2048: 9 splits
    of 240 tokens (288 programs); B = 8, L = 512: 2 splits; B >= 9: one. `blocks_per_split` / `blocks_per_iter` override
    (tests cut rows at chosen places); blocks_per_iter must be a power of two with
    blocks_per_iter * block_t >= 16. ValueError naming a bad argument."""
    for name, v in (("batch", batch), ("kv_heads", kv_heads), ("group", group), ("max_blocks", max_blocks),
                    ("block_size", block_size), ("head_dim", head_dim), ("sms", sms)):
        check_int(name, v, 1)
    block_t = _pow2(block_size)
    if blocks_per_iter is None:
        blocks_per_iter = max(1, TILE_TOKENS // block_t, -(-DOT_MIN // block_t))
    else:
        check_int("blocks_per_iter", blocks_per_iter, 1)
        if blocks_per_iter != _pow2(blocks_per_iter) or blocks_per_iter * block_t < DOT_MIN:
            raise ValueError(f"blocks_per_iter must be a power of two with blocks_per_iter x {block_t} (block_size "
                             f"{block_size} padded) >= {DOT_MIN} token lanes, got {blocks_per_iter}")
    if blocks_per_split is None:
        want = -(-TARGET_PROGRAMS_PER_SM * sms // (batch * kv_heads))
        most = max(1, min(MAX_SPLITS, max_blocks * block_size // MIN_SPLIT_TOKENS))
        blocks_per_split = -(-max_blocks // min(want, most))
    else:
        check_int("blocks_per_split", blocks_per_split, 1)
    num_splits = -(-max_blocks // blocks_per_split)
    return SplitPlan(num_splits, blocks_per_split, blocks_per_iter, block_size, block_t,
                     max(DOT_MIN, _pow2(head_dim)), max(DOT_MIN, _pow2(group)), max(2, _pow2(num_splits)))


def _num_sms(q: torch.Tensor) -> int:
    """Multiprocessors of q's GPU; an H200's count elsewhere (the interpreter runs the GPU's plan)."""
    if q.is_cuda:
        return torch.cuda.get_device_properties(q.device).multi_processor_count
    return H200_SMS


def _check_split_args(q, k_pool, v_pool, block_tables, q_pos) -> tuple[int, int, int, int]:
    """(B, H, D, KV_HEADS) of valid arguments, or a ValueError naming the bad one."""
    if not (isinstance(q, torch.Tensor) and q.dim() == 4):
        raise ValueError(f"q must be a (B, H, T, D) tensor, got {getattr(q, 'shape', type(q).__name__)}")
    B, H, T, D = q.shape
    kv_heads = k_pool.shape[2] if isinstance(k_pool, torch.Tensor) and k_pool.dim() == 4 else 0
    if kv_heads < 1 or H % kv_heads:
        raise ValueError(f"k_pool must be (num_blocks, block_size, KV_HEADS, {D}) with KV_HEADS dividing the "
                         f"{H} query heads, got {tuple(getattr(k_pool, 'shape', ()))}")
    _check_paged_args(q[:, :kv_heads], k_pool, v_pool, block_tables, q_pos)
    if T != 1:
        raise ValueError(f"paged_decode_split is for decode: q must have T = 1, got T = {T}")
    if block_tables.shape[1] < 1:
        raise ValueError("block_tables must have at least one column (every row holds a token)")
    if k_pool.stride() != v_pool.stride() or k_pool.stride(-1) != 1:
        raise ValueError("k_pool and v_pool must have the same strides, with a contiguous last dim")
    if q.dtype != k_pool.dtype or v_pool.dtype != k_pool.dtype:
        raise ValueError(f"q, k_pool and v_pool must have one dtype, got {q.dtype}, {k_pool.dtype}, {v_pool.dtype}")
    return B, H, D, kv_heads


def _check_runnable(q: torch.Tensor, k_pool: torch.Tensor) -> None:
    if not HAS_TRITON:
        raise RuntimeError("paged_decode_split needs triton (pip install triton; Linux x86-64)")
    if not q.is_cuda and not triton_interpreting():
        raise RuntimeError("paged_decode_split on CPU tensors needs Triton's interpreter: set "
                           "TRITON_INTERPRET=1 before triton is first imported (e.g. in a fresh process)")
    if not q.is_cuda and k_pool.dtype == torch.bfloat16:  # seen with triton 3.9: its bits taken as integers
        raise RuntimeError("paged_decode_split: Triton's interpreter multiplies bfloat16 tiles (tl.dot) wrongly; "
                           "run bfloat16 on CUDA, or float16 / float32 in the interpreter")

