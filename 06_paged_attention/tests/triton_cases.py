"""The Triton kernel's cases, shared by the interpreter test (run in a fresh process with
TRITON_INTERPRET=1) and the GPU test: `python triton_cases.py` prints one JSON line per
case with the largest difference from `paged_attention`, or the error it raised, then the
case `BIG` (a pool past 2**31 elements read through an int32 block table). Other cases can
be given as one JSON argument (a list of case tuples; then `BIG` is not run).

A grouped-query case (an eighth field, the K/V heads, dividing the heads; issue 30) is
compared with `paged_attention` on pools whose K/V heads are repeated to the query heads
(`repeat_interleave`: query head h reads K/V head h // (heads / kv_heads)), so that 6.4's
own grouped-query path is not the oracle of 6.5's."""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

import torch

#: (name, batch, heads, head_dim, block_size, lengths, stale fill[, kv_heads])
CASES = [
    ("pow2 blocks", 3, 2, 8, 4, [1, 9, 16], 0.0),
    ("block size 3 (not a power of two)", 3, 2, 8, 3, [7, 1, 12], 0.0),
    ("block size 5, head dim 6", 2, 3, 6, 5, [11, 4], 0.0),
    ("stale NaN past every length", 3, 2, 8, 4, [3, 6, 13], float("nan")),
    ("one token, block size 1", 2, 1, 4, 1, [1, 5], float("nan")),
    # grouped-query attention: SmolLM2-135M's heads (9 on 3 K/V heads of 64), and a group (4)
    # that differs from the K/V heads' count (2), so that neither stands in for the other
    ("GQA: SmolLM2's 9 heads on 3 KV heads, head dim 64", 2, 9, 64, 16, [37, 6], float("nan"), 3),
    ("GQA: 8 heads on 2 KV heads (groups of 4)", 2, 8, 8, 4, [13, 5], float("nan"), 2),
]


def unpack(case) -> tuple:
    """(name, batch, heads, kv_heads, head_dim, block_size, lengths, fill) of a case (kv_heads =
    heads where the case gives none)."""
    name, B, H, D, bs, lengths, fill, *kv = case
    return name, B, H, (kv[0] if kv else H), D, bs, lengths, fill


def pools(B, H, D, bs, lengths, fill, device="cpu", dtype=torch.float32, seed=0):
    """Random pools with each row's blocks at random places; every slot past a row's
    length (and every unused block) holds `fill`. Returns q, k_pool, v_pool, tables, q_pos."""
    g = torch.Generator().manual_seed(seed)
    need = [-(-n // bs) for n in lengths]
    num_blocks = sum(need) + 3
    k = torch.randn(num_blocks, bs, H, D, generator=g)
    v = torch.randn(num_blocks, bs, H, D, generator=g)
    ids = torch.randperm(num_blocks, generator=g).tolist()
    tables = torch.full((B, max(need) + 1), -1, dtype=torch.long)
    valid = torch.zeros(num_blocks, bs, dtype=torch.bool)
    for b, n in enumerate(lengths):
        mine, ids = ids[:need[b]], ids[need[b]:]
        tables[b, :need[b]] = torch.tensor(mine)
        for t in range(n):
            valid[mine[t // bs], t % bs] = True
    k[~valid] = fill
    v[~valid] = fill
    q = torch.randn(B, H, 1, D, generator=g)
    q_pos = torch.tensor(lengths)[:, None] - 1
    to = dict(device=device)
    return (q.to(dtype=dtype, **to), k.to(dtype=dtype, **to), v.to(dtype=dtype, **to), tables.to(**to),
            q_pos.to(**to))


#: The case of a pool too large for int32 offsets (run after CASES when no cases are given).
BIG = "pool past 2**31 elements, int32 block table"


def big_pool(device="cpu"):
    """A float16 pool of more than 2**31 elements (4 GiB) whose only data are two blocks,
    one near the start and the last one; tables int32. On the CPU the pool is an anonymous
    mapping that reserves no memory: only the pages touched are ever backed (a few KiB).
    Returns q, pool, tables, q_pos, want (the attention over the two blocks) or a string
    saying why it cannot be made here."""
    H, D, bs = 1, 8, 4
    num_blocks = 2**31 // (bs * H * D) + 2
    if device == "cpu":
        import mmap

        try:
            mm = mmap.mmap(-1, num_blocks * bs * H * D * 2,
                           flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_NORESERVE", 0))
        except (OSError, ValueError, OverflowError) as e:
            return f"cannot map 4 GiB of address space here ({e})"
        pool = torch.frombuffer(mm, dtype=torch.float16).view(num_blocks, bs, H, D)
    else:
        pool = torch.zeros(num_blocks, bs, H, D, dtype=torch.float16, device=device)
    g = torch.Generator().manual_seed(1)
    blocks = [5, num_blocks - 1]
    for b in blocks:
        pool[b] = torch.randn(bs, H, D, generator=g).to(torch.float16)
    q = torch.randn(1, H, 1, D, generator=g).to(device=device, dtype=torch.float16)
    tables = torch.tensor([blocks], dtype=torch.int32, device=device)
    q_pos = torch.tensor([[2 * bs - 1]], device=device)
    kv = torch.cat([pool[b] for b in blocks]).float().transpose(0, 1)[None]  # (1, H, 2 * bs, D)
    want = torch.nn.functional.scaled_dot_product_attention(q.float(), kv, kv)
    return q, pool, tables, q_pos, want


def run_big_case(p, device="cpu", kernel: str = "paged_decode_triton") -> dict:
    """The case BIG through `p.<kernel>` (6.5's, or 6.9's `paged_decode_split`)."""
    try:
        made = big_pool(device)
        if isinstance(made, str):
            return {"case": BIG, "unavailable": made}
        q, pool, tables, q_pos, want = made
        got = getattr(p, kernel)(q, pool, pool, tables, q_pos)
        return {"case": BIG, "shape": list(got.shape), "finite": bool(torch.isfinite(got).all()),
                "max_err": float((got.float() - want).abs().max())}
    except Exception as e:
        return {"case": BIG, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-2000:]}


def gqa_inputs(case, device="cpu", dtype=torch.float32):
    """q (B, heads, 1, D) and the pools of kv_heads heads (`pools`), tables, q_pos."""
    name, B, H, kvh, D, bs, lengths, fill = unpack(case)
    q, k, v, tables, q_pos = pools(B, kvh, D, bs, lengths, fill, device, dtype)
    if kvh != H:
        g = torch.Generator().manual_seed(7)
        q = torch.randn(B, H, 1, D, generator=g).to(device=device, dtype=dtype)
    return q, k, v, tables, q_pos


def reference(p, q, k, v, tables, q_pos) -> torch.Tensor:
    """`paged_attention` in fp32 with the K/V heads repeated to q's: head h reads h // group."""
    group = q.shape[1] // k.shape[2]
    return p.paged_attention(q.float(), k.float().repeat_interleave(group, dim=2),
                             v.float().repeat_interleave(group, dim=2), tables, q_pos)


def run_case(p, case, device="cpu", dtype=torch.float32) -> dict:
    name = case[0]
    try:
        q, k, v, tables, q_pos = gqa_inputs(case, device, dtype)
        got = p.paged_decode_triton(q, k, v, tables, q_pos)
        want = reference(p, q, k, v, tables, q_pos)
        return {"case": name, "shape": list(got.shape), "finite": bool(torch.isfinite(got).all()),
                "max_err": float((got.float() - want).abs().max())}
    except Exception as e:  # reported to the test, which fails with it
        return {"case": name, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-2000:]}


def main(default_cases=CASES, run=run_case, kernel: str = "paged_decode_triton") -> None:
    """Print one JSON row per case (argv[1]: other cases, as JSON), then BIG's when none are given."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    import course

    p = course.load("paged")
    cases = [tuple(c) for c in json.loads(sys.argv[1])] if len(sys.argv) > 1 else default_cases  # argv: other cases
    for case in cases:
        print(json.dumps(run(p, case)), flush=True)
    if len(sys.argv) == 1:  # last: a wrong offset may crash the process (the rows above are out)
        print(json.dumps(run_big_case(p, kernel=kernel)), flush=True)


if __name__ == "__main__":
    main()
