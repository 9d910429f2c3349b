"""Stage 08 hidden tests: other sizes, seeds and edge cases of every exercise."""

import json
import re

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import course
from solutions.gpt import GPT, GPTConfig
from solutions.kv_cache import KVCache, forward_cached

prof = course.load("profiling")


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


# ---- 8.1 -------------------------------------------------------------------------------------

@pytest.mark.exercise("8.1")
def test_async_device_with_several_calls_per_run():
    clk, pending = Clock(), []
    work = iter([7.0, 7.0, 1.0, 3.0, 2.0, 2.0, 4.0, 6.0, 0.5, 0.5])

    def launch():
        pending.append(next(work))

    def sync():
        clk.now += sum(pending)
        pending.clear()

    t = prof.time_fn(launch, warmup=2, repeat=4, number=2, clock=clk, sync=sync)
    course.answer("timing", {"times": list(t.times), "median": t.median, "warmup": t.warmup,
                             "synchronized": bool(t.synchronized)})
    assert t.times == (2.0, 2.0, 5.0, 0.5)
    assert t.median == 2.0 and t.warmup == 2


@pytest.mark.exercise("8.1")
def test_no_warmup_times_the_first_call():
    clk = Clock()
    durations = iter([9.0, 1.0, 1.0])

    def fn():
        clk.now += next(durations)

    t = prof.time_fn(fn, warmup=0, repeat=3, clock=clk, sync=lambda: None)
    course.answer("timing", {"times": list(t.times), "median": t.median, "warmup": t.warmup})
    assert t.times == (9.0, 1.0, 1.0) and t.median == 1.0


# ---- 8.2 -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def deep():
    torch.manual_seed(1)
    return GPT(GPTConfig(block_size=64, n_layer=3, n_head=4, n_embd=16)).eval()


@pytest.mark.exercise("8.2")
def test_three_layers_batch_five_one_active_step(deep):
    engine = prof.decode_engine(deep, 5, prompt_len=4)
    n = len(engine.steps)
    p = prof.profile_engine(engine, wait=0, warmup=1, active=1, record_shapes=True)
    calls = {o.name: o.calls for o in p.ops}
    # counts and shapes only (the profiler's times are measurements)
    course.answer("steps", [len(engine.steps) - n, p.steps])
    course.answer("matmul_calls", {k: calls.get(k) for k in ("aten::addmm", "aten::mm")})
    course.answer("addmm_shapes", sorted([shapes, int(c)] for name, shapes, c, _ in p.by_shape
                                         if name == "aten::addmm"))
    course.answer("trace_path", p.trace_path)
    assert len(engine.steps) - n == 2 and p.steps == 1
    assert calls["aten::addmm"] == 12 and calls["aten::mm"] == 1
    assert any(name == "aten::addmm" and "[5, 16]" in shapes for name, shapes, _, _ in p.by_shape)
    assert p.trace_path is None


# ---- 8.3 -------------------------------------------------------------------------------------

@pytest.mark.exercise("8.3")
def test_buffers_and_dtypes():
    bn = torch.nn.BatchNorm1d(7)  # 2 parameters and 3 buffers (running mean, var, count)
    want = sum(t.numel() * t.element_size() for t in (*bn.parameters(), *bn.buffers()))
    got = prof.nbytes(bn)
    course.answer("module_bytes", got)
    assert got == want
    x = torch.zeros(5, 3, dtype=torch.bfloat16)
    y = torch.zeros(4, dtype=torch.int64)
    got = prof.nbytes((x, x[1]), [y, y])
    course.answer("tensors_bytes", got)
    assert got == 30 + 32


@pytest.mark.exercise("8.3")
def test_peak_of_three_live_buffers():
    n = 1 << 15

    def work():
        a, b, c = torch.ones(n), torch.ones(n), torch.ones(n)
        return a, b, c

    peak = prof.peak_step_memory(work)
    # the peak in float32 buffers of n (the allocator's few bytes of slack rounded away)
    course.answer("live_buffers_at_peak", round(peak / (4 * n)))
    assert 3 * 4 * n <= peak <= 3 * 4 * n + 4096


# ---- 8.4 -------------------------------------------------------------------------------------

@pytest.mark.exercise("8.4")
@pytest.mark.parametrize("b, y, gain, knee", [
    ([1, 2], [10.0, 10.5], 0.1, 1),
    ([1, 2], [10.0, 20.0], 0.1, None),
    ([1, 2, 4, 8], [10.0, 8.0, 6.0, 5.0], 0.1, 1),        # falling: the first point
    ([1, 2, 4, 8], [10.0, 14.0, 17.0, 18.0], 0.5, 1),      # 40% per doubling is not 50%
    ([1, 2, 4, 8], [10.0, 14.0, 17.0, 18.0], 0.2, 4),     # 14 -> 17 is still +21%
    ([2, 4, 8, 16, 32], [5.0, 10.0, 20.0, 40.0, 80.0], 0.1, None),
])
def test_more_curves(b, y, gain, knee):
    k = prof.find_knee(b, y, min_gain=gain)
    course.answer("knee", None if k is None else {"batch": k.batch, "index": k.index, "throughput": k.throughput,
                                                  "gains": list(k.gains)})
    assert (None if k is None else k.batch) == knee


# ---- 8.5 -------------------------------------------------------------------------------------

CFG = GPTConfig(vocab_size=7, block_size=32, n_layer=2, n_head=4, n_embd=8)


@pytest.mark.exercise("8.5")
def test_cost_by_formula_other_config():
    C, V, L, P = 8, 7, 2, 32
    B, T, ctx = 3, 2, 4
    N, K = B * T, ctx + T
    c = prof.step_cost(CFG, batch=B, new_tokens=T, context=ctx, dtype_bytes=2)
    course.answer("cost", {"flops": c.flops, "bytes": c.bytes, "detail": dict(c.detail)})
    params = GPT(CFG).num_params()
    assert c.detail["matmul"] == L * 24 * N * C * C + 2 * N * C * V
    assert c.detail["attention"] == L * 4 * N * K * C
    assert c.detail["weights"] == (params - P * C + N * C) * 2
    assert c.detail["kv_read"] == L * 2 * B * K * C * 2 and c.detail["kv_write"] == L * 2 * N * C * 2


@pytest.mark.exercise("8.5")
def test_matmul_term_against_flop_counter_other_config():
    torch.manual_seed(2)
    m = GPT(CFG).eval()
    cache = KVCache.for_model(m, 2)
    forward_cached(m, torch.randint(0, 7, (2, 9)), cache)
    with FlopCounterMode(display=False) as fc:
        forward_cached(m, torch.randint(0, 7, (2, 3)), cache)
    c = prof.step_cost(CFG, batch=2, new_tokens=3, context=9)
    course.answer("cost", {"flops": c.flops, "bytes": c.bytes, "detail": dict(c.detail)})
    assert c.detail["matmul"] == fc.get_total_flops()


@pytest.mark.exercise("8.5")
def test_strict_efficiency_threshold():
    p = prof.classify("x", prof.Cost(50, 10), 1.0, 100.0, 10.0, min_efficiency=0.9)  # intensity 5 < ridge 10
    q = prof.classify("y", prof.Cost(50, 10), 1.2, 100.0, 10.0, min_efficiency=0.9)
    for name, pt in (("x", p), ("y", q)):
        course.answer(name, {"intensity": pt.intensity, "achieved": pt.achieved, "attainable": pt.attainable,
                             "efficiency": pt.efficiency, "regime": pt.regime})
    assert p.attainable == 50 and p.efficiency == 1.0 and p.regime == "bandwidth"
    assert q.regime == "overhead"


# ---- 8.6 -------------------------------------------------------------------------------------

def _rec(**kw):
    r = {"request_id": "a", "prompt_tokens": 3, "output_tokens": 2, "queue_s": 0.5, "ttft_s": 1.0, "prefill_s": 0.5,
         "decode_s": 1.0, "e2e_s": 2.0, "mean_tpot_s": None, "finish_reason": "stop", "prefix_hit_tokens": 16}
    r.update(kw)
    return r


@pytest.mark.exercise("8.6")
def test_crlf_nulls_and_string_times():
    lines = [json.dumps(_rec()) + "\r\n", json.dumps(_rec(e2e_s="2.0")) + "\r\n", "   \r\n",
             json.dumps(_rec(ttft_s=float("inf"))).replace("Infinity", "1e999")]
    log = prof.parse_request_log(lines)
    course.answer("records", [dict(r) for r in log.records])
    course.answer("malformed_lines", [n for n, _ in log.malformed])  # the reasons' wording is free
    assert len(log.records) == 1 and log.records[0]["mean_tpot_s"] is None
    assert [n for n, _ in log.malformed] == [2, 4]


@pytest.mark.exercise("8.6")
def test_single_record_breakdown():
    bd = prof.latency_breakdown([_rec()])
    course.answer("breakdown", {phase: dict(v) for phase, v in bd.items()})
    assert bd["queue"] == {"p50": 0.5, "p99": 0.5, "mean": 0.5, "share": 0.25}
    assert bd["decode"]["share"] == 0.5 and bd["ttft"]["p99"] == 1.0


# ---- 8.7 -------------------------------------------------------------------------------------

@pytest.mark.exercise("8.7")
def test_roofline_and_latency_only(model, tmp_path, report_check, report_json):
    data = prof.collect(model, sections=["roofline", "latency"], quick=True)
    md = prof.write_report(data, tmp_path).read_text()
    # the report's shape (its numbers are this run's measurements): sections, images, files,
    # and how many of its figures do not come from the data
    course.answer("sections", [ln for ln in md.splitlines() if ln.startswith("## ")])
    course.answer("images", sorted(set(re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md))))
    course.answer("files", sorted(f.name for f in tmp_path.iterdir()))
    course.answer("unexplained_numbers", len(report_check(md, data)))
    for png in ("sweep.png", "roofline.png", "latency.png"):  # the roofline needs the sweep's step times
        assert (tmp_path / png).exists()
    assert report_check(md, data) == [] and report_json(md) == data
    assert data["latency"]["recommendation"]["key"] in md
    assert not np.isnan(data["roofline"]["peak_flops"])
