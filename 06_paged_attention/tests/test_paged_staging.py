"""Given code: `DecodeStaging` (decode_staging.py), the decode rows' K/V kept dense between
steps behind `PagedKVCache.attend`. Whatever it serves equals attention read slot by slot
from the blocks (with NaN in every stale slot). What breaks a run (a row leaving, a reset,
a prompt chunk, tokens written without a decode call, a fork) is never served from an old
copy; the copies never outgrow the pools; and the engine's tokens are those generated
alone, staged or not. The code under test is given, but it runs on your cache: each test
is filed under the last exercise it needs (6.4's `paged_attention`, which serves a run's
first calls; 6.7's `fork_row`; 6.8's engine)."""

from __future__ import annotations

import pytest
import torch

import course
from solutions.batching import ContinuousBatching
from solutions.workload import Trace, TraceRequest

p = course.load("paged")

H, D, BS = 2, 4, 4


def make_cache(batch=4, num_blocks=64, max_len=64):
    return p.PagedKVCache(1, batch, H, max_len, D, block_size=BS, num_blocks=num_blocks, dtype=torch.float64)


def oracle(cache, rows, q, pos):
    """Each row's decode query over its keys 0..pos[b], read slot by slot through its table."""
    out = torch.empty_like(q)
    for b, r in enumerate(rows):
        table, n = cache.tables[r], int(pos[b]) + 1
        K = torch.stack([cache.k[0, table[t // BS], t % BS] for t in range(n)])  # (n, H, D)
        V = torch.stack([cache.v[0, table[t // BS], t % BS] for t in range(n)])
        w = (torch.einsum("hd,nhd->hn", q[b, :, 0], K) * D ** -0.5).softmax(-1)
        out[b, :, 0] = torch.einsum("hn,nhd->hd", w, V)
    return out


def poison(cache):
    """NaN in every slot no row holds a token in."""
    held = torch.zeros(cache.num_blocks, BS, dtype=torch.bool)
    for r, table in enumerate(cache.tables):
        for t in range(int(cache.lengths[r])):
            held[table[t // BS], t % BS] = True
    cache.k[0][~held] = float("nan")
    cache.v[0][~held] = float("nan")


def append(cache, rows, n, gen):
    """n new tokens on each of `rows` (random K/V), written as the engine writes them."""
    rows_t = torch.tensor(rows)
    start = cache.lengths[rows_t].clone()
    cache.reserve(rows_t, start + n)
    for t in range(n):
        cache.write(0, rows_t, start + t, torch.randn(len(rows), H, D, generator=gen, dtype=torch.float64),
                    torch.randn(len(rows), H, D, generator=gen, dtype=torch.float64))
    return rows_t, start


def decode(cache, rows, gen):
    """One decode step of `rows`: write each row's new token, NaN in every stale slot,
    attend. Returns (attend's y, the oracle's)."""
    rows_t, pos = append(cache, rows, 1, gen)
    cache.lengths[rows_t] = pos + 1
    poison(cache)
    q = torch.randn(len(rows), H, 1, D, generator=gen, dtype=torch.float64)
    return cache.attend(0, rows_t, q, pos[:, None]), oracle(cache, rows, q, pos)


def prefill(cache, lengths, gen, rows=None):
    for r, n in zip(range(len(lengths)) if rows is None else rows, lengths):
        rows_t, start = append(cache, [r], n, gen)
        cache.lengths[rows_t] = start + n


@pytest.mark.exercise("6.4")
@pytest.mark.parametrize("lengths", [(6, 6, 6, 6), (5, 9, 2, 7)], ids=["equal", "ragged"])
def test_a_decode_run_is_served_from_its_copy_and_equals_the_blocks(lengths):
    gen = torch.Generator().manual_seed(0)
    cache = make_cache()
    prefill(cache, lengths, gen)
    steps = 3 * p.DecodeStaging.HEADROOM_BLOCKS * BS  # long enough to outgrow two copies
    for _ in range(steps):
        y, want = decode(cache, [0, 1, 2, 3], gen)
        torch.testing.assert_close(y, want, rtol=0, atol=1e-12)
    st = cache.staging
    assert st.steps_staged == steps - p.DecodeStaging.MIN_RUN, "every call past the first of a run is served"
    assert st.builds >= 3, "a row that outgrows its copy gets a new one"


@pytest.mark.exercise("6.7")
def test_what_breaks_a_run_is_never_read_from_an_old_copy():
    gen = torch.Generator().manual_seed(1)
    cache = make_cache()
    prefill(cache, (4, 6, 3, 5), gen)
    served, first = [], p.DecodeStaging.MIN_RUN

    def run(rows, n=first + 3):
        for _ in range(n):
            before = cache.staging.steps_staged
            y, want = decode(cache, rows, gen)
            torch.testing.assert_close(y, want, rtol=0, atol=1e-12)
            served.append(cache.staging.steps_staged > before)

    run([0, 1, 2])
    assert served == [False] * first + [True] * 3
    grow = int(cache.lengths[1]) - int(cache.lengths[3])
    rows_t, start = append(cache, [3], grow, gen)  # row 3 where row 1 is: its next position too
    cache.lengths[rows_t] = start + grow
    run([0, 3, 2], n=1)                       # row 1 swapped for row 3: a new run
    run([0, 2], n=1)                          # row 3 left: a new run
    assert served[-2:] == [False, False]
    n0 = int(cache.lengths[0])
    cache.reset([0])                          # row 0 restarts, refilled to the same length with other keys
    prefill(cache, [n0], gen, rows=[0])
    run([0, 2])
    rows_t, start = append(cache, [2], 3, gen)  # a prompt chunk on row 2 between two decodes
    q = torch.randn(1, H, 3, D, generator=gen, dtype=torch.float64)
    cache.attend(0, rows_t, q, start[:, None] + torch.arange(3))
    cache.lengths[rows_t] = start + 3
    run([0, 2])
    for r in (0, 2):                          # a token each, written without a decode call (`view`'s path)
        rows_t, start = append(cache, [r], 1, gen)
        cache.lengths[rows_t] = start + 1
    run([0, 2])
    cache.reset([3])
    cache.fork_row(0, 3)                      # row 3 now shares row 0's blocks (copy-on-write)
    run([0, 2, 3])
    assert sum(served) == 5 * 3, "each new run is served from its copy after its first calls"


@pytest.mark.exercise("6.4")
def test_the_copies_never_outgrow_the_pools():
    gen = torch.Generator().manual_seed(2)
    cache = make_cache(num_blocks=16)  # 64 slots: four rows of 10-15 tokens fit, their copies would not
    prefill(cache, (10, 10, 10, 10), gen)
    for _ in range(p.DecodeStaging.MIN_RUN + 2):
        y, want = decode(cache, [0, 1, 2, 3], gen)
        torch.testing.assert_close(y, want, rtol=0, atol=1e-12)
    assert cache.staging.steps_staged == 0 and cache.staging.builds == 0


@pytest.mark.exercise("6.8")
@pytest.mark.parametrize("staged", [True, False], ids=["staged", "never-staged"])
def test_a_burst_decodes_the_tokens_generated_alone(model, alone, serve, monkeypatch, staged):
    if not staged:
        monkeypatch.setattr(p.DecodeStaging, "MIN_RUN", 10**9)
    trace = Trace(tuple(TraceRequest(0.0, tuple(range(3 + i, 9 + i)), 18) for i in range(6)))
    engines = []

    def make(c):
        engines.append(p.PagedEngine(model, ContinuousBatching(8), block_size=2, clock=c))
        return engines[-1]

    res = serve(make, trace)
    for r in res.requests:
        assert r.output == alone(r.prompt, r.max_new_tokens)[0], f"request {r.request_id}"
    assert (engines[0].cache.staging.steps_staged > 0) == staged
