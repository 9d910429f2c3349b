"""Exercise 8.5: FLOPs and bytes of a step against hand counts and torch's FlopCounterMode;
the roofline classification on synthetic points; the peak measurements."""

import math

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import course
from solutions.gpt import GPT, GPTConfig
from solutions.kv_cache import KVCache, forward_cached

prof = course.load("profiling")

# A tiny config: V = 11, context P = 16, one layer, C = 4 (2 heads of 2).
TINY = GPTConfig(vocab_size=11, block_size=16, n_layer=1, n_head=2, n_embd=4)

# What each term of a step's cost counts: the rule a wrong count breaks, named in the message.
RULES = {
    "matmul": "2 FLOPs per multiply-add, for every weight matrix each of the N new tokens meets "
              "(qkv, proj, the MLP's two: 24·N·C² a layer) and the head (2·N·C·V)",
    "attention": "two products a layer, Q·Kᵀ and P·V, each 2·N·L·C FLOPs (every new token against "
                 "all L = context + new keys of its row)",
    "weights": "every parameter read once a step, except the position table: only its N looked-up rows",
    "kv_read": "K and V of all L positions of every row, read once a layer",
    "kv_write": "K and V of the N new tokens, written once a layer",
}


def assert_terms(detail: dict, expected: dict) -> None:
    assert set(detail) == set(expected), f"step_cost's detail has terms {sorted(detail)}, expected {sorted(expected)}"
    wrong = [f"{k} = {detail[k]}, expected {v}: {RULES[k]}" for k, v in expected.items() if detail[k] != v]
    assert not wrong, "; ".join(wrong)


@pytest.mark.exercise("8.5")
def test_decode_step_by_hand():
    """batch 2, one new token each after 3 cached: N = 2 tokens, L = 4 keys per row.
    matmul: 24·N·C² = 24·2·16 = 768 (qkv 2·N·C·3C = 192, proj 2·N·C·C = 64, MLP 2·2·N·C·4C = 512)
            + head 2·N·C·V = 2·2·4·11 = 176                                    -> 944
    attention: Q·Kᵀ and P·V, 2·N·L·C each = 2 · (2·2·4·4) = 128                 -> total 1072 FLOPs
    weights: 360 parameters (wte 44, wpe 64, block 244, ln_f 8), minus wpe, plus the N·C = 8
             looked-up position values: 304 floats = 1216 bytes
    kv_read: 2 (K, V) · batch 2 · L 4 · C 4 · 4 bytes = 256; kv_write: 2 · N 2 · C 4 · 4 = 64
    """
    c = prof.step_cost(TINY, batch=2, new_tokens=1, context=3)
    assert_terms(c.detail, {"matmul": 944, "attention": 128, "weights": 1216, "kv_read": 256, "kv_write": 64})
    assert (c.flops, c.bytes) == (1072, 1536), \
        f"flops = matmul + attention, bytes = weights + kv_read + kv_write; got {(c.flops, c.bytes)}"
    assert c.intensity == pytest.approx(1072 / 1536)
    assert sum(prof.weight_count(TINY).values()) == GPT(TINY).num_params() == 360


@pytest.mark.exercise("8.5")
def test_prefill_chunk_by_hand():
    """batch 1, a chunk of 5 after 2 cached: N = 5, L = 7.
    matmul 24·5·16 + 2·5·4·11 = 1920 + 440 = 2360; attention 2·(2·5·7·4) = 560.
    weights (360 − 64 + 20)·4 = 1264; kv_read 2·1·7·4·4 = 224; kv_write 2·5·4·4 = 160."""
    c = prof.step_cost(TINY, batch=1, new_tokens=5, context=2)
    assert_terms(c.detail, {"matmul": 2360, "attention": 560, "weights": 1264, "kv_read": 224, "kv_write": 160})
    half = prof.step_cost(TINY, batch=1, new_tokens=5, context=2, dtype_bytes=2)
    assert half.bytes * 2 == c.bytes and half.flops == c.flops


@pytest.mark.exercise("8.5")
@pytest.mark.parametrize("batch, new, context", [(3, 1, 5), (2, 4, 0), (1, 6, 3)])
def test_matmul_flops_match_torch_flop_counter(batch, new, context):
    """torch's FlopCounterMode counts the linear layers and the head (it has no formula for
    the CPU attention kernel): it must agree with the "matmul" term exactly."""
    torch.manual_seed(0)
    m = GPT(TINY).eval()
    cache = KVCache.for_model(m, batch)
    if context:
        forward_cached(m, torch.randint(0, 11, (batch, context)), cache)
    with FlopCounterMode(display=False) as fc:
        forward_cached(m, torch.randint(0, 11, (batch, new)), cache)
    assert prof.step_cost(TINY, batch=batch, new_tokens=new, context=context).detail["matmul"] == fc.get_total_flops()


@pytest.mark.exercise("8.5")
def test_classify_synthetic_points():
    # peak 100 FLOP/s, 10 B/s: ridge at 10 FLOPs/byte
    compute = prof.classify("c", prof.Cost(1000, 10), 10.0, 100.0, 10.0)
    assert (compute.intensity, compute.attainable, compute.achieved, compute.regime) == (100, 100, 100, "compute"), \
        "intensity = flops / bytes; attainable = min(peak_flops, intensity × peak_bandwidth); above the ridge: compute"
    band = prof.classify("b", prof.Cost(10, 10), 1.0, 100.0, 10.0)
    assert (band.attainable, band.efficiency, band.regime) == (10, 1.0, "bandwidth"), \
        "below the ridge the bandwidth roof bounds the point (intensity × peak_bandwidth): bandwidth-bound"
    slow = prof.classify("o", prof.Cost(10, 10), 10.0, 100.0, 10.0)
    assert slow.efficiency == pytest.approx(0.1) and slow.regime == "overhead"
    ridge = prof.classify("r", prof.Cost(100, 10), 1.0, 100.0, 10.0)
    assert ridge.regime == "compute", (f"intensity 10 at a ridge of 10 FLOPs/byte is {ridge.regime!r}: at the "
                                       "ridge both roofs meet and the point counts as compute-bound "
                                       "(compute from intensity >= peak_flops / peak_bandwidth)")
    edge = prof.classify("e", prof.Cost(100, 10), 2.0, 100.0, 10.0, min_efficiency=0.5)
    assert edge.efficiency == 0.5 and edge.regime == "compute"


@pytest.mark.exercise("8.5")
def test_peaks_are_measured():
    f = prof.measure_peak_flops(n=64, seconds=0.02)
    b = prof.measure_peak_bandwidth(size=1 << 20, seconds=0.02)
    assert 1e6 < f.value < 1e14 and "64x64" in f.conditions
    assert 1e6 < b.value < 1e13 and "1 MiB" in b.conditions


@pytest.mark.given
@pytest.mark.parametrize("kw", [dict(batch=0), dict(new_tokens=0), dict(context=-1), dict(context=15, new_tokens=2)])
def test_bad_step_shapes_are_refused(kw):
    args = dict(batch=1, new_tokens=1, context=0) | kw
    with pytest.raises(ValueError):
        prof.step_cost(TINY, **args)


@pytest.mark.given
def test_bad_roofline_inputs_are_refused():
    with pytest.raises(ValueError, match="seconds"):
        prof.classify("x", prof.Cost(1, 1), 0.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="peak_flops"):
        prof.classify("x", prof.Cost(1, 1), 1.0, math.nan, 1.0)


def ticking():
    """A clock that moves 1 s per read: every timed run (two reads) takes exactly 1 s."""
    state = {"t": 0.0}

    def clock():
        state["t"] += 1.0
        return state["t"]

    return clock


@pytest.mark.exercise("8.5")
def test_peaks_count_what_one_timed_call_does():
    f = prof.measure_peak_flops(n=16, seconds=0.5, clock=ticking())
    assert f.value == 2 * 16 ** 3, ("the matmul peak is 2·n³ FLOPs (a multiply-add is 2) over the median "
                                    f"seconds of one n×n @ n×n product, timed with the given clock; got {f.value}")
    assert f.conditions.startswith("16x16 float32 matmul on cpu"), \
        ("conditions starts '{n}x{n} {dtype's name, without 'torch.'} matmul on {device}', here "
         f"'16x16 float32 matmul on cpu'; got {f.conditions!r}")
    b = prof.measure_peak_bandwidth(size=1 << 20, seconds=0.5, clock=ticking())
    assert b.value == 2 * (1 << 20), ("a copy reads and writes every byte: the bandwidth is 2 × size bytes over "
                                      f"the median seconds of one copy; got {b.value}")
    assert b.conditions.startswith("copy of 1 MiB on cpu"), \
        ("conditions starts 'copy of {size in MiB} MiB on {device}', here 'copy of 1 MiB on cpu'; "
         f"got {b.conditions!r}")


@pytest.mark.exercise("8.5")
def test_classify_between_the_roofs():
    # ridge at 10 FLOPs/byte; intensity 4 -> bandwidth roof 40 FLOP/s
    p = prof.classify("p", prof.Cost(40, 10), 2.0, 100.0, 10.0)
    assert (p.attainable, p.achieved, p.efficiency) == (40.0, 20.0, 0.5), \
        "attainable = min(peak_flops, intensity × peak_bandwidth); efficiency = achieved / attainable"
    assert p.regime == "bandwidth", "efficiency exactly min_efficiency is not overhead; below the ridge: bandwidth"
    assert prof.classify("q", prof.Cost(40, 10), 2.01, 100.0, 10.0).regime == "overhead"
