"""Exercise 6.9 (going further): the split-K paged-decode kernel gives `paged_attention`'s numbers.

As for 6.5, the kernels run on the CPU in Triton's interpreter, in a fresh process
(`split_cases.py`, once per module, started at collection): every case of 6.5's tests, then
split boundaries (lengths a multiple of the split, one token past it, one split only, two
iterations a split), grouped-query heads (kv_heads < heads, a group of 3, one KV head;
SmolLM2-135M's 9 heads on 3 KV heads of 64, in the plan's split and in splits of 2 blocks), a
wide table whose later splits are empty for the shorter rows, NaN in every stale slot, and
the pool past int32 offsets. fp32, within 1e-5 of the PyTorch paged attention (6.4). The
split plan and the argument checks are given code, tested here in-process. On a CUDA
machine the `gpu` tests run the compiled kernels on every case in fp32 and bf16 (the
interpreter cannot: its `tl.dot` misreads bf16) and on the bench's real shapes in fp16."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

import course

p = course.load("paged")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import split_cases  # noqa: E402


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"_stage06_split_{name}", HERE / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


textbook = _load("test_paged_triton")  # its interpreter runner and checks (6.5's tests), shared
needs_triton = textbook.needs_triton
_RUN = textbook.SharedRun(split_cases)
start_interpreted_early = _RUN.start_early  # the stage's conftest starts the run at collection


@pytest.fixture(scope="module")
def interpreted() -> dict[str, dict]:
    """Every case of split_cases.py, run in the interpreter once for the module."""
    return _RUN.results()


@pytest.mark.exercise("6.9")
@needs_triton
@pytest.mark.parametrize("case", [c[0] for c in split_cases.CASES])
def test_split_kernel_equals_paged_attention_in_the_interpreter(interpreted, case):
    textbook.check(interpreted[case], atol=1e-5)


@pytest.mark.exercise("6.9")
@needs_triton
def test_split_kernel_widens_block_ids_past_int32_offsets_in_the_interpreter(interpreted):
    textbook.check_big(interpreted[split_cases.BIG])


# -- the plan and the checks (given code)

@pytest.mark.given
@pytest.mark.parametrize("B, L", [(b, l) for l in (512, 2048) for b in (1, 8, 32, 128)] + [(3, 100)])
def test_split_plan_fills_an_h200_and_keeps_splits_long(B, L):
    """The bench's shapes (32 KV heads of 128, blocks of 16): enough programs for 2 per
    multiprocessor where the rows are long enough, never a split under 128 tokens, the
    splits covering the table (the last one may be shorter), a tile of 64 tokens."""
    bs, kvh = 16, 32
    plan = p.split_plan(B, kvh, 1, L // bs + (L % bs > 0), bs, 128, sms=132)
    blocks = -(-L // bs)
    assert plan.blocks_per_iter * plan.block_t == 64
    assert (plan.num_splits - 1) * plan.blocks_per_split < blocks <= plan.num_splits * plan.blocks_per_split
    assert plan.num_splits == 1 or plan.split_tokens >= 128
    assert B * kvh * plan.num_splits >= min(2 * 132, B * kvh * max(1, L // 128))
    assert plan.block_s >= plan.num_splits and plan.block_g == 16 and plan.block_d == 128
    if (B, L) == (1, 2048):
        assert (plan.num_splits, plan.split_tokens) == (9, 240)
    if B >= 9:
        assert plan.num_splits == 1


@pytest.mark.given
def test_split_plan_overrides_and_padding():
    plan = p.split_plan(2, 2, 3, 10, 5, 6, blocks_per_split=3, blocks_per_iter=2)
    assert (plan.num_splits, plan.blocks_per_split, plan.blocks_per_iter) == (4, 3, 2)
    assert (plan.block_t, plan.block_d, plan.block_g, plan.block_s) == (8, 16, 16, 4)
    assert p.split_plan(1, 1, 1, 7, 1, 4).blocks_per_iter == 64  # block size 1: 64 blocks a tile


@pytest.mark.given
@pytest.mark.parametrize("kw, match", [
    (dict(blocks_per_iter=3), "blocks_per_iter must be a power of two"),
    (dict(blocks_per_iter=2), "blocks_per_iter must be a power of two"),  # 2 x 4 lanes < 16
    (dict(blocks_per_iter=0), "blocks_per_iter must be an int >= 1"),
    (dict(blocks_per_split=0), "blocks_per_split must be an int >= 1"),
])
def test_split_plan_rejects_bad_overrides(kw, match):
    with pytest.raises(ValueError, match=match):
        p.split_plan(2, 2, 1, 8, 4, 8, **kw)


@pytest.mark.given
def test_split_kernel_rejects_bad_arguments():
    """Checked before anything runs (no Triton needed)."""
    q, k, v, tables, q_pos = split_cases.inputs(split_cases.CASES[5])
    with pytest.raises(ValueError, match="KV_HEADS dividing the 2 query heads"):
        p.paged_decode_split(q, k[:, :, :0], v[:, :, :0], tables, q_pos)
    with pytest.raises(ValueError, match="KV_HEADS dividing the 3 query heads"):
        p.paged_decode_split(torch.randn(3, 3, 1, 8), k, v, tables, q_pos)
    with pytest.raises(ValueError, match="T = 2"):
        p.paged_decode_split(q.expand(-1, -1, 2, -1), k, v, tables, q_pos.expand(-1, 2))
    with pytest.raises(ValueError, match="one dtype"):
        p.paged_decode_split(q.double(), k, v, tables, q_pos)
    with pytest.raises(ValueError, match="block_tables must be"):
        p.paged_decode_split(q, k, v, tables[:2], q_pos)
    with pytest.raises(ValueError, match="blocks_per_iter"):
        p.paged_decode_split(q, k, v, tables, q_pos, blocks_per_iter=5)


# -- on a GPU: the compiled kernels

TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}


@pytest.mark.exercise("6.9")
@needs_triton
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])  # fp16: the real shapes below, and the bench
@pytest.mark.parametrize("case", [c[0] for c in split_cases.CASES])
def test_split_kernel_on_the_gpu(case, dtype):
    row = split_cases.run_case(p, next(c for c in split_cases.CASES if c[0] == case), device="cuda", dtype=dtype)
    textbook.check(row, atol=TOL[dtype])


@pytest.mark.exercise("6.9")
@needs_triton
@pytest.mark.gpu
@pytest.mark.parametrize("B, L, heads, kv_heads", [(1, 2048, 32, 32), (8, 512, 32, 32), (32, 512, 32, 32),
                                                   (4, 1000, 32, 8), (2, 2049, 8, 1)])
def test_split_kernel_on_real_shapes_on_the_gpu(B, L, heads, kv_heads):
    """The bench's shapes (head dim 128, blocks of 16, the plan's own splits), GQA, and a
    length one past a block, in fp16 against paged_attention in fp32 and 6.5's kernel."""
    case = (f"{B}x{L}", B, heads, kv_heads, 128, 16, [L - 7 * b for b in range(B)], float("nan"), None, None, 0)
    q, k, v, tables, q_pos = split_cases.inputs(case, device="cuda", dtype=torch.float16)
    got = p.paged_decode_split(q, k, v, tables, q_pos)
    g = heads // kv_heads
    want = p.paged_attention(q.float(), k.float().repeat_interleave(g, 2), v.float().repeat_interleave(g, 2),
                             tables, q_pos)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got.float(), want, atol=2e-3, rtol=2e-3)
    if g == 1:
        torch.testing.assert_close(got, p.paged_decode_triton(q, k, v, tables, q_pos), atol=2e-3, rtol=2e-3)


@pytest.mark.exercise("6.9")
@needs_triton
@pytest.mark.gpu
def test_split_kernel_on_a_pool_past_int32_offsets_on_the_gpu():
    textbook.check_big(split_cases.run_big_case(p, device="cuda"))
    torch.cuda.empty_cache()
