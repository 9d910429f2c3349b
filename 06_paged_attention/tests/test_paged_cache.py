"""Exercises 6.2-6.3: block tables, the slot mapping, and the paged cache behind stage
04's protocol (reserve / write / view), checked against a dense reference and against
the model's own full forward."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import course

p = course.load("paged")


def small_cache(**kw) -> "p.PagedKVCache":
    args = dict(n_layer=2, batch=3, n_head=2, max_len=20, head_dim=4, num_blocks=16, block_size=3)
    args.update(kw)
    dims = [args.pop(k) for k in ("n_layer", "batch", "n_head", "max_len", "head_dim")]
    return p.PagedKVCache(*dims, **args)


# ---- 6.2 -----------------------------------------------------------------------------------

@pytest.mark.exercise("6.2")
@pytest.mark.parametrize("n, bs, want", [(0, 4, 0), (1, 4, 1), (4, 4, 1), (5, 4, 2), (16, 16, 1), (17, 16, 2),
                                         (7, 3, 3), (1, 1, 1)])
def test_blocks_needed(n, bs, want):
    assert p.blocks_needed(n, bs) == want


@pytest.mark.exercise("6.2")
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=25)
@given(bs=st.integers(1, 7), data=st.data())
def test_slot_mapping_matches_the_definition(bs, data):
    B, nb = 3, 5
    tables = torch.tensor(data.draw(st.lists(st.lists(st.integers(0, 40), min_size=nb, max_size=nb),
                                             min_size=B, max_size=B)))
    n = data.draw(st.integers(1, 12))
    rows = torch.tensor(data.draw(st.lists(st.integers(0, B - 1), min_size=n, max_size=n)))
    pos = torch.tensor(data.draw(st.lists(st.integers(0, nb * bs - 1), min_size=n, max_size=n)))
    got = p.slot_mapping(tables, rows, pos, bs)
    want = [int(tables[r, q // bs]) * bs + q % bs for r, q in zip(rows.tolist(), pos.tolist())]
    assert got.dtype == torch.int64 and got.tolist() == want


@pytest.mark.exercise("6.2")
def test_reserve_takes_a_new_block_only_when_the_last_is_full():
    c = small_cache(block_size=4)
    rows = torch.tensor([0, 1])
    for n in range(1, 11):
        c.reserve(rows, torch.tensor([n, 2 * n - 1]))
        c.lengths[rows] = torch.tensor([n, 2 * n - 1])
        assert [len(c.tables[0]), len(c.tables[1])] == [p.blocks_needed(n, 4), p.blocks_needed(2 * n - 1, 4)]
    # the table tensor mirrors the lists, padded with -1
    assert c.block_tables[0, :3].tolist() == c.tables[0] and c.block_tables[0, 3:].eq(-1).all()
    assert len(set(c.tables[0]) | set(c.tables[1])) == len(c.tables[0]) + len(c.tables[1]), "rows share a block"
    c.reset([0])
    assert c.tables[0] == [] and int(c.lengths[0]) == 0 and c.allocator.num_free_blocks == 16 - len(c.tables[1])


@pytest.mark.exercise("6.2")
def test_reserve_when_the_pool_is_full_raises_and_changes_nothing():
    c = small_cache(num_blocks=4, block_size=2)
    c.reserve(torch.tensor([0]), torch.tensor([5]))          # 3 blocks
    c.lengths[0] = 5
    tables = [list(t) for t in c.tables]
    with pytest.raises(p.CacheFullError):
        c.reserve(torch.tensor([1, 2]), torch.tensor([2, 2]))  # needs 2, 1 free
    assert c.tables == tables and c.allocator.num_free_blocks == 1
    with pytest.raises(p.CacheFullError, match="max_len"):
        c.reserve(torch.tensor([0]), torch.tensor([21]))


@pytest.mark.exercise("6.2")
def test_bad_configurations_are_clear_errors():
    for bad in (0, -3, 1.5):
        with pytest.raises(ValueError, match="block_size"):
            small_cache(block_size=bad)
        with pytest.raises(ValueError, match="num_blocks"):
            small_cache(num_blocks=bad)
    c = small_cache()
    with pytest.raises(ValueError, match="rows"):
        c.reserve(torch.tensor([5]), torch.tensor([1]))
    with pytest.raises(ValueError, match="rows"):
        c.reset([3])


# ---- 6.3 -----------------------------------------------------------------------------------

@pytest.mark.exercise("6.3")
def test_write_stores_into_the_pools_themselves():
    c = small_cache()
    c.reserve(torch.tensor([0, 1]), torch.tensor([4, 2]))
    rows, pos = torch.tensor([0, 0, 1]), torch.tensor([1, 3, 0])
    k, v = torch.randn(3, 2, 4), torch.randn(3, 2, 4)
    c.write(1, rows, pos, k, v)
    slots = p.slot_mapping(c.block_tables, rows, pos, c.block_size)
    for name, pool, want in (("k", c.k, k), ("v", c.v, v)):
        got = pool[1].reshape(-1, 2, 4)[slots]
        assert torch.equal(got, want), (
            f"after write(1, rows, positions, k, v) the pool self.{name}[1], seen as (num_blocks * block_size, H, "
            f"D), must hold {name}[i] at slot_mapping's slot of (rows[i], positions[i]), slots {slots.tolist()}: "
            "the pool itself, not a copy of it")
    assert not c.k[0].any() and not c.v[0].any(), "write(1, ...) must change layer 1's pools only"


@pytest.mark.exercise("6.3")
def test_view_is_rows_heads_positions_dims():
    c = small_cache()
    c.reserve(torch.tensor([0, 2]), torch.tensor([5, 2]))
    c.k.copy_(torch.arange(c.k.numel(), dtype=c.k.dtype).reshape(c.k.shape))  # every element its own value
    c.v.copy_(-c.k)
    K, V = c.view(1, torch.tensor([2, 0]), 5)
    assert K.shape == V.shape == (2, 2, 5, 4), f"view returns (B, H, length, D): got {tuple(K.shape)}"
    for i, r in enumerate((2, 0)):
        n = 5 if r == 0 else 2
        slots = p.slot_mapping(c.block_tables, torch.full((n,), r), torch.arange(n), c.block_size)
        want = c.k[1].reshape(-1, 2, 4)[slots].transpose(0, 1)  # (H, n, D)
        assert torch.equal(K[i, :, :n], want) and torch.equal(V[i, :, :n], -want), (
            f"view's K[b, h, t] is head h of the key at row rows[b]'s position t, read at its slot: row {r} (b = {i}) "
            "differs")
    assert K.data_ptr() != c.k.data_ptr(), "view returns a copy"


@pytest.mark.exercise("6.3")
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=20)
@given(bs=st.integers(1, 6), data=st.data())
def test_view_returns_what_was_written(bs, data):
    """Random ragged writes through the block tables; every view equals a dense reference.
    The pool holds every row at max_len (3 rows x ceil(20 / bs) blocks): with a fixed pool,
    small block sizes (bs = 1: up to 60 blocks) could run out, a CacheFullError that is no
    bug of the cache."""
    c = small_cache(block_size=bs, num_blocks=3 * -(-20 // bs))
    ref_k = torch.zeros(2, 3, 2, 20, 4)
    ref_v = torch.zeros_like(ref_k)
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**16)))
    for _ in range(data.draw(st.integers(1, 4))):
        new = torch.tensor(data.draw(st.lists(st.integers(0, 6), min_size=3, max_size=3)))
        start = c.lengths.clone()
        if int((start + new).max()) > 20:
            break
        c.reserve(slice(0, 3), start + new)
        rows = torch.arange(3).repeat_interleave(new)
        pos = torch.cat([torch.arange(int(s), int(s + n)) for s, n in zip(start, new)])
        for layer in range(2):
            k, v = torch.randn(len(rows), 2, 4, generator=gen), torch.randn(len(rows), 2, 4, generator=gen)
            c.write(layer, rows, pos, k, v)
            ref_k[layer][rows, :, pos] = k
            ref_v[layer][rows, :, pos] = v
        c.lengths += new
    length = int(c.lengths.max())
    pick = data.draw(st.sampled_from([slice(0, 3), slice(1, 3), torch.tensor([2, 0])]))
    for layer in range(2):
        K, V = c.view(layer, pick, length)
        want_shape = (len(range(3)[pick]) if isinstance(pick, slice) else 2, 2, length, 4)
        assert K.shape == want_shape, f"view returns (B, H, length, D) = {want_shape}: got {tuple(K.shape)}"
        rows = torch.arange(3)[pick]
        for i, r in enumerate(rows.tolist()):
            n = int(c.lengths[r])
            assert torch.equal(K[i, :, :n], ref_k[layer, r, :, :n]) and torch.equal(V[i, :, :n], ref_v[layer, r, :, :n]), (
                f"block size {bs}, layer {layer}: view must give back, for row {r}, the K and V written at each of "
                f"its positions 0..{n - 1}")


@pytest.mark.exercise("6.3")
def test_write_recomputes_the_slots_when_rows_or_positions_change():
    """The memo of `write` is for the layers of ONE forward (the same rows AND positions
    objects); the same rows object with other positions must go to other slots."""
    c = small_cache()
    rows = torch.tensor([0, 0])
    c.reserve(torch.tensor([0]), torch.tensor([4]))
    first, second = torch.tensor([0, 1]), torch.tensor([2, 3])
    kv = lambda x: torch.full((2, 2, 4), float(x))  # noqa: E731
    c.write(0, rows, first, kv(1), kv(1))
    c.write(0, rows, second, kv(2), kv(2))
    K, _ = c.view(0, torch.tensor([0]), 4)
    assert K[0, 0, :, 0].tolist() == [1.0, 1.0, 2.0, 2.0], (
        "write may reuse `_slots_for` only when BOTH rows and positions are the objects it saw last; "
        "the same rows with new positions wrote into the old slots")


@pytest.mark.exercise("6.3")
def test_pools_have_the_documented_shape_and_size():
    c = small_cache()
    assert c.k.shape == c.v.shape == (2, 16, 3, 2, 4)
    assert c.nbytes == 2 * 2 * 16 * 3 * 2 * 4 * 4
    assert c.bytes_per_token() == 2 * 2 * 2 * 4 * 4


class _ViewOnly(p.PagedKVCache):
    attend = None  # forward_cached then reads the cache through `view`


@pytest.mark.exercise("6.3")
@pytest.mark.parametrize("bs", [1, 3, 16])
def test_forward_cached_through_view_equals_the_full_forward(model, chunked_forward, bs):
    """Stage 04's forward_cached on the paged cache (through write + view), prefill in
    ragged chunks then decode: the logits of the model's own full forward."""
    torch.manual_seed(0)
    seqs = torch.randint(0, 256, (3, 30))
    cache = _ViewOnly.for_model(model, 3, max_len=48, block_size=bs, num_blocks=64)
    schedule = ([5, 1, 9], [7, 0, 2], [1, 12, 3], [1, 1, 1])
    for b, got, want in chunked_forward(model, cache, seqs, schedule):
        assert torch.allclose(got, want, atol=1e-10), (
            f"block size {bs}, row {b}: forward_cached through write + view must give the model's own logits")
    assert cache.lengths.tolist() == [sum(row) for row in zip(*schedule)]


@pytest.mark.exercise("6.3")
def test_a_minus_one_table_entry_is_read_through_a_valid_slot(model, chunked_forward):
    """A short row's table ends in -1 entries when a view spans more blocks than it holds. Read
    through a negative slot, they wrap to the pool's last blocks; here those hold NaN (stale,
    as a freed block may), and a masked key's weight 0 times a NaN value is NaN."""
    torch.manual_seed(1)
    seqs = torch.randint(0, 256, (3, 30))
    cache = _ViewOnly.for_model(model, 3, max_len=48, block_size=4, num_blocks=64)
    cache.k[:, 16:] = float("nan")  # no row holds more than 4 blocks: blocks 16.. are never allocated
    cache.v[:, 16:] = float("nan")
    schedule = ([5, 1, 9], [7, 0, 2], [1, 12, 3], [1, 1, 1])
    for b, got, want in chunked_forward(model, cache, seqs, schedule):
        assert torch.isfinite(got).all() and torch.allclose(got, want, atol=1e-10), (
            f"row {b}: view must read a position past a row's blocks (table entry -1) through a valid slot, never "
            "a negative one: a negative slot wraps to the pool's last block, which held NaN here")
    assert max(max(t) for t in cache.tables) < 16
