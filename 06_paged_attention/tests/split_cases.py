"""The split-K kernel's cases (6.9), shared by the interpreter test (run in a fresh process
with TRITON_INTERPRET=1) and the GPU tests: `python split_cases.py` prints one JSON line per
case with the largest difference from `paged_attention` (6.4, K/V heads repeated for
grouped-query cases), or the error it raised, then the case `BIG` (a pool past 2**31
elements read through an int32 block table). Other cases can be given as one JSON argument
(a list of case tuples; then `BIG` is not run).

A case: (name, batch, heads, kv_heads, head_dim, block_size, lengths, stale fill,
blocks_per_split, blocks_per_iter, extra table columns); None for the plan's own choice.
The pools come from triton_cases.pools: each row's blocks at random, non-contiguous
places, -1 past a row's last block, `fill` in every slot past a row's length."""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import triton_cases  # noqa: E402

NAN = float("nan")
#: 6.5's cases as they are (the plan's own split: one, at these lengths), then split boundaries;
#: 6.5's grouped-query cases at the end (the indices of the cases before stay as they were).
CASES = [(*triton_cases.unpack(c), None, None, 0) for c in triton_cases.CASES if len(c) == 7]
CASES += [
    ("split of 8 tokens, every length a multiple of it", 3, 2, 2, 8, 4, [16, 8, 24], NAN, 2, 4, 0),
    ("split of 8 tokens, every length one token past it", 3, 2, 2, 8, 4, [17, 9, 25], NAN, 2, 4, 0),
    ("one split only (longer than every row)", 3, 2, 2, 8, 4, [1, 9, 16], NAN, 64, 4, 0),
    ("two iterations a split, a short last split", 3, 1, 1, 8, 2, [70, 33, 64], NAN, 16, 8, 0),
    ("GQA: 4 heads on 2 KV heads", 2, 4, 2, 8, 4, [13, 30], NAN, 2, 4, 0),
    ("GQA: 6 heads on 2 KV heads, block 5, head dim 6", 2, 6, 2, 6, 5, [11, 23], NAN, 2, 2, 0),
    ("MQA: 4 heads on 1 KV head, block 3", 2, 4, 1, 8, 3, [7, 20], 0.0, 3, 4, 0),
    ("a wide table (the plan's 2 splits), shorter rows' last split empty", 3, 2, 2, 8, 4, [3, 200, 17], NAN,
     None, None, 13),
]
CASES += [(*triton_cases.unpack(c), None, None, 0) for c in triton_cases.CASES if len(c) > 7]
CASES += [  # SmolLM2-135M's heads (9 on 3 K/V heads of 64, blocks of 16) over several splits (issue 30)
    ("SmolLM2's heads in splits of 2 blocks, one block an iteration", 2, 9, 3, 64, 16, [70, 33], NAN, 2, 1, 0),
]

#: The case of a pool too large for int32 offsets (run after CASES when no cases are given).
BIG = triton_cases.BIG


def inputs(case, device="cpu", dtype=torch.float32):
    """q (B, heads, 1, D), k_pool, v_pool (kv_heads), tables (with the extra -1 columns), q_pos."""
    name, B, H, kvh, D, bs, lengths, fill, _, _, extra = case
    q, k, v, tables, q_pos = triton_cases.pools(B, kvh, D, bs, lengths, fill, device, dtype)
    g = torch.Generator().manual_seed(7)
    q = torch.randn(B, H, 1, D, generator=g).to(device=device, dtype=dtype)
    tables = torch.cat([tables, torch.full((B, extra), -1, dtype=tables.dtype, device=tables.device)], dim=1)
    return q, k, v, tables, q_pos


def run_case(p, case, device="cpu", dtype=torch.float32) -> dict:
    name, B, H, kvh, D, bs, lengths, fill, per_split, per_iter, _ = case
    try:
        q, k, v, tables, q_pos = inputs(case, device, dtype)
        got = p.paged_decode_split(q, k, v, tables, q_pos, blocks_per_split=per_split, blocks_per_iter=per_iter)
        group = H // kvh
        want = p.paged_attention(q.float(), k.float().repeat_interleave(group, dim=2),
                                 v.float().repeat_interleave(group, dim=2), tables, q_pos)
        return {"case": name, "shape": list(got.shape), "finite": bool(torch.isfinite(got).all()),
                "max_err": float((got.float() - want).abs().max())}
    except Exception as e:  # reported to the test, which fails with it
        return {"case": name, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-2000:]}


def run_big_case(p, device="cpu") -> dict:
    return triton_cases.run_big_case(p, device, kernel="paged_decode_split")


if __name__ == "__main__":
    triton_cases.main(CASES, run_case, kernel="paged_decode_split")
