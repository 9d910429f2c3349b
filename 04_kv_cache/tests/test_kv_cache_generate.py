"""Exercises 4.5 (sampling) and 4.6 (generate).

Sampling is checked by its distributions: draws from many identical rows in one call, so
the empirical frequencies of ~20 000 draws sit within 4 standard deviations (< 0.015 here)
of the probabilities the rule defines. Generation is checked against the recompute
baseline (every cache, token for token) and against transformers' GPT2LMHeadModel.generate
on the same weights.
"""

from __future__ import annotations

import pytest
import torch

import course

kc = course.load("kv_cache")

N_DRAWS = 20_000
FREQ_TOL = 0.015  # > 4 sigma of a frequency estimated from N_DRAWS draws (sigma <= 0.0036)


def frequencies(ids: torch.Tensor, vocab: int) -> torch.Tensor:
    return torch.bincount(ids, minlength=vocab).double() / ids.numel()


def draws(logits_row: torch.Tensor, seed: int = 0, **kw) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return kc.sample(logits_row.expand(N_DRAWS, -1), generator=gen, **kw)


def fmt(p) -> str:
    return "[" + ", ".join(f"{float(x):.3f}" for x in p) + "]"


def check_kept_set(got: torch.Tensor, want: torch.Tensor, rule: str) -> None:
    """The draws' frequencies `got` (V,) against the distribution `want` (V,) that `rule`
    defines: the same kept set, then frequencies within FREQ_TOL of it."""
    kept, expected = (got > 0).nonzero().flatten().tolist(), (want > 0).nonzero().flatten().tolist()
    assert set(kept) <= set(expected), (
        f"{rule}: expected draws only from tokens {expected} (probabilities {fmt(want[expected])}); "
        f"tokens {sorted(set(kept) - set(expected))} outside that set were drawn (frequencies {fmt(got)})")
    err = (got - want).abs().max()
    assert err < FREQ_TOL, (
        f"{rule}: expected the kept tokens {expected} drawn in proportion {fmt(want[expected])} "
        f"(renormalised over the kept set); the draws' frequencies were {fmt(got[expected])}"
        + (f", only {len(kept)} token(s) drawn" if len(kept) < len(expected) else "")
        + f" (off by {float(err):.3f}, tolerance {FREQ_TOL})")


PROBS = torch.tensor([0.40, 0.25, 0.15, 0.10, 0.05, 0.03, 0.02], dtype=torch.float64)
LOGITS = PROBS.log().float()[None]  # (1, 7)


@pytest.mark.exercise("4.5")
def test_greedy_is_argmax():
    logits = torch.randn(64, 300, generator=torch.Generator().manual_seed(0))
    ids = kc.sample(logits, temperature=0)
    assert ids.shape == (64,) and ids.dtype == torch.int64, f"one int64 id per row, (64,), got {ids.dtype} {tuple(ids.shape)}"
    assert torch.equal(ids, logits.argmax(-1)), "temperature=0 must return each row's argmax"


@pytest.mark.exercise("4.5")
@pytest.mark.parametrize("temperature", [1.0, 0.5, 2.0])
def test_temperature_samples_from_softmax_of_scaled_logits(temperature):
    want = torch.softmax(LOGITS.double()[0] / temperature, -1)
    got = frequencies(draws(LOGITS, temperature=temperature), 7)
    check_kept_set(got, want, f"temperature={temperature}: softmax(logits / {temperature})")


@pytest.mark.exercise("4.5")
def test_temperature_to_zero_is_greedy():
    logits = torch.randn(256, 50, generator=torch.Generator().manual_seed(1))
    gen = torch.Generator().manual_seed(0)
    assert torch.equal(kc.sample(logits, temperature=1e-4, generator=gen), logits.argmax(-1))


@pytest.mark.exercise("4.5")
def test_top_k_never_emits_excluded_tokens_and_renormalises():
    got = frequencies(draws(LOGITS, top_k=3), 7)
    want = torch.zeros(7, dtype=torch.float64)
    want[:3] = PROBS[:3] / PROBS[:3].sum()
    check_kept_set(got, want, "top_k=3 keeps the 3 most likely tokens")
    logits = torch.randn(2000, 100, generator=torch.Generator().manual_seed(2))
    ids = kc.sample(logits, top_k=5, temperature=1.5, generator=torch.Generator().manual_seed(3))
    allowed = logits.topk(5, dim=-1).indices
    outside = int((~(allowed == ids[:, None]).any(-1)).sum())
    assert outside == 0, f"top_k=5, temperature 1.5: {outside} of 2000 rows drew a token outside the row's top 5"
    assert bool((kc.sample(logits, top_k=1, generator=torch.Generator()) == logits.argmax(-1)).all()), (
        "top_k=1 must always draw the row's argmax")


@pytest.mark.exercise("4.5")
@pytest.mark.parametrize("top_p, nucleus", [(0.5, 2), (0.75, 3), (0.85, 4), (0.3, 1), (1.0, 7)])
def test_top_p_keeps_the_smallest_set_reaching_p(top_p, nucleus):
    """Cumulative probabilities 0.40, 0.65, 0.80, 0.90, ...: top_p=0.75 keeps 3 tokens (0.80
    is the first total to reach 0.75), top_p=0.3 keeps the most likely token alone."""
    got = frequencies(draws(LOGITS, top_p=top_p), 7)
    want = torch.zeros(7, dtype=torch.float64)
    want[:nucleus] = PROBS[:nucleus] / PROBS[:nucleus].sum()
    cum = fmt(PROBS.cumsum(0)[:nucleus])
    check_kept_set(got, want, f"top_p={top_p} (cumulative probabilities {cum}): the nucleus is the smallest "
                              f"set reaching {top_p}, the {nucleus} most likely token(s), the one that "
                              f"reaches top_p included")


@pytest.mark.exercise("4.5")
def test_the_nucleus_in_vocabulary_order_within_the_top_k_and_at_an_exact_boundary():
    """Three rules the sorted PROBS above cannot tell apart from near misses: the nucleus is
    found in sorted order but masks the tokens where they are (a shuffled row); it is measured
    on the probabilities renormalised over the top_k; a prefix whose total is exactly top_p
    has reached it (the next token is out)."""
    perm = torch.tensor([4, 0, 6, 2, 5, 1, 3])  # token perm[i] gets PROBS[i]
    shuffled = torch.empty(7, dtype=torch.float64)
    shuffled[perm] = PROBS
    got = frequencies(draws(shuffled.log().float()[None], top_p=0.75), 7)
    want = torch.zeros(7, dtype=torch.float64)
    want[perm[:3]] = PROBS[:3] / PROBS[:3].sum()
    check_kept_set(got, want, f"top_p=0.75 on a shuffled row (tokens {perm[:3].tolist()} hold 0.40, 0.25, 0.15): "
                              f"the nucleus is chosen in sorted order but masks those tokens where they "
                              f"are in the vocabulary (map the sorted mask back through the sort's indices)")
    probs = torch.tensor([0.5, 0.2, 0.1, 0.1, 0.1], dtype=torch.float64)
    got = frequencies(draws(probs.log().float()[None], top_k=2, top_p=0.65), 5)
    want = torch.tensor([1.0, 0, 0, 0, 0], dtype=torch.float64)
    check_kept_set(got, want, "top_k=2, top_p=0.65 on probabilities [0.5, 0.2, 0.1, 0.1, 0.1]: over the top 2 "
                              "they are [0.714, 0.286], so the nucleus is token 0 alone (measured over the "
                              "whole vocabulary, 0.5 < 0.65 would keep two)")
    flat = torch.tensor([[0.0, 0.0, 0.0, 0.0, float("-inf")]])
    ids = draws(flat, top_p=0.5)
    kept = len(set(ids.tolist()))
    assert kept == 2, (f"top_p=0.5 on 4 equal tokens (probabilities exactly 0.25; cumulative 0.25, 0.5, ...) "
                       f"drew {kept} different tokens: the first 2 already reach 0.5, so the nucleus is 2 "
                       f"tokens (a token is out when the mass before it is >= top_p)")


@pytest.mark.exercise("4.5")
def test_top_k_and_top_p_together_and_per_row():
    """Each row gets its own nucleus: a peaked row keeps one token, a flat row keeps all k."""
    peaked = torch.tensor([[10.0, 0, 0, 0, 0, 0]])
    flat = torch.zeros(1, 6)
    logits = torch.cat([peaked, flat]).repeat(2000, 1)
    ids = kc.sample(logits, top_k=4, top_p=0.9, generator=torch.Generator().manual_seed(4))
    assert bool((ids[0::2] == 0).all()), (
        "a peaked row (token 0 holds 0.99 of the mass) with top_p=0.9 must keep token 0 alone: each row "
        "gets its own nucleus")
    kept = len(set(ids[1::2].tolist()))
    assert kept == 4, (f"top_k=4 on a row of 6 equal logits drew {kept} different tokens: top_k keeps "
                       f"exactly k tokens even when logits tie (use topk's indices; masking "
                       f"`logits < kth largest` keeps every tie)")  # which 4 of 6: topk's choice


@pytest.mark.exercise("4.5")
def test_a_generator_makes_draws_reproducible():
    logits = torch.randn(32, 100, generator=torch.Generator().manual_seed(5))
    a = kc.sample(logits, temperature=1.3, top_p=0.95, generator=torch.Generator().manual_seed(7))
    b = kc.sample(logits, temperature=1.3, top_p=0.95, generator=torch.Generator().manual_seed(7))
    c = kc.sample(logits, temperature=1.3, top_p=0.95, generator=torch.Generator().manual_seed(8))
    assert torch.equal(a, b), "the same generator seed must give the same draws"
    assert not torch.equal(a, c), "another seed gave the same 32 draws: draw from `generator`"


@pytest.mark.given
@pytest.mark.parametrize("kwargs, match", [
    (dict(temperature=-0.1), "temperature"), (dict(temperature=float("nan")), "temperature"),
    (dict(top_k=0), "top_k"), (dict(top_k=2.5), "top_k"),
    (dict(top_p=0.0), "top_p"), (dict(top_p=1.5), "top_p"), (dict(top_p=-1), "top_p"),
])
def test_bad_sampling_parameters_are_clear_errors(tiny, kwargs, match):
    with pytest.raises(ValueError, match=match):
        kc.sample(torch.zeros(1, 5), **kwargs)
    with pytest.raises(ValueError, match=match):
        kc.generate(tiny, [[1]], 2, **kwargs)


@pytest.mark.given
def test_bad_logits_are_clear_errors():
    with pytest.raises(ValueError, match="logits"):
        kc.sample(torch.zeros(5))
    with pytest.raises(ValueError, match="logits"):
        kc.sample(torch.zeros(2, 5, dtype=torch.long))


# ---- generate ----------------------------------------------------------------------------------

PROMPTS_TEXT = ["def main():\n    ", "import", "The Python Standard Library\n", "x = [i * i for i in ra"]


def prompts() -> list[list[int]]:
    return [list(p.encode()) for p in PROMPTS_TEXT]


@pytest.mark.exercise("4.6")
@pytest.mark.parametrize("cache", ["prealloc", "concat"])
def test_greedy_with_a_float_cache_equals_recompute_token_for_token(trained, cache):
    base = kc.generate(trained, prompts(), 48, cache=None)
    got = kc.generate(trained, prompts(), 48, cache=cache)
    assert [len(t) for t in base.tokens] == [48] * 4, "recompute must give 48 tokens per prompt"
    assert got.tokens == base.tokens, (
        f"greedy with the {cache} cache must equal recompute token for token (first difference in "
        f"prompt {next(i for i, (a, b) in enumerate(zip(got.tokens, base.tokens)) if a != b)}; the next token "
        f"after the prefill comes from each prompt's LAST REAL token)")
    assert got.finish_reasons == base.finish_reasons == ["length"] * 4


@pytest.mark.exercise("4.6")
def test_greedy_with_the_int8_cache_agrees_on_99_percent_of_256_tokens(trained):
    """4 ragged prompts x 64 tokens, position by position against recompute."""
    base = kc.generate(trained, prompts(), 64, cache=None).tokens
    got = kc.generate(trained, prompts(), 64, cache="int8").tokens
    same = sum(a == b for x, y in zip(base, got) for a, b in zip(x, y))
    assert same / 256 >= 0.99, f"INT8 agrees on {same}/256 tokens"


@pytest.mark.exercise("4.6")
def test_greedy_equals_transformers_generate_on_converted_weights(trained):
    """The course model converted to GPT2LMHeadModel, each prompt alone, KV cache on."""
    hf = trained.to_hf()
    hf.generation_config.eos_token_id = None  # run the full length on both sides
    ours = kc.generate(trained, prompts(), 40, cache="prealloc").tokens
    for prompt, mine in zip(prompts(), ours):
        ids = torch.tensor([prompt])
        with torch.no_grad():
            out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=40, do_sample=False,
                              use_cache=True, pad_token_id=0)
        assert out[0, len(prompt):].tolist() == mine


@pytest.mark.exercise("4.6")
@pytest.mark.parametrize("cache", ["prealloc", None])
def test_a_llama_generates_as_transformers_does(tiny_llama, cache):
    """SmolLM2's architecture in miniature (RoPE, 4 query heads over 2 K/V heads; the cache holds
    the 2): ragged prompts in one batch, each equal to `transformers`' LlamaForCausalLM
    `generate` of it alone on the same weights."""
    hf = tiny_llama.to_hf()
    hf.generation_config.eos_token_id = None
    ragged = [[5, 17, 200, 31, 9, 64, 128], [42], [7, 7, 7, 250, 3]]
    ours = kc.generate(tiny_llama, ragged, 24, cache=cache).tokens
    for i, (prompt, mine) in enumerate(zip(ragged, ours)):
        ids = torch.tensor([prompt])
        with torch.no_grad():
            out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=24, do_sample=False,
                              use_cache=True, pad_token_id=0)
        assert mine == out[0, len(prompt):].tolist(), (
            f"cache={cache}: prompt {i} ({len(prompt)} tokens, batched with prompts of {[len(p) for p in ragged]}) "
            f"differs from transformers' greedy generate of it alone: each token is rotated at its own "
            f"absolute position, and the query heads share the K/V heads in groups")


@pytest.mark.exercise("4.6")
def test_stop_tokens_end_sequences_with_reason_stop(trained):
    """Each sequence stops at its first stop token (not included in its tokens); the others
    run to max_new_tokens with reason "length"."""
    base = kc.generate(trained, prompts(), 30, cache=None).tokens
    stop = base[0][5]  # the 6th token of sequence 0 becomes a stop token
    want = [row[: row.index(stop)] if stop in row else row for row in base]
    for cache, stop_arg in ((None, stop), ("prealloc", [stop]), ("concat", (stop, stop))):
        res = kc.generate(trained, prompts(), 30, cache=cache, stop=stop_arg)
        assert res.tokens == want, (
            f"cache={cache}, stop={stop_arg}: each row must end just BEFORE its first stop token "
            f"(lengths {[len(w) for w in want]}), got lengths {[len(t) for t in res.tokens]}")
        assert res.finish_reasons == ["stop" if len(w) < 30 else "length" for w in want]
    assert res.finish_reasons[0] == "stop"


@pytest.mark.exercise("4.6")
def test_sampled_generation_is_reproducible_and_respects_top_k(trained):
    kw = dict(temperature=0.8, top_k=3, cache="prealloc")
    a = kc.generate(trained, prompts(), 20, generator=torch.Generator().manual_seed(1), **kw)
    b = kc.generate(trained, prompts(), 20, generator=torch.Generator().manual_seed(1), **kw)
    assert a.tokens == b.tokens
    # every sampled token is among the top 3 of the logits that produced it (checked by recompute)
    with torch.no_grad():
        for p, toks in zip(prompts(), a.tokens):
            logits = trained(torch.tensor([p + toks]))[0, len(p) - 1: -1]
            top3 = logits.topk(3, dim=-1).indices
            assert bool((top3 == torch.tensor(toks)[:, None]).any(-1).all())


@pytest.mark.exercise("4.6")
def test_a_single_prompt_and_zero_new_tokens(trained):
    res = kc.generate(trained, [[65]], 3)
    assert len(res.tokens) == 1 and len(res.tokens[0]) == 3 and res.finish_reasons == ["length"]
    assert all(isinstance(t, int) for t in res.tokens[0])
    empty = kc.generate(trained, [[65], [66, 67]], 0)
    assert empty.tokens == [[], []] and empty.finish_reasons == ["length", "length"]


@pytest.mark.given
@pytest.mark.parametrize("args, kwargs, match", [
    (([], 3), {}, "prompts"),
    (([[]], 3), {}, "prompt 0"),
    (([[1, 300]], 3), {}, "prompt 0"),
    (([[1], "ab"], 3), {}, "prompt 1"),
    (([[1]], -1), {}, "max_new_tokens"),
    (([[1] * 250], 10), {}, "context"),
    (([[1]], 3), dict(cache="paged"), "cache"),
    (([[1]], 3), dict(stop=[1000]), "stop"),
])
def test_bad_generate_arguments_are_clear_errors(trained, args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        kc.generate(trained, *args, **kwargs)


@pytest.mark.given
def test_generate_needs_a_course_gpt():
    with pytest.raises(TypeError, match="GPT"):
        kc.generate("gpt2", [[1]], 1)
