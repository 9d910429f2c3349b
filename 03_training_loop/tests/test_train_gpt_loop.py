"""Exercises 3.7–3.10: the PyTorch loop on the course's GPT — batches, the guard, the step with
gradient accumulation, evaluation, and checkpoints that resume exactly."""
from __future__ import annotations

import math
from dataclasses import asdict, replace

import pytest
import torch
from torch import nn

import course
from solutions.gpt import GPT, GPTConfig
from solutions.tokenizer import EOT, VOCAB_SIZE

train = course.load("train")

TINY = GPTConfig(block_size=16, n_layer=2, n_head=2, n_embd=16)


def _stream(n_docs=60, seed=0):
    """A small token stream of Python-looking documents, each ended by EOT."""
    g = torch.Generator().manual_seed(seed)
    docs = []
    for i in range(n_docs):
        n = int(torch.randint(3, 12, (1,), generator=g))
        text = f"def f{i}(x):\n" + "".join(f"    x = x + {j}\n" for j in range(n)) + "    return x\n"
        docs.append(torch.tensor(list(text.encode()) + [EOT], dtype=torch.int16))
    return torch.cat(docs)


TRAIN, VAL = _stream(80, 0), _stream(20, 1)


def _cfg(**kw):
    base = dict(model=TINY, batch_size=4, block_size=16, steps=10, max_lr=1e-2, min_lr=1e-3, warmup_steps=2,
                eval_every=5, eval_tokens=512)
    return train.TrainConfig(**(base | kw))


# ---------------------------------------------------------------------------- 3.7 batches

@pytest.mark.exercise("3.7")
def test_get_batch_windows_and_targets():
    tokens = torch.arange(1000, 1100, dtype=torch.int16)
    g = torch.Generator().manual_seed(0)
    x, y = train.get_batch(tokens, 400, 8, g)
    assert x.shape == y.shape == (400, 8) and x.dtype == y.dtype == torch.int64, (
        f"x and y must be (batch_size, T) int64 (widened from the int16 stream), got {tuple(x.shape)} {x.dtype}, "
        f"{tuple(y.shape)} {y.dtype}")
    starts = x[:, 0] - 1000
    assert torch.equal(x, 1000 + starts[:, None] + torch.arange(8)), "each row of x must be T consecutive tokens"
    assert torch.equal(y[:, :-1], x[:, 1:]) and torch.equal(y[:, -1], x[:, -1] + 1), \
        "y must be x one token later: y[i] = tokens[s+1 : s+T+1]"
    assert int(starts.min()) == 0 and int(starts.max()) == 100 - 8 - 1, (
        f"starts drawn span {int(starts.min())}..{int(starts.max())}: with N = 100 and T = 8 every start 0..91 must "
        f"be possible (start 91: y ends on the stream's last token) and none past it")
    g2 = torch.Generator().manual_seed(0)
    assert torch.equal(train.get_batch(tokens, 400, 8, g2)[0], x), \
        "the same generator state must give the same batch: the generator is the data position"
    assert not torch.equal(train.get_batch(tokens, 400, 8, g)[0], x), \
        "each call must move the generator on (draw the starts from it, once per call)"


@pytest.mark.exercise("3.7")
def test_get_batch_rejects_bad_input():
    g = torch.Generator()
    with pytest.raises(ValueError, match="too short"):
        train.get_batch(torch.arange(8), 2, 8, g)
    with pytest.raises(TypeError):
        train.get_batch(torch.zeros(4, 40, dtype=torch.long), 2, 8, g)
    with pytest.raises(TypeError):
        train.get_batch(torch.rand(100), 2, 8, g)
    with pytest.raises(ValueError):
        train.get_batch(torch.arange(100), 0, 8, g)
    assert train.get_batch(torch.arange(9), 1, 8, g)[0].shape == (1, 8)  # the shortest stream that fits


# ---------------------------------------------------------------------------- 3.8 the guard and the step

@pytest.mark.exercise("3.8")
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_check_finite(bad):
    assert train.check_finite(2.5, step=3) == 2.5
    with pytest.raises(train.NonFiniteLossError, match=r"step 7.*loss is (nan|inf|-inf)") as e:
        train.check_finite(bad, step=7)
    assert "learning rate" in str(e.value)  # says what to do
    assert isinstance(e.value, FloatingPointError)


@pytest.mark.exercise("3.8")
def test_nan_loss_stops_the_step_before_the_weights_change():
    torch.manual_seed(0)
    model = GPT(TINY)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    with torch.no_grad():
        model.transformer.wpe.weight[3, 0] = float("nan")  # poisons every window's position 3
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x, y = train.get_batch(TRAIN, 4, 16, torch.Generator().manual_seed(0))
    with pytest.raises(train.NonFiniteLossError, match="step 41"):
        train.train_step(model, opt, [(x, y)], max_norm=1.0, step=41)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) or k == "transformer.wpe.weight" for k in before)
    assert torch.equal(before["transformer.wpe.weight"].nan_to_num(), after["transformer.wpe.weight"].nan_to_num())


@pytest.mark.exercise("3.8")
def test_accumulation_equals_one_big_batch():
    """A micro-batches of B give the same step as one batch of A*B (float32: 1e-5)."""
    x, y = train.get_batch(TRAIN, 8, 16, torch.Generator().manual_seed(1))
    results = []
    for chunks in (1, 2, 4):
        torch.manual_seed(0)
        model = GPT(TINY)
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        loss, norm = train.train_step(model, opt, list(zip(x.chunk(chunks), y.chunk(chunks))), max_norm=1e9)
        results.append((loss, norm, [p.detach().clone() for p in model.parameters()]))
    (loss1, norm1, params1) = results[0]
    assert loss1 == pytest.approx(math.log(257), abs=0.1)  # a fresh model guesses uniformly
    for chunks, (loss, norm, params) in zip((2, 4), results[1:]):
        rule = (f"{chunks} micro-batches of {8 // chunks} must give the step of one batch of 8: loss = the mean of "
                "the micro-batch losses, gradient = the sum of each micro-batch's (loss / A) gradient")
        assert loss == pytest.approx(loss1, rel=1e-5), f"{rule}; loss {loss:.6f} vs {loss1:.6f}"
        assert norm == pytest.approx(norm1, rel=1e-4), f"{rule}; gradient norm {norm:.6f} vs {norm1:.6f}"
        for a, b in zip(params, params1):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6, msg=lambda m: f"{rule}; weights after the step: {m}")


@pytest.mark.exercise("3.8")
def test_train_step_clips_and_returns_the_norm_before_clipping():
    torch.manual_seed(0)
    model = GPT(TINY)
    ref = GPT(TINY)
    ref.load_state_dict(model.state_dict())
    x, y = train.get_batch(TRAIN, 4, 16, torch.Generator().manual_seed(2))
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    loss, norm = train.train_step(model, opt, [(x, y)], max_norm=0.01)
    train.lm_loss(ref, x, y).backward()
    ref_norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.01)
    assert norm == pytest.approx(float(ref_norm), rel=1e-5) and norm > 0.01
    moved = torch.sqrt(sum(((p - q) ** 2).sum() for p, q in zip(model.parameters(), ref.parameters())))
    assert float(moved.detach()) == pytest.approx(0.01, rel=1e-3)  # lr 1 x a gradient clipped to norm 0.01
    with pytest.raises(ValueError):
        train.train_step(model, opt, [], max_norm=1.0)


@pytest.mark.exercise("3.8")
def test_train_step_ignores_gradients_left_from_before():
    torch.manual_seed(3)
    model = GPT(TINY)
    x, y = train.get_batch(TRAIN, 4, 16, torch.Generator().manual_seed(4))
    for p in model.parameters():
        p.grad = torch.full_like(p, 1e3)  # left over from some other computation
    _, norm = train.train_step(model, torch.optim.SGD(model.parameters(), lr=0.0), [(x, y)], max_norm=1e9)
    model.zero_grad()
    train.lm_loss(model, x, y).backward()
    fresh = float(torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters())))
    assert norm == pytest.approx(fresh, rel=1e-4), (
        f"train_step must zero the gradients before the first backward (gradients left in .grad do not "
        f"count): norm {norm:.4g}, the batch's own gradient norm {fresh:.4g}")


class _SqrtAtZero(nn.Module):
    """A finite loss (ln 257: every logit 0) whose gradient is infinite: d sqrt(p)/dp at p = 0."""

    def __init__(self):
        super().__init__()
        self.p = nn.Parameter(torch.zeros(()))
        self.w = nn.Parameter(torch.zeros(VOCAB_SIZE))

    def forward(self, x):
        logits = self.w.expand(*x.shape, VOCAB_SIZE).clone()
        logits[..., 0] = logits[..., 0] + torch.sqrt(self.p)
        return logits


@pytest.mark.exercise("3.8")
def test_a_finite_loss_with_a_non_finite_gradient_norm_stops_the_step():
    model = _SqrtAtZero()
    x = torch.full((2, 4), 65)  # targets are never token 0: the gradient at p is +inf
    with pytest.raises(train.NonFiniteLossError, match="step 5: the gradient norm is") as info:
        train.train_step(model, torch.optim.SGD(model.parameters(), lr=0.1), [(x, x)], max_norm=1.0, step=5)
    assert "loss is" not in str(info.value)  # the loss itself was finite
    assert float(model.p.detach()) == 0.0 and bool((model.w == 0).all()), \
        "the gradient norm must be checked BEFORE optimizer.step(): no weight may change"


# ---------------------------------------------------------------------------- 3.9 evaluate

@torch.no_grad()
def _brute_force_eval(model, tokens, T, n_windows):
    nats, count, byte_count = 0.0, 0, 0
    for w in range(n_windows):
        seq = tokens[w * T: w * T + T + 1].long()
        logits = model(seq[None, :-1])[0]
        logp = torch.log_softmax(logits.double(), -1)
        for t in range(T):
            nats -= float(logp[t, seq[t + 1]])
            count += 1
            byte_count += int(seq[t + 1] != EOT)
    return nats / count, nats / math.log(2) / byte_count


@pytest.mark.exercise("3.9")
@pytest.mark.parametrize("batch_size, max_tokens", [(3, 16 * 7), (16, None)])
def test_evaluate_matches_a_brute_force_count(batch_size, max_tokens):
    torch.manual_seed(0)
    model = GPT(TINY)
    tokens = VAL[: 16 * 7 + 5]
    model.train()
    ev = train.evaluate(model, tokens, block_size=16, batch_size=batch_size, max_tokens=max_tokens)
    assert model.training  # mode restored
    model.eval()
    loss, bpb = _brute_force_eval(model, tokens, 16, 7)
    assert ev["tokens"] == 7 * 16, f"7 whole windows of 16 targets are evaluated, got tokens={ev['tokens']}"
    assert ev["loss"] == pytest.approx(loss, rel=1e-5), (
        f"loss = the summed cross-entropy over every target / the number of targets = {loss:.6f}, got {ev['loss']:.6f}")
    assert ev["bpb"] == pytest.approx(bpb, rel=1e-5), (
        f"bits per byte = the summed loss in bits / the number of targets that are bytes (end-of-text marks "
        f"cost bits but are not bytes) = {bpb:.6f}, got {ev['bpb']:.6f}")


@pytest.mark.exercise("3.9")
def test_evaluate_is_deterministic_with_dropout_and_caps_tokens():
    torch.manual_seed(0)
    model = GPT(replace(TINY, dropout=0.5)).train()
    a = train.evaluate(model, VAL, block_size=16, max_tokens=410)
    b = train.evaluate(model, VAL, block_size=16, max_tokens=410)
    assert a == b, f"evaluate runs the model in eval mode (no dropout): two calls must agree, got {a} and {b}"
    assert a["tokens"] == 400, f"max_tokens=410 keeps 25 whole windows of 16 = 400 targets, got {a['tokens']}"
    assert (VAL[1:401] == EOT).any()
    assert a["bpb"] > a["loss"] / math.log(2) * 1.001, (
        f"bits per byte ({a['bpb']:.4f}) must exceed loss / ln 2 ({a['loss'] / math.log(2):.4f}) here: the "
        f"targets include end-of-text marks, which cost bits but are not bytes (divide by the byte targets only)")
    with pytest.raises(ValueError):
        train.evaluate(model, VAL[:10], block_size=16)


@pytest.mark.exercise("3.9")
def test_short_gpt_run_loss_falls():
    """The whole loop (given) on 3.7-3.9: evaluates at every eval_every and after the last step."""
    model, h = train.train(_cfg(steps=40, eval_every=20), TRAIN, VAL, progress=False)
    assert h["step"] == list(range(1, 41)) and h["val_step"] == [20, 40]
    assert h["tokens"][-1] == 40 * 4 * 16
    assert sum(h["loss"][-5:]) / 5 < sum(h["loss"][:5]) / 5 - 1.5, h["loss"]
    assert h["val_loss"][-1] < h["val_loss"][0] and all(math.isfinite(v) for v in h["grad_norm"])


# ---------------------------------------------------------------------------- 3.10 resume

@pytest.mark.exercise("3.10")
def test_training_state_round_trip_and_config_check(tmp_path):
    torch.manual_seed(0)
    model = GPT(TINY)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = train.get_batch(TRAIN, 4, 16, torch.Generator().manual_seed(0))
    train.lm_loss(model, x, y).backward()
    opt.step()
    rng = torch.Generator().manual_seed(5)
    rng_state, torch_state = rng.get_state(), torch.get_rng_state()
    path = train.save_training_state(tmp_path / "s.pt", model=model, optimizer=opt, step=1, data_rng=rng,
                                     history={"loss": [1.5]}, config={"a": 1})
    assert path.exists() and not list(tmp_path.glob("*.tmp"))  # written atomically
    torch.manual_seed(99)
    model2, rng2 = GPT(TINY), torch.Generator().manual_seed(77)
    opt2 = torch.optim.AdamW(model2.parameters(), lr=1e-3)
    step, history = train.load_training_state(path, model=model2, optimizer=opt2, data_rng=rng2)
    assert step == 1, (f"load_training_state returns the step as saved, the number of optimizer steps done "
                       f"(1 here; the next step's number is the caller's to derive), got {step}")
    assert history == {"loss": [1.5]}, f"load_training_state returns the history as saved, got {history}"
    assert torch.equal(torch.get_rng_state(), torch_state), (
        "torch's global generator (dropout draws from it) is not restored: after load_training_state it must be "
        "in the state it had when the checkpoint was saved, whatever was drawn from it in between")
    assert torch.equal(rng2.get_state(), rng_state), (
        "the data generator (which batches come next) is not restored: after load_training_state the data_rng "
        "passed in (changed in place, not replaced) must be in the state the saved one had")
    for a, b in zip(model.state_dict().values(), model2.state_dict().values()):
        assert torch.equal(a, b)
    s1, s2 = opt.state_dict()["state"], opt2.state_dict()["state"]
    assert all(torch.equal(s1[k]["exp_avg"], s2[k]["exp_avg"]) for k in s1)
    with pytest.raises(ValueError, match="'a'"):
        train.load_training_state(path, model=model2, optimizer=opt2, data_rng=rng2, config={"a": 2})
    with pytest.raises(FileNotFoundError):
        train.load_training_state(tmp_path / "missing.pt", model=model2, optimizer=opt2, data_rng=rng2)


@pytest.mark.exercise("3.10")
def test_resume_gives_exactly_the_losses_of_an_unbroken_run(tmp_path):
    cfg = _cfg(model=replace(TINY, dropout=0.1), steps=12, eval_every=3)  # dropout: the torch RNG matters too
    full_model, full = train.train(cfg, TRAIN, VAL, progress=False)
    state = tmp_path / "state.pt"
    _, first = train.train(cfg, TRAIN, VAL, state_path=state, stop_after=5, progress=False)
    assert first["loss"] == full["loss"][:5]
    torch.manual_seed(1234)  # whatever happened to the RNGs in between
    torch.randn(100)
    model, resumed = train.train(cfg, TRAIN, VAL, state_path=state, resume=True, progress=False)
    assert resumed["step"] == full["step"]
    assert resumed["loss"] == full["loss"], (  # exact, not approximate
        "a run resumed after step 5 must give exactly the unbroken run's losses: the weights, the optimizer "
        "state and BOTH generators (torch's for dropout, the data one) come back as saved")
    assert resumed["val_loss"] == full["val_loss"] and resumed["grad_norm"] == full["grad_norm"]
    for a, b in zip(model.state_dict().values(), full_model.state_dict().values()):
        assert torch.equal(a, b)


@pytest.mark.given
def test_train_config_rejects_bad_values():
    with pytest.raises(ValueError):
        train.TrainConfig(model=TINY, block_size=32)  # longer than the model's context
    with pytest.raises(ValueError):
        train.TrainConfig(model=TINY, block_size=16, warmup_steps=50, steps=10)
    with pytest.raises(ValueError):
        train.train(_cfg(), TRAIN, VAL, resume=True)  # no state to resume from
    cfg = _cfg()
    assert train.TrainConfig(**asdict(cfg)) == cfg  # round-trips through a checkpoint's dict


@pytest.mark.exercise("3.10")
def test_command_line_run_saves_a_loadable_model_with_its_meta(tmp_path, capsys):
    import json

    from solutions.gpt import load_checkpoint

    for name, stream in (("train", TRAIN), ("val", VAL)):
        docs = bytes(stream.clamp(max=255).to(torch.uint8).tolist()).split(b"\xff")  # EOT (256) -> 255
        with open(tmp_path / f"{name}.jsonl", "w", encoding="utf-8") as f:
            for i, doc in enumerate(d for d in docs if d):
                f.write(json.dumps({"id": i, "text": doc.decode(), "source": "test"}) + "\n")
    out, state = tmp_path / "model.pt", tmp_path / "state.pt"
    assert train.main(["--preset", "tiny", "--data", str(tmp_path), "--steps", "4", "--out", str(out),
                       "--state", str(state), "--no-progress"]) == 0
    model, meta = load_checkpoint(out)
    assert model.config == train.PRESETS["tiny"].model
    assert meta["steps"] == 4 and meta["tokens_seen"] == 4 * 8 * 32
    assert meta["corpus"]["train"]["documents"] == 80 and math.isfinite(meta["val_bpb"])
    assert meta["history"]["step"] == [1, 2, 3, 4]
    assert "val loss" in capsys.readouterr().out
    # the training state is there too: resuming a finished run changes nothing
    assert train.main(["--preset", "tiny", "--data", str(tmp_path), "--steps", "4", "--out", str(out),
                       "--state", str(state), "--resume", "--no-progress"]) == 0
    assert load_checkpoint(out)[1]["history"] == meta["history"]
