"""Stage 08's decode floor on a Llama with the reference (given code that times with the
reference's time_fn, 8.1, and roofline, 8.4-8.5): the matvec bandwidth's bytes, and `collect` +
`floor_section` placing a tiny Llama's batch-1 decode step against its floor. Here, not in
08_profiling/tests/, because they load the reference, which a release --through 08 withholds
(tests/test_release_stages.py); the given code's own checks are 08_profiling/tests/test_profiling_llama.py."""

import re

import pytest

import course
from solutions.train import random_llama

prof = course.load("profiling", impl="solution")


def test_matvec_bandwidth_counts_the_weight_bytes():
    ticks = iter(range(1000))
    peak = prof.measure_matvec_bandwidth("cpu", nbytes=1 << 20, in_features=256, clock=lambda: next(ticks))
    assert peak.value == 1 << 20, "one call per clock tick: the bandwidth is the weight's bytes per second"
    assert peak.conditions.startswith("matvec (1 x 256) @ (1024 x 256).T, 1 MiB of float32 on cpu")


def test_collect_places_a_llamas_decode_step_against_its_floor():
    m = random_llama(vocab_size=64, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=48, max_seq_len=512)
    data = prof.collect(m, sections=["roofline"], quick=True, what="a tiny Llama")
    assert data["model"]["what"] == "a tiny Llama" and data["model"]["n_kv_heads"] == 2
    r = data["roofline"]
    b1 = next(p for p in r["points"] if p["name"] == "decode b=1")
    assert b1["bytes"] == prof.llama_step_cost(m.config, batch=1, new_tokens=1, context=64).bytes
    f = r["decode_floor"]
    assert f["floor_s"] == pytest.approx(b1["bytes"] / r["matvec_bandwidth"]) and f["step_s"] == b1["seconds"]
    md = "\n".join(prof.floor_section(data))
    assert "## Batch-1 decode against the memory-bandwidth floor" in md
    row = next(line for line in md.splitlines() if line.startswith("| decode b=1"))
    assert re.findall(r"[\d.]+", row)[-1] == prof._num(100 * f["of_floor"]), row
    assert prof.floor_section({"roofline": {"points": []}}) == []
