"""Exercises 3.5–3.6: the byte-level MLP language model and its training loop on the engine."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import course
from solutions.autograd import Tensor, cross_entropy
from solutions.tokenizer import VOCAB_SIZE

train = course.load("train")

# Python source bytes: the kind of text the course trains on, and always present.
SOURCE = np.frombuffer(Tensor.__doc__.encode() * 20 + open(torch.__file__, "rb").read(), dtype=np.uint8)
TOKENS = SOURCE.astype(np.int64)


@pytest.mark.exercise("3.5")
def test_sample_contexts_are_windows_of_the_stream():
    tokens = np.arange(100, 160)  # distinct values: a window's start can be read off
    X, Y = train.sample_contexts(tokens, 500, 5, np.random.default_rng(0))
    assert X.shape == (500, 5) and Y.shape == (500,) and X.dtype == Y.dtype == np.int64, (
        f"X must be (batch_size, context) int64 and Y (batch_size,) int64, got {X.shape} {X.dtype}, {Y.shape} {Y.dtype}")
    starts = X[:, 0] - 100
    np.testing.assert_array_equal(X, 100 + starts[:, None] + np.arange(5),
                                  err_msg="each row of X must be `context` consecutive tokens of the stream")
    np.testing.assert_array_equal(Y, 100 + starts + 5, err_msg="Y[i] must be the token right after X[i]'s window")
    assert starts.min() == 0 and starts.max() == 60 - 5 - 1, (
        f"offsets drawn span {starts.min()}..{starts.max()}: with N = 60 and context 5 every offset 0..54 must be "
        f"possible (offset 54, window 54..58, is the last whose target, 59, is inside the stream) and none past it")
    again = train.sample_contexts(tokens, 500, 5, np.random.default_rng(0))
    np.testing.assert_array_equal(again[0], X, err_msg="the same seed must give the same batch: the generator decides")
    with pytest.raises(ValueError):
        train.sample_contexts(tokens[:5], 1, 5, np.random.default_rng(0))


@pytest.mark.exercise("3.5")
def test_mlp_lm_matches_its_torch_twin():
    model = train.MLPLanguageModel(context=6, embed_dim=8, hidden=32, rng=1)
    twin = train.TorchMLPLanguageModel.from_engine(model)
    idx = np.random.default_rng(0).integers(0, VOCAB_SIZE, (16, 6))
    idx[0, :] = 7  # one token used six times in one row: its embedding gradients must add up
    logits = model(idx)
    assert logits.shape == (16, VOCAB_SIZE)
    ref = twin(torch.from_numpy(idx))
    np.testing.assert_allclose(logits.data, ref.detach().numpy(), rtol=1e-5, atol=1e-5)  # float32
    targets = np.arange(16)
    cross_entropy(logits, targets).backward()
    torch.nn.functional.cross_entropy(ref, torch.from_numpy(targets)).backward()
    np.testing.assert_allclose(model.embedding.grad, twin.embedding.weight.grad.numpy(), atol=1e-6)
    np.testing.assert_allclose(model.hidden.weight.grad, twin.hidden.weight.grad.numpy().T, atol=1e-6)
    with pytest.raises(ValueError):
        model(idx[:, :5])  # wrong context length
    with pytest.raises(ValueError):
        model(np.full((1, 6), VOCAB_SIZE))  # not a token id


@pytest.mark.exercise("3.5")
def test_mlp_lm_trained_with_adamw_tracks_torch():
    """Stage 01's gradients + 3.2's AdamW on the 3.5 model == PyTorch, step by step (float32)."""
    rng = np.random.default_rng(0)
    model = train.MLPLanguageModel(context=4, embed_dim=8, hidden=32, rng=0)
    twin = train.TorchMLPLanguageModel.from_engine(model)
    opt = train.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    torch_opt = torch.optim.AdamW(twin.parameters(), lr=1e-2, weight_decay=0.1)
    for _ in range(5):
        X, Y = rng.integers(0, VOCAB_SIZE, (32, 4)), rng.integers(0, VOCAB_SIZE, 32)
        loss = cross_entropy(model(X), Y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        torch_loss = torch.nn.functional.cross_entropy(twin(torch.from_numpy(X)), torch.from_numpy(Y))
        torch_opt.zero_grad()
        torch_loss.backward()
        torch_opt.step()
        assert loss.item() == pytest.approx(torch_loss.item(), rel=1e-4)
    np.testing.assert_allclose(model.embedding.data, twin.embedding.weight.detach().numpy(), atol=1e-4)


@pytest.mark.exercise("3.6")
def test_evaluate_mlp_lm_is_the_mean_loss_of_every_window():
    model = train.MLPLanguageModel(context=3, embed_dim=4, hidden=16, rng=0)
    tokens = TOKENS[:200]
    value = train.evaluate_mlp_lm(model, tokens, max_windows=50)
    X = np.stack([tokens[i:i + 3] for i in range(50)])
    Y = tokens[3:53]
    assert value == pytest.approx(cross_entropy(model(X), Y).item(), rel=1e-6)
    assert train.evaluate_mlp_lm(model, tokens, max_windows=50) == value  # deterministic
    assert all(p.grad is None for p in model.parameters())  # nothing recorded, nothing accumulated


@pytest.mark.exercise("3.6")
def test_short_run_loss_falls_and_history_is_complete():
    split = int(0.9 * len(TOKENS))
    model = train.MLPLanguageModel(context=8, embed_dim=16, hidden=128, rng=0)
    opt = train.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    lines = []
    h = train.train_mlp_lm(model, opt, TOKENS[:split], TOKENS[split:], steps=120, batch_size=64,
                           max_lr=1e-2, warmup_steps=10, min_lr=1e-3, eval_every=40, seed=0, log=lines.append)
    assert h["step"] == list(range(1, 121)) and len(h["loss"]) == len(h["lr"]) == len(h["grad_norm"]) == 120
    assert h["val_step"] == [40, 80, 120] and len(h["val_loss"]) == 3 and len(lines) == 3
    expected_lr = [train.lr_schedule(s, max_lr=1e-2, warmup_steps=10, total_steps=120, min_lr=1e-3)
                   for s in range(120)]
    np.testing.assert_allclose(h["lr"], expected_lr)
    start, end = np.mean(h["loss"][:10]), np.mean(h["loss"][-10:])
    assert start > np.log(VOCAB_SIZE) - 1.0  # ~uniform guessing at first (ln 257 = 5.55 nats)
    assert end < start - 1.5, (start, end)  # it learns byte statistics fast
    assert h["val_loss"][-1] < h["val_loss"][0]
    assert all(np.isfinite(h["grad_norm"]))


@pytest.mark.exercise("3.6")
def test_engine_run_is_reproducible_with_a_seed():
    def run():
        model = train.MLPLanguageModel(context=4, embed_dim=8, hidden=32, rng=3)
        opt = train.SGD(model.parameters(), lr=0.1, momentum=0.9)
        return train.train_mlp_lm(model, opt, TOKENS[:5000], TOKENS[5000:6000], steps=15, batch_size=16,
                                  max_lr=0.1, warmup_steps=3, min_lr=0.01, eval_every=5, seed=11, log=None)
    assert run() == run()


@pytest.mark.exercise("3.6")
def test_engine_loop_draws_each_batch_from_one_generator():
    """With a learning rate of 0 the weights never move, so step k's loss is the fresh model's
    loss on the k-th batch that ONE np.random.default_rng(seed) gives sample_contexts."""
    model = train.MLPLanguageModel(context=4, embed_dim=8, hidden=16, rng=2)
    opt = train.SGD(model.parameters(), lr=0.1)
    h = train.train_mlp_lm(model, opt, TOKENS[:4000], TOKENS[4000:5000], steps=4, batch_size=8, max_lr=0.0,
                           warmup_steps=0, min_lr=0.0, eval_every=10, seed=7, log=None)
    rng = np.random.default_rng(7)
    want = [cross_entropy(model(X), Y).item() for X, Y in (train.sample_contexts(TOKENS[:4000], 8, 4, rng)
                                                           for _ in range(4))]
    np.testing.assert_allclose(h["loss"], want, rtol=1e-6, err_msg=(
        "step k must train on the k-th batch of one generator made before the loop "
        "(np.random.default_rng(seed)), and record that batch's loss"))


@pytest.mark.exercise("3.6")
def test_engine_loop_clips_before_the_step():
    model = train.MLPLanguageModel(context=4, embed_dim=8, hidden=16, rng=0)
    before = [p.data.astype(np.float64) for p in model.parameters()]
    opt = train.SGD(model.parameters(), lr=1.0)
    h = train.train_mlp_lm(model, opt, TOKENS[:3000], TOKENS[3000:3600], steps=1, batch_size=16, max_lr=1.0,
                           warmup_steps=0, min_lr=1.0, max_norm=0.01, eval_every=1, seed=0, log=None)
    moved = np.sqrt(sum(((p.data - b) ** 2).sum() for p, b in zip(model.parameters(), before)))
    assert h["grad_norm"][0] > 0.01
    assert moved == pytest.approx(0.01, rel=1e-3), (
        f"with plain SGD at lr 1 the step must move the weights by the gradient clipped to max_norm 0.01 "
        f"(clip before optimizer.step()); they moved {moved:.4g}, the unclipped gradient's norm is "
        f"{h['grad_norm'][0]:.4g}")


@pytest.mark.exercise("3.6")
def test_each_step_steps_on_its_own_batchs_gradient():
    """With a learning rate of 0 the weights never move, so step k's gradient norm (before
    clipping) is that of the fresh model's loss on batch k alone: a gradient left over from
    step k - 1 (no optimizer.zero_grad()) adds into it."""
    def fresh():
        return train.MLPLanguageModel(context=4, embed_dim=8, hidden=16, rng=5)
    model = fresh()
    opt = train.SGD(model.parameters(), lr=0.1)
    h = train.train_mlp_lm(model, opt, TOKENS[:4000], TOKENS[4000:5000], steps=4, batch_size=8, max_lr=0.0,
                           warmup_steps=0, min_lr=0.0, max_norm=1e9, eval_every=10, seed=3, log=None)
    rng = np.random.default_rng(3)
    want = []
    for _ in range(4):
        twin = fresh()
        X, Y = train.sample_contexts(TOKENS[:4000], 8, 4, rng)
        cross_entropy(twin(X), Y).backward()
        want.append(float(np.sqrt(sum((p.grad.astype(np.float64) ** 2).sum() for p in twin.parameters()))))
    got = [float(g) for g in h["grad_norm"]]
    np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=(
        f"the gradient norms of steps 1-4 are {np.round(got, 4).tolist()}, expected those of each step's batch "
        f"loss alone, {np.round(want, 4).tolist()}: clear the gradients before each backward "
        f"(optimizer.zero_grad()), or every step adds its gradient to the previous ones'"))
