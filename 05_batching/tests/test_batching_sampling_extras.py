"""The sampling parameters the serving ecosystem sends beside OpenAI's, as vLLM takes them
(given code: `SamplingParams` and `model_runner.shape_logits`): `repetition_penalty` (stage
04's `apply_repetition_penalty` over prompt + output), `min_tokens` (stop tokens masked until
then) and `ignore_eos` (stop tokens end nothing), applied per row in a batch where every
row asks for something else. Oracle: one request at a time, recomputing the whole sequence
at each step and applying the rule by hand; with the extras off, `generate_alone`."""

from __future__ import annotations

import pytest
import torch

import course
from solutions.kv_cache import apply_repetition_penalty

b = course.load("batching")
ENGINE = pytest.mark.exercise("5.4")  # they run through continuous batching


def reference(model, prompt, max_new, stop=(), penalty=1.0, min_tokens=0, ignore_eos=False):
    """(output, finish reason) of one greedy request, the slow way."""
    tokens, out = list(prompt), []
    stop = set() if ignore_eos else set(stop)
    with torch.no_grad():
        for _ in range(max_new):
            logits = model(torch.tensor([tokens]))[:, -1]
            if penalty != 1:
                logits = apply_repetition_penalty(logits, torch.tensor([tokens]), penalty)
            if len(out) < min_tokens and stop:
                logits[0, sorted(stop)] = float("-inf")
            t = int(logits.argmax())
            if t in stop:
                return out, "stop"
            out.append(t)
            tokens.append(t)
    return out, "length"


PROMPTS = [(5, 6, 7, 5, 6, 7), (40, 41), (9,) * 10, (1, 2, 3, 4, 5, 6, 7, 8, 9), (30, 31, 30), (12, 13)]


@ENGINE
def test_each_row_gets_its_own_penalty_min_tokens_and_ignore_eos(model, checked, alone):
    _each_row_gets_its_own_extras(model, checked, alone, budget=None)


@pytest.mark.exercise("5.5")
def test_each_row_keeps_its_extras_under_a_token_budget(model, checked, alone):
    """The same with 5.5's budget: rows mid-prefill beside rows that decode."""
    _each_row_gets_its_own_extras(model, checked, alone, budget=12)


def _each_row_gets_its_own_extras(model, checked, alone, budget):
    # a stop token each request would hit early: the second token it makes alone
    stops = [alone(p, 6, None, ())[0][1] for p in PROMPTS]
    specs = [dict(),                                   # off: exactly generate_alone
             dict(repetition_penalty=1.5),
             dict(repetition_penalty=0.7),
             dict(min_tokens=4),
             dict(ignore_eos=True),
             dict(repetition_penalty=1.3, min_tokens=3)]
    engine = checked(b.Engine(model, b.ContinuousBatching(4, max_tokens_per_step=budget)))
    requests = []
    for i, (p, stop, spec) in enumerate(zip(PROMPTS, stops, specs)):
        r = b.Request(p, 8, sampling=b.SamplingParams(**spec), stop=[stop], request_id=f"r{i}")
        requests.append(engine.add_request(r))
    while engine.has_unfinished():
        engine.step()
    for r, p, stop, spec in zip(requests, PROMPTS, stops, specs):
        want = reference(model, p, 8, [stop], spec.get("repetition_penalty", 1.0), spec.get("min_tokens", 0),
                         spec.get("ignore_eos", False))
        assert (r.output, r.finish_reason) == want, f"{r.request_id} {spec}: {r.output} {r.finish_reason}, want {want}"
    assert (requests[0].output, requests[0].finish_reason) == alone(PROMPTS[0], 8, None, (stops[0],)), \
        "with the extras off a request is generated exactly as alone"
    assert requests[0].finish_reason == "stop" and len(requests[3].output) >= 4, "the premise: an early stop"
    assert requests[4].finish_reason == "length" and len(requests[4].output) == 8
    assert stops[4] in requests[4].output, "ignore_eos: the stop token is generated and kept"
    plain = [reference(model, p, 8) for p in PROMPTS]
    assert requests[1].output != plain[1][0] and requests[2].output != plain[2][0], "the premise: penalties matter"


@ENGINE
def test_the_penalty_reads_the_prompt_too(model):
    """A prompt whose greedy next token already occurs in it: a penalty must make that token
    less likely at the very first step (a penalty over the generated tokens alone, none
    yet, would change nothing there)."""
    start = (5, 6, 7)
    gen = reference(model, start, 24)[0]
    k = next(k for k in range(len(gen)) if gen[k] in start + tuple(gen[:k]))  # the premise: it repeats
    prompt, first = start + tuple(gen[:k]), gen[k]
    engine = b.Engine(model, b.ContinuousBatching(2))
    r = engine.add_request(b.Request(prompt, 1, sampling=b.SamplingParams(repetition_penalty=1e6)))
    while engine.has_unfinished():
        engine.step()
    assert r.output[0] != first, "a token seen in the prompt only must be penalised"
    assert r.output == reference(model, prompt, 1, penalty=1e6)[0]


@pytest.mark.given
@pytest.mark.parametrize("kwargs, match", [
    (dict(repetition_penalty=0), "repetition_penalty"), (dict(repetition_penalty=-1.0), "repetition_penalty"),
    (dict(repetition_penalty=float("inf")), "repetition_penalty"), (dict(min_tokens=-1), "min_tokens"),
    (dict(min_tokens=1.5), "min_tokens"), (dict(ignore_eos=1), "ignore_eos"),
])
def test_bad_sampling_extras_are_clear_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        b.SamplingParams(**kwargs)


@ENGINE
def test_unseeded_rows_share_one_draw_and_seeded_rows_keep_their_own(model, monkeypatch):
    """`sample_tokens` (given code, run through continuous batching): greedy rows in one argmax, unseeded sampled rows in ONE draw
    per (temperature, top_k, top_p), a seeded row alone from its own generator, so that its
    tokens are those it gets alone with that seed, whatever else is in the batch."""
    import importlib

    from solutions.kv_cache import sample

    model_runner = importlib.import_module(f"{b.__name__}.model_runner")  # the engine's own module

    calls = []

    def spy(logits, **kw):
        calls.append((logits.shape[0], kw.get("temperature"), kw.get("generator") is not None))
        return sample(logits, **kw)

    monkeypatch.setattr(model_runner, "sample", spy)

    def seeded_alone(seed):
        eng = b.Engine(model, b.ContinuousBatching(8))
        r = eng.add_request(b.Request([5, 6, 7], 6, sampling=b.SamplingParams(temperature=0.9, seed=seed)))
        while eng.has_unfinished():
            eng.step()
        return r.output

    want = seeded_alone(11)
    calls.clear()
    eng = b.Engine(model, b.ContinuousBatching(8))
    rs = [eng.add_request(b.Request([5, 6, 7], 6, sampling=b.SamplingParams(temperature=t, seed=s)))
          for t, s in [(0.9, 11), (0.9, None), (0.9, None), (0.9, None), (1.3, None), (1.3, None), (0.0, None)]]
    eng.step()  # the prefill step samples every row once
    assert sorted(calls) == sorted([(1, 0.9, True), (3, 0.9, True), (2, 1.3, True), (1, 0.0, False)]), calls
    while eng.has_unfinished():
        eng.step()
    assert rs[0].output == want, "a seeded request's tokens must not depend on the batch it runs in"
    assert all(len(r.output) == 6 or r.finish_reason == "stop" for r in rs)
