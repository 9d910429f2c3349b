"""Stage 03, held-out cases: other settings, sizes and seeds than the visible tests show,
against PyTorch's optimisers and functions or against the written definitions."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import course
from solutions.autograd import Tensor
from solutions.gpt import GPT, GPTConfig
from solutions.tokenizer import EOT, VOCAB_SIZE

train = course.load("train")

TINY = GPTConfig(block_size=8, n_layer=1, n_head=2, n_embd=8)


def _same_steps(make_ours, make_theirs, shapes, steps, seed, lrs=None):
    """Both optimisers on float64 twins, the same gradients for `steps` steps; compare."""
    rng = np.random.default_rng(seed)
    ours = [Tensor(rng.normal(size=s), requires_grad=True) for s in shapes]
    theirs = [torch.tensor(p.data.copy(), requires_grad=True) for p in ours]
    opt, topt = make_ours(ours), make_theirs(theirs)
    for step in range(steps):
        grads = [rng.normal(size=s) * 10.0 ** rng.integers(-3, 2) for s in shapes]
        if lrs is not None:
            opt.lr = lrs[step]
            for group in topt.param_groups:
                group["lr"] = lrs[step]
        for p, q, g in zip(ours, theirs, grads):
            p.grad, q.grad = g.copy(), torch.tensor(g)
        opt.step()
        topt.step()
        for p, q in zip(ours, theirs):
            np.testing.assert_allclose(p.data, q.detach().numpy(), rtol=1e-10, atol=1e-12,
                                       err_msg=f"after step {step + 1}")


# ---------------------------------------------------------------------- 3.1
@pytest.mark.exercise("3.1")
@pytest.mark.parametrize("momentum, wd", [(0.0, 0.0), (0.99, 0.0), (0.5, 0.3)])
def test_sgd_other_settings_match_torch(momentum, wd):
    _same_steps(lambda ps: train.SGD(ps, lr=0.07, momentum=momentum, weight_decay=wd),
                lambda ps: torch.optim.SGD(ps, lr=0.07, momentum=momentum, weight_decay=wd),
                [(3,), (2, 5), (1, 1)], steps=12, seed=int(momentum * 100 + wd * 10))


# ---------------------------------------------------------------------- 3.2
@pytest.mark.exercise("3.2")
@pytest.mark.parametrize("betas, wd, eps", [((0.0, 0.0), 0.0, 1e-8), ((0.5, 0.9), 0.5, 1e-3),
                                            ((0.95, 0.9999), 0.01, 1e-12)])
def test_adamw_other_settings_match_torch(betas, wd, eps):
    lrs = [1e-3 * (k + 1) for k in range(15)]
    _same_steps(lambda ps: train.AdamW(ps, lr=1e-3, betas=betas, eps=eps, weight_decay=wd),
                lambda ps: torch.optim.AdamW(ps, lr=1e-3, betas=betas, eps=eps, weight_decay=wd),
                [(4, 3), (2,)], steps=15, seed=3, lrs=lrs)


@pytest.mark.exercise("3.2")
def test_adamw_skips_a_parameter_without_gradient_and_counts_steps():
    w = Tensor(np.ones(2), requires_grad=True)
    frozen = Tensor(np.ones(2), requires_grad=True)
    opt = train.AdamW([w, frozen], lr=0.1, weight_decay=0.5)
    w.grad = np.array([1.0, -1.0])
    opt.step()
    np.testing.assert_array_equal(frozen.data, [1.0, 1.0])  # no gradient: no decay either
    # first step: m_hat = g, v_hat = g^2, so the step is lr * sign(g) (eps aside), after decay
    np.testing.assert_allclose(w.data, [1 * (1 - 0.05) - 0.1, 1 * (1 - 0.05) + 0.1], rtol=1e-6)


# ---------------------------------------------------------------------- 3.3
@pytest.mark.exercise("3.3")
@pytest.mark.parametrize("warmup, total, max_lr, min_lr", [(0, 10, 1.0, 0.0), (10, 10, 0.5, 0.1), (1, 2, 1.0, 0.5),
                                                           (7, 100, 3e-3, 3e-4)])
def test_schedule_against_the_formula(warmup, total, max_lr, min_lr):
    for step in range(total + 5):
        if step < warmup:
            want = max_lr * (step + 1) / warmup
        elif step >= total:
            want = min_lr
        else:
            progress = (step - warmup) / max(1, total - warmup)
            want = min_lr + (max_lr - min_lr) * (1 + math.cos(math.pi * progress)) / 2
        got = train.lr_schedule(step, max_lr=max_lr, warmup_steps=warmup, total_steps=total, min_lr=min_lr)
        assert got == pytest.approx(want, rel=1e-12, abs=1e-15), f"step {step}"
    assert train.lr_schedule(np.int64(0), max_lr=1.0, warmup_steps=0, total_steps=5) == pytest.approx(1.0)


# ---------------------------------------------------------------------- 3.4
@pytest.mark.exercise("3.4")
@pytest.mark.parametrize("max_norm", [1e-3, 2.0, 1e6])
def test_clip_many_parameters_against_torch(max_norm):
    rng = np.random.default_rng(int(max_norm * 10) % 97)
    shapes = [(7, 3), (3,), (1,), (2, 2, 2)]
    ours = [Tensor(np.zeros(s), requires_grad=True) for s in shapes]
    theirs = [torch.zeros(s, dtype=torch.float64, requires_grad=True) for s in shapes]
    for p, q in zip(ours, theirs):
        g = rng.normal(size=p.shape)
        p.grad, q.grad = g.copy(), torch.tensor(g)
    norm = train.clip_grad_norm(ours, max_norm)
    tnorm = torch.nn.utils.clip_grad_norm_(theirs, max_norm)
    assert norm == pytest.approx(float(tnorm), rel=1e-12)
    for p, q in zip(ours, theirs):
        np.testing.assert_allclose(p.grad, q.grad.numpy(), rtol=1e-10)


@pytest.mark.exercise("3.4")
def test_clip_with_no_gradients_and_zero_gradients():
    p = Tensor(np.ones(3), requires_grad=True)
    assert train.clip_grad_norm([p], 1.0) == 0.0 and p.grad is None
    p.grad = np.zeros(3)
    assert train.clip_grad_norm([p], 1.0) == 0.0
    np.testing.assert_array_equal(p.grad, np.zeros(3))


# ---------------------------------------------------------------------- 3.5
@pytest.mark.exercise("3.5")
def test_sample_contexts_minimal_stream_and_every_offset():
    tokens = np.arange(5, dtype=np.int32)
    X, Y = train.sample_contexts(tokens, 64, 4, np.random.default_rng(0))
    assert X.dtype == np.int64 and Y.dtype == np.int64
    assert (X == np.arange(4)).all() and (Y == 4).all()  # one window only
    tokens = np.arange(100, dtype=np.uint8)
    X, Y = train.sample_contexts(tokens, 4000, 3, np.random.default_rng(1))
    assert (X[:, 1:] == X[:, :-1] + 1).all() and (Y == X[:, -1] + 1).all()
    assert set(X[:, 0].tolist()) == set(range(97))  # every offset 0..N-context-1 is drawn


@pytest.mark.exercise("3.5")
def test_mlp_lm_other_shape_matches_its_twin():
    model = train.MLPLanguageModel(context=3, embed_dim=5, hidden=11, rng=4)
    twin = train.TorchMLPLanguageModel.from_engine(model)
    idx = np.random.default_rng(2).integers(0, VOCAB_SIZE, (9, 3))
    np.testing.assert_allclose(model(idx).data, twin(torch.from_numpy(idx)).detach().numpy(), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------- 3.6
@pytest.mark.exercise("3.6")
def test_evaluate_mlp_lm_caps_windows_and_needs_one():
    model = train.MLPLanguageModel(context=2, embed_dim=4, hidden=8, rng=0)
    tokens = np.random.default_rng(0).integers(0, 256, 50)
    full = train.evaluate_mlp_lm(model, tokens)
    first10 = train.evaluate_mlp_lm(model, tokens, max_windows=10)
    from solutions.autograd import cross_entropy, no_grad
    X = np.stack([tokens[i:i + 2] for i in range(10)])
    with no_grad():
        want = cross_entropy(model(X), tokens[2:12]).item()
    assert first10 == pytest.approx(want, rel=1e-6)
    assert full != first10
    with pytest.raises(ValueError):
        train.evaluate_mlp_lm(model, tokens[:2])


@pytest.mark.exercise("3.6")
def test_engine_loop_one_step_and_eval_every_one():
    tokens = np.frombuffer(b"hello world, hello there " * 40, dtype=np.uint8).astype(np.int64)
    model = train.MLPLanguageModel(context=3, embed_dim=4, hidden=8, rng=1)
    h = train.train_mlp_lm(model, train.SGD(model.parameters(), lr=0.1), tokens[:800], tokens[800:],
                           steps=3, batch_size=4, max_lr=0.1, warmup_steps=1, min_lr=0.01, eval_every=1,
                           seed=5, log=None)
    assert h["step"] == [1, 2, 3] and h["val_step"] == [1, 2, 3]
    assert h["lr"] == [pytest.approx(train.lr_schedule(s, max_lr=0.1, warmup_steps=1, total_steps=3, min_lr=0.01))
                       for s in range(3)]


# ---------------------------------------------------------------------- 3.7
@pytest.mark.exercise("3.7")
def test_get_batch_minimal_stream_and_generator_state():
    tokens = torch.arange(9, dtype=torch.int16)
    x, y = train.get_batch(tokens, 5, 8, torch.Generator().manual_seed(0))
    assert x.dtype == y.dtype == torch.int64 and x.shape == y.shape == (5, 8)
    assert (x == torch.arange(8)).all() and (y == torch.arange(1, 9)).all()
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    long = torch.arange(1000) % 250
    a = [train.get_batch(long, 2, 4, g1) for _ in range(3)]
    b = [train.get_batch(long, 2, 4, g2) for _ in range(3)]
    assert all(torch.equal(p[0], q[0]) for p, q in zip(a, b))
    assert not torch.equal(a[0][0], a[1][0])


# ---------------------------------------------------------------------- 3.8
@pytest.mark.exercise("3.8")
@pytest.mark.parametrize("value", [0.0, -1.5, 1e308, 7])
def test_check_finite_passes_finite_values_through(value):
    assert train.check_finite(value, step=3) == value


@pytest.mark.exercise("3.8")
def test_check_finite_names_the_step_and_what():
    with pytest.raises(train.NonFiniteLossError, match=r"step 42.*gradient norm|gradient norm.*step 42"):
        train.check_finite(float("-inf"), step=42, what="gradient norm")


# ---------------------------------------------------------------------- 3.8
def _stream(seed, n=600):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB_SIZE, (n,), generator=g, dtype=torch.int16)


@pytest.mark.exercise("3.8")
def test_three_uneven_micro_batches_of_equal_size_equal_one_batch():
    torch.manual_seed(0)
    a, b = GPT(TINY).double(), GPT(TINY).double()
    b.load_state_dict(a.state_dict())
    x, y = train.get_batch(_stream(1), 6, 8, torch.Generator().manual_seed(2))
    opt_a = torch.optim.SGD(a.parameters(), lr=0.1)
    opt_b = torch.optim.SGD(b.parameters(), lr=0.1)
    loss_a, norm_a = train.train_step(a, opt_a, [(x[:2], y[:2]), (x[2:4], y[2:4]), (x[4:], y[4:])], max_norm=1e9)
    loss_b, norm_b = train.train_step(b, opt_b, [(x, y)], max_norm=1e9)
    assert loss_a == pytest.approx(loss_b, rel=1e-10) and norm_a == pytest.approx(norm_b, rel=1e-9)
    for p, q in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-9, atol=1e-12)


@pytest.mark.exercise("3.8")
def test_train_step_zeroes_old_gradients_first():
    torch.manual_seed(1)
    model = GPT(TINY)
    for p in model.parameters():
        p.grad = torch.full_like(p, 1e6)  # stale gradients from elsewhere
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    x, y = train.get_batch(_stream(3), 2, 8, torch.Generator().manual_seed(0))
    _, norm = train.train_step(model, opt, [(x, y)], max_norm=1e9)
    model.zero_grad()
    train.lm_loss(model, x, y).backward()
    want = torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters()))
    assert norm == pytest.approx(float(want), rel=1e-4)


# ---------------------------------------------------------------------- 3.9
class _Uniform(torch.nn.Module):
    def forward(self, x):
        return torch.zeros(*x.shape, VOCAB_SIZE)


@pytest.mark.exercise("3.9")
def test_evaluate_window_count_and_all_end_of_text():
    tokens = torch.full((33,), EOT, dtype=torch.int16)
    tokens[::2] = 65
    ev = train.evaluate(_Uniform(), tokens, block_size=4, batch_size=5)
    assert ev["tokens"] == 32 and ev["loss"] == pytest.approx(math.log(VOCAB_SIZE), rel=1e-6)
    # targets tokens[1..32]: 16 of them are EOT
    assert ev["bpb"] == pytest.approx(32 * math.log2(VOCAB_SIZE) / 16, rel=1e-6)
    ev = train.evaluate(_Uniform(), tokens[:12], block_size=4)
    assert ev["tokens"] == 8  # (12 - 1) // 4 = 2 whole windows


# ---------------------------------------------------------------------- 3.10
@pytest.mark.exercise("3.10")
def test_training_state_keeps_the_step_history_and_optimizer_moments(tmp_path):
    torch.manual_seed(2)
    model = GPT(TINY)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = train.get_batch(_stream(4), 2, 8, torch.Generator().manual_seed(1))
    for _ in range(2):
        opt.zero_grad()
        train.lm_loss(model, x, y).backward()
        opt.step()
    rng = torch.Generator().manual_seed(9)
    train.get_batch(_stream(4), 2, 8, rng)  # move the data position
    history = {"step": [1, 2], "loss": [3.0, 2.5]}
    path = train.save_training_state(tmp_path / "state.pt", model=model, optimizer=opt, step=2, data_rng=rng,
                                     history=history, config={"lr": 1e-2})
    model2 = GPT(TINY)
    opt2 = torch.optim.AdamW(model2.parameters(), lr=1e-2)
    rng2 = torch.Generator()
    step, hist = train.load_training_state(path, model=model2, optimizer=opt2, data_rng=rng2, config={"lr": 1e-2})
    assert step == 2 and hist == history
    assert torch.equal(rng2.get_state(), rng.get_state())
    assert opt2.state_dict()["state"][0]["step"] == opt.state_dict()["state"][0]["step"]
    # the same next step from both
    for m, o in ((model, opt), (model2, opt2)):
        o.zero_grad()
        train.lm_loss(m, x, y).backward()
        o.step()
    for p, q in zip(model.parameters(), model2.parameters()):
        assert torch.equal(p, q)


# ---------------------------------------------------------------------- 3.11
@pytest.mark.exercise("3.11")
def test_shard_batch_world_of_one_row_each():
    x = torch.arange(6 * 2).view(6, 2)
    shards = [train.shard_batch(x, x + 100, r, 6) for r in range(6)]
    assert all(sx.shape == (1, 2) for sx, _ in shards)
    assert [int(sx[0, 0]) for sx, _ in shards] == [0, 2, 4, 6, 8, 10]
    assert torch.equal(shards[3][1], x[3:4] + 100)
    with pytest.raises(ValueError):
        train.shard_batch(x, x, -1, 2)
