"""Exercise 4.7: the repetition penalty (CTRL, Keskar et al. 2019) as Hugging Face's
`RepetitionPenaltyLogitsProcessor` applies it: every token id seen in the context, counted
once, has its logit divided by the penalty when positive and multiplied by it otherwise.
Checked against transformers (when it is installed: the `peers` extra) and against oracles
written out by hand."""

from __future__ import annotations

import pytest
import torch

import course

kc = course.load("kv_cache")
EX = pytest.mark.exercise("4.7")


def by_hand(logits: torch.Tensor, context: list[list[int]], penalty: list[float]) -> torch.Tensor:
    """The rule, one entry at a time (the oracle): each distinct id of row b's context once."""
    out = logits.clone()
    for b, ids in enumerate(context):
        for t in set(ids):
            x = float(logits[b, t])
            out[b, t] = x / penalty[b] if x > 0 else x * penalty[b]
    return out


def padded(context: list[list[int]]) -> torch.Tensor:
    width = max(len(c) for c in context)
    return torch.tensor([c + [-1] * (width - len(c)) for c in context], dtype=torch.long)


@EX
@pytest.mark.parametrize("penalty", [1.3, 0.7, 2.0])
def test_equals_transformers_repetition_penalty(penalty):
    transformers = pytest.importorskip("transformers", reason="transformers is in the `peers` extra")
    gen = torch.Generator().manual_seed(4)
    logits = torch.randn(4, 50, generator=gen) * 3
    context = torch.randint(0, 50, (4, 30), generator=gen)  # repeats within a row, on purpose
    want = transformers.RepetitionPenaltyLogitsProcessor(penalty)(context, logits.clone())
    got = kc.apply_repetition_penalty(logits, context, penalty)
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=0, atol=0, msg=f"penalty {penalty}: not transformers' logits")


@EX
def test_each_seen_id_is_penalised_once_whatever_its_sign():
    logits = torch.tensor([[2.0, -2.0, 0.0, 4.0, -1.0, 3.0]])
    context = torch.tensor([[0, 0, 0, 1, 1, 2, 4, 4, 4, 4]])  # 0 three times, 4 four times
    got = kc.apply_repetition_penalty(logits, context, 2.0)
    want = torch.tensor([[1.0, -4.0, 0.0, 4.0, -2.0, 3.0]])
    assert torch.equal(got, want), (
        f"got {got.tolist()}, want {want.tolist()}: a seen id counts ONCE (not once per occurrence); "
        f"a positive logit is divided by the penalty, a negative one multiplied (both less likely); "
        f"ids never seen (3, 5) are untouched")


@EX
def test_penalty_one_changes_nothing_and_the_input_is_not_modified():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 20, generator=gen)
    before = logits.clone()
    context = torch.randint(0, 20, (3, 12), generator=gen)
    assert torch.equal(kc.apply_repetition_penalty(logits, context, 1.0), before)
    out = kc.apply_repetition_penalty(logits, context, 1.5)
    assert torch.equal(logits, before), "logits must not be modified in place"
    assert not torch.equal(out, before)


@EX
def test_ragged_rows_padding_and_per_row_penalties():
    gen = torch.Generator().manual_seed(7)
    logits = torch.randn(3, 16, generator=gen) * 2
    logits[2, 5] = float("-inf")  # a masked token stays masked
    context = [[3, 3, 9], [0, 1, 2, 3, 4, 5, 6], [5, 15]]
    penalty = [1.5, 0.5, 3.0]
    got = kc.apply_repetition_penalty(logits, padded(context), torch.tensor(penalty))
    want = by_hand(logits, context, penalty)
    assert torch.equal(got, want), "row b uses penalty[b] on the ids of context[b]; -1 is padding, no token"
    assert got[0, 0] == logits[0, 0], "padding (-1) must not penalise token 0 (nor any other)"
    assert got[2, 5] == float("-inf")


@EX
def test_a_context_of_the_prompt_and_the_generated_tokens():
    """What a decoder passes each step: the prompt and everything generated so far."""
    prompt, generated = [7, 8, 9], [1, 7]
    logits = torch.arange(-5.0, 5.0)[None]  # 10 tokens, negative and positive
    got = kc.apply_repetition_penalty(logits, torch.tensor([prompt + generated]), 1.25)
    assert torch.equal(got, by_hand(logits, [prompt + generated], [1.25]))
    untouched = [t for t in range(10) if t not in prompt + generated]
    assert torch.equal(got[0, untouched], logits[0, untouched])


@EX
def test_dtype_is_kept():
    logits = torch.tensor([[1.0, -1.0, 0.5]], dtype=torch.float64)
    got = kc.apply_repetition_penalty(logits, torch.tensor([[0, 1]]), 2.0)
    assert got.dtype == torch.float64 and got.tolist() == [[0.5, -2.0, 0.5]]


@pytest.mark.given
@pytest.mark.parametrize("args, match", [
    ((torch.zeros(1, 4), torch.tensor([[1]]), 0.0), "penalty"),
    ((torch.zeros(1, 4), torch.tensor([[1]]), -1.5), "penalty"),
    ((torch.zeros(1, 4), torch.tensor([[1]]), float("nan")), "penalty"),
    ((torch.zeros(2, 4), torch.tensor([[1], [2]]), torch.tensor([1.0, 0.0])), "penalty"),
    ((torch.zeros(1, 4), torch.tensor([[1]]), torch.tensor([1.0, 2.0])), "penalty"),
    ((torch.zeros(1, 4), torch.tensor([[4]]), 1.2), "vocabulary"),
    ((torch.zeros(1, 4), torch.tensor([[1.0]]), 1.2), "context"),
    ((torch.zeros(1, 4), torch.tensor([1]), 1.2), "context"),
    ((torch.zeros(1, 4), [[1]], 1.2), "context"),
    ((torch.zeros(4), torch.tensor([[1]]), 1.2), "logits"),
])
def test_bad_arguments_are_clear_errors(args, match):
    with pytest.raises(ValueError, match=match):
        kc.apply_repetition_penalty(*args)
