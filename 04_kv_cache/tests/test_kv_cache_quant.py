"""Weight quantisation (4.8 INT4 groups, 4.9 QuantLinear, 4.10 AWQ) and the safetensors
checkpoint (given).

Bounds: round-to-nearest puts every element within half a step of the original, so
|w - dequantised| <= scale / 2 of its channel (INT8, one scale per output row) or of its group
(INT4, `group_size` columns of a row), up to float32 rounding (a relative 1e-5 here).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import course
from solutions.fileio import CheckpointError

kc = course.load("kv_cache")

SLACK = 1e-5  # float32 rounding on top of the half step


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def within_half_step(w, back, scale, group_size):
    """Largest |w - back| of each group over its scale / 2 (<= 1 when the bound holds)."""
    out, width = w.shape
    err = (w - back).abs().reshape(out, width // group_size, group_size).amax(-1)
    return float((err / (scale / 2).clamp_min(1e-30)).max())


def assert_within_half_step(w, back, scale, group_size):
    worst = within_half_step(w, back, scale, group_size)
    assert worst <= 1 + SLACK, (
        f"every element must come back within scale / 2 of its group (round to the nearest level): the worst is "
        f"{worst:.2f} half-steps off")


def assert_scale_spans_the_range(scale, w, group_size):
    """Each group's 16 levels 0..15 span its range widened to include 0 in 15 equal steps."""
    g = w.float().reshape(w.shape[0], -1, group_size)
    lo, hi = g.amin(-1).clamp(max=0), g.amax(-1).clamp(min=0)
    torch.testing.assert_close(scale, (hi - lo) / 15, rtol=1e-6, atol=0, msg=lambda m: (
        "a group's 16 levels 0..15 must span its range, widened to include 0, in equal steps of scale (the "
        f"lowest level is lo, the highest hi): got {scale.flatten()[:4].tolist()}, want "
        f"{((hi - lo) / 15).flatten()[:4].tolist()}\n{m}"))


# ---------------------------------------------------------------------- 4.8
@pytest.mark.exercise("4.8")
def test_pack_puts_the_even_element_in_the_low_nibble():
    q = torch.tensor([[1, 2, 15, 0, 3, 12]], dtype=torch.uint8)
    got = kc.pack_int4(q).tolist()
    assert got == [[0x21, 0x0F, 0xC3]], (
        f"pack_int4([1, 2, 15, 0, 3, 12]) gave {[hex(b) for b in got[0]]}: byte j holds q[2j] in its LOW four bits "
        "and q[2j + 1] in its HIGH four bits (0x21, 0x0f, 0xc3)")
    back = kc.unpack_int4(torch.tensor([[0x21]], dtype=torch.uint8)).tolist()
    assert back == [[1, 2]], f"unpack_int4(0x21) gave {back}: the low nibble (1) is the even element, the high (2) the odd"
    every = torch.arange(256, dtype=torch.int64).to(torch.uint8)[None]
    assert torch.equal(kc.pack_int4(kc.unpack_int4(every)), every), "pack_int4(unpack_int4(b)) must give every byte b back"


@pytest.mark.exercise("4.8")
@pytest.mark.parametrize("group_size", [32, 16])
def test_int4_round_trip_is_within_half_a_step_of_each_group(group_size):
    w = torch.randn(6, 64, generator=gen(1))
    packed, scale, zero = kc.quantize_int4(w, group_size)
    assert packed.dtype == torch.uint8 and tuple(packed.shape) == (6, 32)
    assert scale.dtype == torch.float32 and tuple(scale.shape) == (6, 64 // group_size)
    assert zero.dtype == torch.uint8 and tuple(zero.shape) == (6, 64 // group_size)
    assert int(zero.max()) <= 15 and int(kc.unpack_int4(packed).max()) <= 15
    back = kc.dequantize_int4(packed, scale, zero, group_size)
    assert back.dtype == torch.float32 and back.shape == w.shape
    assert_scale_spans_the_range(scale, w, group_size)  # the whole 0..15 range used
    assert_within_half_step(w, back, scale, group_size)


@pytest.mark.exercise("4.8")
def test_groups_are_consecutive_columns_with_their_own_scale_and_zero():
    # row 0: group 0 spans -1..2, group 1 spans -100..50; row 1 the other way round
    a, b = torch.linspace(-1.0, 2.0, 8), torch.linspace(-100.0, 50.0, 8)
    w = torch.stack([torch.cat([a, b]), torch.cat([b, a])])
    packed, scale, zero = kc.quantize_int4(w, 8)
    torch.testing.assert_close(scale, torch.tensor([[0.2, 10.0], [10.0, 0.2]]), rtol=1e-6, atol=0, msg=lambda m: (
        "group g of row o is columns g*group_size..(g+1)*group_size - 1, with its own scale: its 16 levels span "
        f"its range (-1..2 or -100..50) in equal steps; got {scale.tolist()}\n{m}"))
    assert zero.tolist() == [[5, 10], [10, 5]], (
        f"zero {zero.tolist()}: a group's zero point is the level 0.0 falls on (-1..2 in steps of 0.2: level 5)")
    q = kc.unpack_int4(packed)
    assert q[:, [0, 8]].tolist() == [[0, 0], [0, 0]] and q[:, [7, 15]].tolist() == [[15, 15], [15, 15]], (
        "a group's smallest element must be level 0 and its largest level 15")
    back = kc.dequantize_int4(packed, scale, zero, 8)
    assert_within_half_step(w, back, scale, 8)
    assert float((back[0, :8] - a).abs().max()) <= 0.1 + SLACK, "the small group must keep its own precision"


@pytest.mark.exercise("4.8")
def test_a_level_is_the_zero_point_plus_the_rounded_steps():
    # range -1.25..2.5 in steps of 0.25 (exact in binary): the zero point is 5; 0.625 is 2.5 steps and -0.375
    # is -1.5, ties that round to even (2 and -2) BEFORE the zero point is added; rounding after would give 8, 4
    w = torch.tensor([[-1.25, 2.5, 0.625, -0.375, 0.0, 1.0]])
    packed, scale, zero = kc.quantize_int4(w, 6)
    assert float(scale[0, 0]) == 0.25 and int(zero[0, 0]) == 5, (
        f"scale {float(scale[0, 0])}, zero {int(zero[0, 0])}: -1.25..2.5 in 15 steps is 0.25, and 0.0 is level 5")
    levels = kc.unpack_int4(packed)[0].tolist()
    assert levels == [0, 15, 7, 3, 5, 9], (
        f"levels {levels}, want [0, 15, 7, 3, 5, 9]: an element's level is the zero point plus its own value's "
        "nearest whole number of steps, a tie to the even number (2.5 steps -> 2, -1.5 -> -2), not the rounded "
        "sum")


@pytest.mark.exercise("4.8")
def test_an_outlier_costs_only_its_own_group():
    w = torch.randn(4, 64, generator=gen(2)) * 0.02
    w[1, 5] = 50.0  # one outlier weight in row 1, group 0
    packed, scale, zero = kc.quantize_int4(w, 32)
    back = kc.dequantize_int4(packed, scale, zero, 32)
    assert_scale_spans_the_range(scale, w, 32)
    assert_within_half_step(w, back, scale, 32)
    rest = torch.ones_like(w, dtype=torch.bool)
    rest[1, :32] = False
    assert float((w - back).abs()[rest].max()) < 0.01, "an outlier must cost only its own group: every other group keeps its small step"


@pytest.mark.exercise("4.8")
def test_zero_and_constant_groups():
    w = torch.zeros(2, 32)
    w[0, 16:] = 0.3  # row 0: a zero group, then a constant one; row 1: all zeros
    packed, scale, zero = kc.quantize_int4(w, 16)
    back = kc.dequantize_int4(packed, scale, zero, 16)
    assert not torch.isnan(back).any() and not torch.isnan(scale).any(), "an all-zero group must give no NaN"
    assert scale[1].tolist() == [0.0, 0.0] and zero[1].tolist() == [0, 0] and back[1].abs().max() == 0, (
        f"an all-zero group gives scale 0, zero 0, q 0: got scale {scale[1].tolist()}, zero {zero[1].tolist()}")
    assert back[0, :16].abs().max() == 0, "an all-zero group must come back as zeros"
    torch.testing.assert_close(back[0, 16:], torch.full((16,), 0.3), rtol=0, atol=1e-6, msg=lambda m: (
        "a constant group (0.3) must come back exactly: its range widened to include 0 is 0..0.3, so 0.3 is a "
        f"level; got {back[0, 16:4 + 16].tolist()}\n{m}"))


@pytest.mark.exercise("4.8")
def test_int4_bad_input_names_the_argument():
    w = torch.randn(4, 64)
    for bad in (24, 0, 128, 2.0):
        with pytest.raises(ValueError, match="group_size"):
            kc.quantize_int4(w, bad)
    with pytest.raises(ValueError, match="even"):
        kc.quantize_int4(torch.randn(4, 9), 9)
    with pytest.raises(TypeError, match="w must be"):
        kc.quantize_int4(torch.ones(4, 64, dtype=torch.int64), 32)
    for fine in (64, 2):  # the whole row as one group, and groups of two columns, are fine
        packed, scale, zero = kc.quantize_int4(w, fine)
        assert tuple(scale.shape) == (4, 64 // fine)
        assert_within_half_step(w, kc.dequantize_int4(packed, scale, zero, fine), scale, fine)


# ---------------------------------------------------------------------- 4.9
@pytest.mark.exercise("4.9")
def test_int8_weights_get_one_scale_per_output_channel():
    w = torch.randn(8, 48, generator=gen(3))
    w[3] *= 100.0  # an outlier output channel
    qweight, scale, zero = kc.quantize_weight(w, 8)
    assert zero is None and qweight.dtype == torch.int8 and tuple(qweight.shape) == (8, 48)
    assert scale.dtype == torch.float32 and tuple(scale.shape) == (8, 1)
    torch.testing.assert_close(scale[:, 0], w.abs().amax(dim=1) / 127, rtol=1e-6, atol=0)
    back = qweight.float() * scale
    assert within_half_step(w, back, scale, 48) <= 1 + SLACK
    others = torch.arange(8) != 3
    assert float((w - back)[others].abs().max()) < 0.03  # the outlier row does not spoil the others


def _linear(n_in, n_out, seed, bias=True):
    torch.manual_seed(seed)
    return nn.Linear(n_in, n_out, bias=bias)


@pytest.mark.exercise("4.9")
@pytest.mark.parametrize("bits", [8, 4])
def test_quant_linear_computes_with_its_dequantised_weight(bits):
    lin = _linear(64, 24, 4)
    before = lin.weight.detach().clone()
    q = kc.QuantLinear(lin, bits=bits, group_size=16, use_kernel=False)
    assert torch.equal(lin.weight, before)  # the caller's layer is not touched
    assert not list(q.parameters())  # buffers only
    w = q.dequantize()
    assert w.shape == (24, 64) and w.dtype == torch.float32
    if bits == 8:
        assert within_half_step(before, w, q.scale, 64) <= 1 + SLACK
    else:
        assert within_half_step(before, w, q.scale, 16) <= 1 + SLACK
    x = torch.randn(3, 5, 64, generator=gen(5))
    torch.testing.assert_close(q(x), x @ w.T + lin.bias.detach(), rtol=1e-5, atol=1e-5)
    assert q(x.double()).dtype == torch.float64
    assert q.weight_bytes() == (24 * 64 + 24 * 4 if bits == 8 else 24 * 32 + 24 * 4 * (4 + 1))


@pytest.mark.exercise("4.9")
def test_quant_linear_with_an_input_scale_still_computes_the_layer():
    lin = _linear(32, 8, 6, bias=False)
    s = torch.linspace(0.5, 4.0, 32)
    q = kc.QuantLinear(lin, bits=4, group_size=32, input_scale=s, use_kernel=False)
    # what is quantised is weight * s (column j times s[j]); dequantize divides it back out
    qw, scale, zero = kc.quantize_int4(lin.weight.detach() * s, 32)
    torch.testing.assert_close(q.dequantize(), kc.dequantize_int4(qw, scale, zero, 32) / s, rtol=1e-6, atol=1e-7)
    x = torch.randn(4, 32, generator=gen(7))
    torch.testing.assert_close(q(x), x @ q.dequantize().T, rtol=1e-5, atol=1e-6)
    assert q.bias is None


@pytest.mark.exercise("4.9")
def test_the_int8_kernel_path_agrees_with_dequantise_then_matmul():
    if not kc.int8_kernel_available():
        pytest.skip("torch._weight_int8pack_mm does not run here")
    lin = _linear(64, 40, 8)
    fast, slow = kc.QuantLinear(lin, 8), kc.QuantLinear(lin, 8, use_kernel=False)
    x = torch.randn(2, 3, 64, generator=gen(9))
    y, ref = fast(x), slow(x)
    assert y.shape == (2, 3, 40) and y.dtype == torch.float32
    assert float((y - ref).abs().max()) <= 0.02 * float(ref.abs().max())  # bfloat16 inside the kernel


@pytest.mark.exercise("4.9")
def test_the_int8_kernel_path_with_an_input_scale_still_computes_the_layer():
    if not kc.int8_kernel_available():
        pytest.skip("torch._weight_int8pack_mm does not run here")
    lin = _linear(64, 24, 11)
    s = torch.linspace(0.25, 4.0, 64)
    fast = kc.QuantLinear(lin, 8, input_scale=s)
    slow = kc.QuantLinear(lin, 8, input_scale=s, use_kernel=False)
    assert fast.use_kernel, "the given __init__ should have chosen the kernel for an INT8 layer 64 wide"
    x = torch.randn(2, 3, 64, generator=gen(12))
    y, ref = fast(x), slow(x)
    assert y.shape == (2, 3, 24) and y.dtype == torch.float32, f"got {tuple(y.shape)} {y.dtype}, want (2, 3, 24) float32"
    err, size = float((y - ref).abs().max()), float(ref.abs().max())
    assert err <= 0.02 * size, (
        f"with an input_scale the kernel path must compute the same layer as dequantise-then-matmul (the stored "
        f"int8 weight is W * s, column j times s[j], not W): largest difference {err:.3g} against outputs up to "
        f"{size:.3g}")


@pytest.mark.exercise("4.9")
def test_quantize_model_returns_a_new_model(tiny):
    before = {k: v.clone() for k, v in tiny.state_dict().items()}
    q8, q4 = kc.quantize_model(tiny, bits=8), kc.quantize_model(tiny, bits=4, group_size=32)
    assert all(torch.equal(before[k], v) for k, v in tiny.state_dict().items())
    assert isinstance(tiny.transformer.h[0].mlp.c_fc, nn.Linear)
    for q, bits in ((q8, 8), (q4, 4)):
        layers = {n: m for n, m in q.named_modules() if isinstance(m, (nn.Linear, kc.QuantLinear))}
        assert isinstance(layers.pop("lm_head"), nn.Linear)  # tied to the embedding: kept
        assert layers and all(isinstance(m, kc.QuantLinear) and m.bits == bits for m in layers.values())
    idx = torch.randint(0, 257, (2, 16), generator=gen(10))
    with torch.no_grad():
        ref, got = tiny(idx), q8(idx)
    assert float((got - ref).abs().max()) < 0.05 * float(ref.std())
    sizes = kc.weight_bytes(tiny), kc.weight_bytes(q8), kc.weight_bytes(q4)
    assert sizes[0]["linear"] == 4 * sum(m.weight.numel() for n, m in tiny.named_modules()
                                         if isinstance(m, nn.Linear) and n != "lm_head")
    assert sizes[0]["linear"] > 3.5 * sizes[1]["linear"] > 3.5 * 1.5 * sizes[2]["linear"]


@pytest.mark.exercise("4.9")
def test_quantisation_bad_input_names_the_argument(tiny):
    lin = _linear(32, 8, 11)
    for bits in (3, 16, True):
        with pytest.raises(ValueError, match="bits"):
            kc.QuantLinear(lin, bits=bits)
    with pytest.raises(ValueError, match="group_size"):
        kc.QuantLinear(lin, bits=4, group_size=24)
    with pytest.raises(ValueError, match="linear"):
        kc.QuantLinear(nn.Conv1d(32, 8, 1), bits=8)
    with pytest.raises(ValueError, match="bits"):
        kc.quantize_model(tiny, bits=2)
    with pytest.raises(ValueError, match="group_size"):
        kc.quantize_model(tiny, bits=4, group_size=24)  # 32 columns do not split into 24s
    with pytest.raises(TypeError, match="model"):
        kc.quantize_model("gpt", bits=8)
    q = kc.QuantLinear(lin, bits=4, group_size=32, use_kernel=False)  # one group per row is fine
    x = torch.randn(2, 32, generator=gen(17))
    torch.testing.assert_close(q(x), x @ q.dequantize().T + lin.bias.detach(), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------- 4.10
def _rtn_error(w, x, group_size):
    wq = kc.dequantize_int4(*kc.quantize_int4(w, group_size), group_size)
    return float(((x @ w.T - x @ wq.T) ** 2).mean())


def _error(w, x, s, group_size):
    wq = kc.dequantize_int4(*kc.quantize_int4(w * s, group_size), group_size) / s
    return float(((x @ w.T - x @ wq.T) ** 2).mean())


@pytest.mark.exercise("4.10")
def test_awq_beats_round_to_nearest_when_a_few_input_channels_are_large():
    w = torch.randn(48, 64, generator=gen(12))
    x = torch.randn(512, 64, generator=gen(13))
    x[:, [5, 40]] *= 30.0  # outlier activation channels: the case AWQ exists for
    s, alpha = kc.awq_search(w, x, group_size=32, grid=20)
    assert s.shape == (64,) and s.dtype == torch.float32, f"s must be (in,) float32, got {tuple(s.shape)} {s.dtype}"
    assert 0 < alpha < 1, (f"alpha {alpha}: with two input channels 30x larger, some alpha in (0, 1) gives a smaller "
                           f"OUTPUT error than RTN (alpha 0); judge candidates by x @ Wq.T against x @ W.T")
    rtn, awq = _rtn_error(w, x, 32), _error(w, x, s, 32)
    assert awq < 0.6 * rtn, f"AWQ output error {awq:.4g} vs round-to-nearest {rtn:.4g}"
    assert s[5] > s.median() and s[40] > s.median(), \
        "the large-activation channels must get the larger scales: s = mean|x| ** alpha, normalised"


@pytest.mark.exercise("4.10")
def test_awq_scales_follow_the_chosen_alpha_and_never_lose_to_rtn():
    w = torch.randn(16, 32, generator=gen(14))
    x = torch.randn(64, 32, generator=gen(15)) * torch.linspace(0.1, 3.0, 32)
    s, alpha = kc.awq_search(w, x, group_size=16, grid=10)
    a = x.abs().mean(0) ** alpha
    torch.testing.assert_close(s, a / (a.max() * a.min()).sqrt(), rtol=1e-5, atol=0, msg=lambda m: (
        f"s must be mean|x| ** alpha divided by sqrt(max * min) of those (alpha = {alpha}): {m}"))
    best = min(_error(w, x, (x.abs().mean(0) ** (i / 10)) / ((x.abs().mean(0) ** (i / 10)).max()
                                                             * (x.abs().mean(0) ** (i / 10)).min()).sqrt(), 16)
               for i in range(10))
    got = _error(w, x, s, 16)
    assert got <= best * (1 + 1e-4), (f"output error {got:.6g} of the chosen alpha {alpha}, but a candidate "
                                      f"k/grid reaches {best:.6g}: the smallest output error over k = 0..grid-1 wins")
    assert got <= _rtn_error(w, x, 16) * (1 + 1e-6), "alpha 0 (s = 1, RTN) is a candidate: AWQ never loses to RTN"
    s1, alpha1 = kc.awq_search(w, x, group_size=16, grid=1)  # the one candidate: alpha 0, plain RTN
    assert alpha1 == 0 and torch.equal(s1, torch.ones(32)), (
        f"grid=1 has one candidate, alpha 0 with s = 1 exactly; got alpha {alpha1}, s {s1[:4].tolist()}...")


@pytest.mark.exercise("4.10")
def test_awq_quantize_gives_every_layer_its_scales(tiny):
    ids = torch.randint(0, 257, (2, 32), generator=gen(16))
    q, alphas = kc.awq_quantize(tiny, ids, group_size=16, grid=4)
    names = [n for n, m in tiny.named_modules() if isinstance(m, nn.Linear) and n != "lm_head"]
    assert sorted(alphas) == sorted(names)
    inputs = kc.layer_inputs(tiny, ids, names)
    for n in names:
        layer = q.get_submodule(n)
        assert isinstance(layer, kc.QuantLinear) and layer.bits == 4 and layer.input_scale is not None
        s, alpha = kc.awq_search(tiny.get_submodule(n).weight.detach(), inputs[n], 16, 4)
        assert alphas[n] == alpha
        torch.testing.assert_close(layer.input_scale, s)
    assert isinstance(tiny.transformer.h[0].attn.c_attn, nn.Linear)  # the input model is untouched


@pytest.mark.exercise("4.10")
def test_awq_bad_input():
    with pytest.raises(ValueError, match="x must be"):
        kc.awq_search(torch.randn(4, 32), torch.randn(8, 16))
    with pytest.raises(ValueError, match="group_size"):
        kc.awq_search(torch.randn(4, 32), torch.randn(8, 32), group_size=24)
    with pytest.raises(ValueError, match="grid"):
        kc.awq_search(torch.randn(4, 32), torch.randn(8, 32), grid=0)


# ---------------------------------------------------------------------- safetensors (given)
@pytest.mark.given
def test_safetensors_round_trip_is_exact_and_verified(tiny, tmp_path):
    pytest.importorskip("safetensors")
    path = kc.save_safetensors(tiny, tmp_path / "m.safetensors")
    back = kc.load_safetensors(path)
    assert all(torch.equal(v, back.state_dict()[k]) for k, v in tiny.state_dict().items())
    assert back.lm_head.weight is back.transformer.wte.weight  # tied again
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF  # one flipped bit pattern in the last tensor
    (tmp_path / "flip.safetensors").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="corrupted"):
        kc.load_safetensors(tmp_path / "flip.safetensors")
    (tmp_path / "cut.safetensors").write_bytes(bytes(data[: len(data) // 2]))
    with pytest.raises(CheckpointError, match="truncated"):
        kc.load_safetensors(tmp_path / "cut.safetensors")
    (tmp_path / "empty.safetensors").write_bytes(b"")
    with pytest.raises(CheckpointError):
        kc.load_safetensors(tmp_path / "empty.safetensors")
    with pytest.raises(FileNotFoundError):
        kc.load_safetensors(tmp_path / "none.safetensors")


@pytest.mark.given
def test_safetensors_of_another_shape_is_refused(tiny, tmp_path):
    pytest.importorskip("safetensors")
    from safetensors.torch import save_file

    sd, meta = kc.read_safetensors(kc.save_safetensors(tiny, tmp_path / "m.safetensors"))
    sd["transformer.wpe.weight"] = sd["transformer.wpe.weight"][:10].contiguous()
    save_file(sd, str(tmp_path / "bad.safetensors"), metadata={"config": meta["config"]})
    with pytest.raises(CheckpointError, match="wpe"):
        kc.load_safetensors(tmp_path / "bad.safetensors", verify=False)
    with pytest.raises(CheckpointError, match="sha256"):
        kc.load_safetensors(tmp_path / "bad.safetensors")
