"""4.12: Q8_0 and Q4_1 blocks dequantised bit-exactly as `gguf.quants.dequantize` does (llama.cpp's
ggml-quants.c), on blocks gguf quantised, on hand-built blocks that isolate each rule, and on
SmolLM2's real tensors."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

import course

kc = course.load("kv_cache")
pytestmark = pytest.mark.exercise("4.12")
Q = gguf.GGMLQuantizationType


def bits(x):
    return np.asarray(x, dtype=np.float32).view(np.uint32)


def assert_bit_exact(got, want, what):
    assert got.dtype == np.float32, f"{what}: dtype {got.dtype}, want float32"
    assert got.shape == want.shape, f"{what}: shape {got.shape}, want {want.shape}"
    bad = np.flatnonzero(bits(got).reshape(-1) != bits(want).reshape(-1))
    assert bad.size == 0, (f"{what}: {bad.size} of {want.size} values differ from gguf's, first at {bad[0]}: "
                           f"{got.reshape(-1)[bad[0]]!r} != {want.reshape(-1)[bad[0]]!r}")


def block_q4_1(d, m, q):
    """One Q4_1 block by hand: fp16 d, fp16 m, and q[0..31] with q[j] in byte j's low nibble and
    q[j + 16] in its high nibble."""
    q = np.asarray(q, dtype=np.uint8)
    packed = q[:16] | (q[16:] << 4)
    return np.concatenate([np.float16(d).reshape(1).view(np.uint8), np.float16(m).reshape(1).view(np.uint8), packed])


def test_q4_1_nibble_order_low_nibbles_are_the_first_half():
    q = np.arange(32) % 16
    q[16:] = 15 - q[16:]  # the second half counts down: an interleave would mix the two
    got = kc.dequantize_q4_1(block_q4_1(1.0, 0.0, q))
    assert got.tolist() == q.astype(float).tolist(), (
        "byte j of a Q4_1 block holds element j in its LOW nibble and element j + 16 in its HIGH nibble (not 2j and "
        f"2j + 1, as 4.8's pack_int4): elements 0..3 and 16..19 came back {got[:4].tolist()} and "
        f"{got[16:20].tolist()}, want {q[:4].tolist()} and {q[16:20].tolist()}")


def test_q4_1_adds_its_minimum():
    got = kc.dequantize_q4_1(block_q4_1(0.5, -3.0, [0] * 16 + [15] * 16))
    assert got.tolist() == [-3.0] * 16 + [4.5] * 16, (
        "a Q4_1 weight is d * q + m, m the block's fp16 minimum (q = 0 is m itself): d 0.5, m -3, q 0 and 15 came "
        f"back {got[0]!r} and {got[16]!r}, want -3.0 and 4.5")


def test_q8_0_is_signed_and_scaled_by_its_fp16_d():
    q = np.array([-128, -1, 0, 1, 127] + [0] * 27, dtype=np.int8)
    raw = np.concatenate([np.float16(0.25).reshape(1).view(np.uint8), q.view(np.uint8)])
    got = kc.dequantize_q8_0(raw)
    assert got[:5].tolist() == [-32.0, -0.25, 0.0, 0.25, 31.75], (
        f"got {got[:5].tolist()}: a Q8_0 block is an fp16 scale d then 32 SIGNED int8 values, weight = d * q")


def test_dequantised_in_float32_arithmetic():
    # d = 0.3 and m = -2.7 are not exact in float16: d * q + m rounded to float16 differs from float32's
    d, m = np.float16(0.3), np.float16(-2.7)
    q = np.arange(32) % 16
    want = np.float32(d) * q.astype(np.float32) + np.float32(m)
    got = kc.dequantize_q4_1(block_q4_1(d, m, q))
    bad = np.flatnonzero(bits(got) != bits(want))
    assert got.dtype == np.float32 and bad.size == 0, (
        f"Q4_1 weight {bad[0] if bad.size else 0}: got {got[bad[0] if bad.size else 0]!r}, want "
        f"{want[bad[0] if bad.size else 0]!r}: weight i is float32(d) * q[i] + float32(m), each step in float32 "
        "(in float16 it rounds to 11 bits)")
    q8 = np.arange(-16, 16).astype(np.int8)
    raw = np.concatenate([d.reshape(1).view(np.uint8), q8.view(np.uint8)])
    got, want = kc.dequantize_q8_0(raw), np.float32(d) * q8.astype(np.float32)
    bad = np.flatnonzero(bits(got) != bits(want))
    assert got.dtype == np.float32 and bad.size == 0, (
        f"Q8_0 weight {bad[0] if bad.size else 0}: got {got[bad[0] if bad.size else 0]!r}, want "
        f"{want[bad[0] if bad.size else 0]!r}: weight i is float32(d) * float32(q[i]), in float32 (in float16 it "
        "rounds to 11 bits)")


def test_several_blocks_keep_their_own_scales():
    a, b = block_q4_1(1.0, 0.0, [1] * 32), block_q4_1(2.0, 10.0, [1] * 32)
    got = kc.dequantize_q4_1(np.concatenate([a, b]))
    assert got.shape == (64,) and got[:32].tolist() == [1.0] * 32 and got[32:].tolist() == [12.0] * 32, (
        f"two blocks (d 1, m 0) and (d 2, m 10), every q 1: got {got[:1].tolist()} and {got[32:33].tolist()}, want "
        "1.0 and 12.0: each block is read with its own d and m, 32 weights a block")


@pytest.mark.parametrize("qtype,fn", [(Q.Q8_0, "dequantize_q8_0"), (Q.Q4_1, "dequantize_q4_1")])
@pytest.mark.parametrize("seed", [0, 1])
def test_blocks_gguf_quantised_come_back_bit_exact(qtype, fn, seed):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((6, 96)) * rng.uniform(0.01, 3, (6, 1))).astype(np.float32)
    w[2] += 1.5  # a row whose minimum is far from 0 (Q4_1's m matters)
    raw = gguf.quants.quantize(w, qtype)
    assert_bit_exact(getattr(kc, fn)(raw).reshape(w.shape), gguf.quants.dequantize(raw, qtype), fn)


def test_random_bytes_with_finite_scales():
    rng = np.random.default_rng(7)
    for qtype, fn, size in ((Q.Q8_0, "dequantize_q8_0", 34), (Q.Q4_1, "dequantize_q4_1", 20)):
        raw = rng.integers(0, 256, (40, size), dtype=np.uint8)
        raw[:, :4 if size == 20 else 2] = np.float16(rng.uniform(-4, 4, (40, 2 if size == 20 else 1))).view(np.uint8)
        assert_bit_exact(getattr(kc, fn)(raw.reshape(-1)).reshape(40, 32), gguf.quants.dequantize(raw, qtype), fn)


def test_bad_blocks_are_refused():
    for fn, size in (("dequantize_q8_0", 34), ("dequantize_q4_1", 20)):
        with pytest.raises(ValueError, match="raw"):
            getattr(kc, fn)(np.zeros(size + 1, dtype=np.uint8))
        with pytest.raises(ValueError, match="raw"):
            getattr(kc, fn)(np.zeros(size, dtype=np.int8))
        assert getattr(kc, fn)(np.zeros((3, size), dtype=np.uint8)).shape == (96,)  # any shape of whole blocks


def test_tensors_of_a_file_dequantise_to_their_shape(tmp_path, write_llama_gguf):
    path = write_llama_gguf(tmp_path / "t.gguf", types={"token_embd": Q.Q8_0, "attn_q": Q.Q4_1, "ffn_down": Q.F16})
    f, r = kc.read_gguf(path), gguf.GGUFReader(path)
    for t in r.tensors:
        assert_bit_exact(kc.dequantize_tensor(f.tensors[t.name]), gguf.quants.dequantize(t.data, t.tensor_type), t.name)


def test_smollm2_tensors_bit_exact(smollm2_gguf):
    g = smollm2_gguf()
    for name in ("token_embd.weight", "blk.0.attn_q.weight", "blk.0.ffn_down.weight", "blk.29.attn_k.weight",
                 "output_norm.weight"):
        t = g.tensors[name]
        want = gguf.quants.dequantize(t.data.reshape(t.shape[0], -1) if len(t.shape) > 1 else t.data, t.ggml_type)
        assert_bit_exact(kc.dequantize_tensor(t), want.reshape(t.shape), name)
