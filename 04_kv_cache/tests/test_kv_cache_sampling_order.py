"""Exercise 4.5: temperature comes BEFORE top-k/top-p.

The nucleus is the smallest set of most likely tokens whose TEMPERED probability reaches
top_p. Choosing it on the raw probabilities and applying the temperature afterwards keeps
the wrong number of tokens: a flattening temperature (> 1) needs more tokens to reach p, a
sharpening one (< 1) fewer. Checked by frequencies of 20 000 draws, as in the other tests.
"""

from __future__ import annotations

import pytest
import torch

import course

kc = course.load("kv_cache")

N_DRAWS = 20_000
FREQ_TOL = 0.015  # > 4 sigma of a frequency estimated from N_DRAWS draws
PROBS = torch.tensor([0.40, 0.25, 0.15, 0.10, 0.05, 0.03, 0.02], dtype=torch.float64)
LOGITS = PROBS.log().float()[None]  # (1, 7)


def nucleus_of(probs: torch.Tensor, top_p: float) -> int:
    """How many of the (sorted, descending) probabilities the nucleus holds."""
    before = probs.cumsum(0) - probs
    return int((before < top_p).sum())


@pytest.mark.exercise("4.5")
@pytest.mark.parametrize("temperature, top_p, raw, tempered", [
    (2.0, 0.5, 2, 3),    # flatter: the raw nucleus of 2 holds only 0.48 of the tempered mass
    (0.5, 0.75, 3, 2),   # sharper: 2 tokens already hold 0.86 of the tempered mass
    (3.0, 0.85, 4, 6),
])
def test_the_nucleus_is_chosen_after_the_temperature(temperature, top_p, raw, tempered):
    want = torch.softmax(LOGITS.double()[0] / temperature, -1)
    assert nucleus_of(PROBS, top_p) == raw and nucleus_of(want, top_p) == tempered  # the premise
    gen = torch.Generator().manual_seed(11)
    ids = kc.sample(LOGITS.expand(N_DRAWS, -1), temperature=temperature, top_p=top_p, generator=gen)
    got = torch.bincount(ids, minlength=7).double() / N_DRAWS
    kept = int((got > 0).sum())
    assert got[tempered:].sum() == 0 and kept == tempered, (
        f"temperature={temperature}, top_p={top_p}: the nucleus of the tempered probabilities has "
        f"{tempered} tokens (of the untempered ones: {raw}); the draws used {kept}. Divide the logits "
        f"by the temperature BEFORE choosing the nucleus")
    expected = want[:tempered] / want[:tempered].sum()
    assert (got[:tempered] - expected).abs().max() < FREQ_TOL, (
        f"the kept tokens must be drawn in proportion to their tempered probabilities, renormalised over "
        f"the nucleus: expected {[round(float(p), 3) for p in expected]}, "
        f"drew {[round(float(p), 3) for p in got[:tempered]]}")


@pytest.mark.exercise("4.5")
def test_top_k_then_top_p_on_tempered_logits():
    """top_k=5 then top_p=0.6 at temperature 2: the nucleus is taken within the top 5, renormalised."""
    temperature, k, top_p = 2.0, 5, 0.6
    tempered = torch.softmax(LOGITS.double()[0] / temperature, -1)[:k]
    tempered = tempered / tempered.sum()
    n = nucleus_of(tempered, top_p)
    assert n == 3  # 0.30, 0.54, 0.72 of the top-5 mass
    gen = torch.Generator().manual_seed(12)
    ids = kc.sample(LOGITS.expand(N_DRAWS, -1), temperature=temperature, top_k=k, top_p=top_p, generator=gen)
    got = torch.bincount(ids, minlength=7).double() / N_DRAWS
    assert got[n:].sum() == 0 and int((got > 0).sum()) == n, f"expected {n} tokens, drew {got.tolist()}"
    expected = tempered[:n] / tempered[:n].sum()
    assert (got[:n] - expected).abs().max() < FREQ_TOL, (
        f"the nucleus' {n} tokens must be drawn in proportion to their tempered probabilities, "
        f"renormalised: expected {[round(float(p), 3) for p in expected]}, drew {[round(float(p), 3) for p in got[:n]]}")
