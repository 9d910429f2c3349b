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
    """Both optimisers on float64 twins, the same gradients for `steps` steps; compare.
    Returns our parameters after every step (for `course.answer`)."""
    rng = np.random.default_rng(seed)
    ours = [Tensor(rng.normal(size=s), requires_grad=True) for s in shapes]
    theirs = [torch.tensor(p.data.copy(), requires_grad=True) for p in ours]
    opt, topt = make_ours(ours), make_theirs(theirs)
    trajectory = []
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
        trajectory.append([p.data.copy() for p in ours])
        for p, q in zip(ours, theirs):
            np.testing.assert_allclose(p.data, q.detach().numpy(), rtol=1e-10, atol=1e-12,
                                       err_msg=f"after step {step + 1}")
    return trajectory


# ---------------------------------------------------------------------- 3.1
@pytest.mark.exercise("3.1")
@pytest.mark.parametrize("momentum, wd", [(0.0, 0.0), (0.99, 0.0), (0.5, 0.3)])
def test_sgd_other_settings_match_torch(momentum, wd):
    params = _same_steps(lambda ps: train.SGD(ps, lr=0.07, momentum=momentum, weight_decay=wd),
                         lambda ps: torch.optim.SGD(ps, lr=0.07, momentum=momentum, weight_decay=wd),
                         [(3,), (2, 5), (1, 1)], steps=12, seed=int(momentum * 100 + wd * 10))
    course.answer("parameters", params)  # float64, every step


# ---------------------------------------------------------------------- 3.2
@pytest.mark.exercise("3.2")
@pytest.mark.parametrize("betas, wd, eps", [((0.0, 0.0), 0.0, 1e-8), ((0.5, 0.9), 0.5, 1e-3),
                                            ((0.95, 0.9999), 0.01, 1e-12)])
def test_adamw_other_settings_match_torch(betas, wd, eps):
    lrs = [1e-3 * (k + 1) for k in range(15)]
    params = _same_steps(lambda ps: train.AdamW(ps, lr=1e-3, betas=betas, eps=eps, weight_decay=wd),
                         lambda ps: torch.optim.AdamW(ps, lr=1e-3, betas=betas, eps=eps, weight_decay=wd),
                         [(4, 3), (2,)], steps=15, seed=3, lrs=lrs)
    course.answer("parameters", params)


@pytest.mark.exercise("3.2")
def test_adamw_skips_a_parameter_without_gradient_and_counts_steps():
    w = Tensor(np.ones(2), requires_grad=True)
    frozen = Tensor(np.ones(2), requires_grad=True)
    opt = train.AdamW([w, frozen], lr=0.1, weight_decay=0.5)
    w.grad = np.array([1.0, -1.0])
    opt.step()
    course.answer("frozen", frozen.data)
    course.answer("w", w.data)
    np.testing.assert_array_equal(frozen.data, [1.0, 1.0])  # no gradient: no decay either
    # first step: m_hat = g, v_hat = g^2, so the step is lr * sign(g) (eps aside), after decay
    np.testing.assert_allclose(w.data, [1 * (1 - 0.05) - 0.1, 1 * (1 - 0.05) + 0.1], rtol=1e-6)


# ---------------------------------------------------------------------- 3.3
@pytest.mark.exercise("3.3")
@pytest.mark.parametrize("warmup, total, max_lr, min_lr", [(0, 10, 1.0, 0.0), (10, 10, 0.5, 0.1), (1, 2, 1.0, 0.5),
                                                           (7, 100, 3e-3, 3e-4)])
def test_schedule_against_the_formula(warmup, total, max_lr, min_lr):
    course.answer("lrs", [float(train.lr_schedule(step, max_lr=max_lr, warmup_steps=warmup, total_steps=total,
                                                  min_lr=min_lr)) for step in range(total + 5)],
                  rtol=1e-9, atol=1e-15)
    course.answer("np_int_step", float(train.lr_schedule(np.int64(0), max_lr=1.0, warmup_steps=0, total_steps=5)))
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
    course.answer("norm", norm)
    course.answer("grads", [p.grad for p in ours])
    tnorm = torch.nn.utils.clip_grad_norm_(theirs, max_norm)
    assert norm == pytest.approx(float(tnorm), rel=1e-12)
    for p, q in zip(ours, theirs):
        np.testing.assert_allclose(p.grad, q.grad.numpy(), rtol=1e-10)


@pytest.mark.exercise("3.4")
def test_clip_with_no_gradients_and_zero_gradients():
    p = Tensor(np.ones(3), requires_grad=True)
    none_norm = train.clip_grad_norm([p], 1.0)
    course.answer("no_gradient", [none_norm, p.grad])  # 0.0, and the grad stays None
    assert none_norm == 0.0 and p.grad is None
    p.grad = np.zeros(3)
    zero_norm = train.clip_grad_norm([p], 1.0)
    course.answer("zero_gradient", [zero_norm, p.grad])
    assert zero_norm == 0.0
    np.testing.assert_array_equal(p.grad, np.zeros(3))


# ---------------------------------------------------------------------- 3.5
@pytest.mark.exercise("3.5")
def test_sample_contexts_minimal_stream_and_every_offset():
    tokens = np.arange(5, dtype=np.int32)
    X, Y = train.sample_contexts(tokens, 64, 4, np.random.default_rng(0))
    course.answer("dtypes", [str(X.dtype), str(Y.dtype)])
    course.answer("one_window", [X, Y])
    assert X.dtype == np.int64 and Y.dtype == np.int64
    assert (X == np.arange(4)).all() and (Y == 4).all()  # one window only
    tokens = np.arange(100, dtype=np.uint8)
    X, Y = train.sample_contexts(tokens, 4000, 3, np.random.default_rng(1))
    # ONE rng.integers(0, high, size=batch_size) call, high = the count of valid offsets (the docstring)
    course.answer("first_windows", [X[:16], Y[:16]])
    course.answer("offset_counts", np.bincount(X[:, 0], minlength=97))
    assert (X[:, 1:] == X[:, :-1] + 1).all() and (Y == X[:, -1] + 1).all()
    assert set(X[:, 0].tolist()) == set(range(97)), \
        "every offset 0..N-context-1 (here 0..96) must be possible, and none past it"


@pytest.mark.exercise("3.5")
def test_mlp_lm_other_shape_matches_its_twin():
    model = train.MLPLanguageModel(context=3, embed_dim=5, hidden=11, rng=4)
    twin = train.TorchMLPLanguageModel.from_engine(model)
    idx = np.random.default_rng(2).integers(0, VOCAB_SIZE, (9, 3))
    logits = model(idx).data
    course.answer("logits", logits, rtol=1e-4, atol=1e-5)  # float32
    np.testing.assert_allclose(logits, twin(torch.from_numpy(idx)).detach().numpy(), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------- 3.6
@pytest.mark.exercise("3.6")
def test_evaluate_mlp_lm_caps_windows_and_needs_one():
    model = train.MLPLanguageModel(context=2, embed_dim=4, hidden=8, rng=0)
    tokens = np.random.default_rng(0).integers(0, 256, 50)
    full = train.evaluate_mlp_lm(model, tokens)
    first10 = train.evaluate_mlp_lm(model, tokens, max_windows=10)
    course.answer("losses", [full, first10], rtol=1e-5, atol=1e-6)  # float32 model
    from solutions.autograd import cross_entropy, no_grad
    X = np.stack([tokens[i:i + 2] for i in range(10)])
    with no_grad():
        want = cross_entropy(model(X), tokens[2:12]).item()
    assert first10 == pytest.approx(want, rel=1e-6)
    assert full != first10
    with pytest.raises(ValueError) as e:
        train.evaluate_mlp_lm(model, tokens[:2])
    course.answer("error", type(e.value).__name__)


@pytest.mark.exercise("3.6")
def test_engine_loop_one_step_and_eval_every_one():
    tokens = np.frombuffer(b"hello world, hello there " * 40, dtype=np.uint8).astype(np.int64)
    model = train.MLPLanguageModel(context=3, embed_dim=4, hidden=8, rng=1)
    h = train.train_mlp_lm(model, train.SGD(model.parameters(), lr=0.1), tokens[:800], tokens[800:],
                           steps=3, batch_size=4, max_lr=0.1, warmup_steps=1, min_lr=0.01, eval_every=1,
                           seed=5, log=None)
    course.answer("steps", [h["step"], h["val_step"]])
    course.answer("lr", h["lr"], rtol=1e-9, atol=1e-12)
    # the batches are fixed by the seed (one rng, sample_contexts); float32 losses and norms
    course.answer("losses", [h["loss"], h["grad_norm"], h["val_loss"]], rtol=1e-4, atol=1e-6)
    assert h["step"] == [1, 2, 3] and h["val_step"] == [1, 2, 3]
    assert h["lr"] == [pytest.approx(train.lr_schedule(s, max_lr=0.1, warmup_steps=1, total_steps=3, min_lr=0.01))
                       for s in range(3)]


# ---------------------------------------------------------------------- 3.7
@pytest.mark.exercise("3.7")
def test_get_batch_minimal_stream_and_generator_state():
    tokens = torch.arange(9, dtype=torch.int16)
    x, y = train.get_batch(tokens, 5, 8, torch.Generator().manual_seed(0))
    course.answer("dtypes", [str(x.dtype), str(y.dtype)])
    course.answer("minimal", [x, y])
    assert x.dtype == y.dtype == torch.int64 and x.shape == y.shape == (5, 8)
    assert (x == torch.arange(8)).all() and (y == torch.arange(1, 9)).all()
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    long = torch.arange(1000) % 250
    a = [train.get_batch(long, 2, 4, g1) for _ in range(3)]
    b = [train.get_batch(long, 2, 4, g2) for _ in range(3)]
    # ONE torch.randint(0, high, (B,), generator=...) per call, high = the count of valid starts
    course.answer("batches", [list(batch) for batch in a])
    assert all(torch.equal(p[0], q[0]) for p, q in zip(a, b))
    assert not torch.equal(a[0][0], a[1][0])


# ---------------------------------------------------------------------- 3.8
@pytest.mark.exercise("3.8")
@pytest.mark.parametrize("value", [0.0, -1.5, 1e308, 7])
def test_check_finite_passes_finite_values_through(value):
    got = train.check_finite(value, step=3)
    course.answer("value", got)  # the value itself
    assert got == value


@pytest.mark.exercise("3.8")
def test_check_finite_names_the_step_and_what():
    with pytest.raises(train.NonFiniteLossError, match=r"step 42.*gradient norm|gradient norm.*step 42") as e:
        train.check_finite(float("-inf"), step=42, what="gradient norm")
    course.answer("error", type(e.value).__name__)
    # the docstring fixes how the message starts: "step <step>: the <what> is <value>"
    start = "step 42: the gradient norm is -inf"
    course.answer("message_start", str(e.value)[:len(start)])


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
    course.answer("loss_norm", [loss_a, norm_a, loss_b, norm_b])  # float64 model
    course.answer("parameters_after", torch.cat([p.detach().flatten() for p in a.parameters()]))
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
    loss, norm = train.train_step(model, opt, [(x, y)], max_norm=1e9)
    course.answer("loss_norm", [loss, norm], rtol=1e-4, atol=1e-6)  # float32 model
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
    course.answer("tokens", ev["tokens"])
    course.answer("loss_bpb", [ev["loss"], ev["bpb"]], rtol=1e-6)
    assert ev["tokens"] == 32 and ev["loss"] == pytest.approx(math.log(VOCAB_SIZE), rel=1e-6)
    # targets tokens[1..32]: 16 of them are EOT
    assert ev["bpb"] == pytest.approx(32 * math.log2(VOCAB_SIZE) / 16, rel=1e-6)
    ev = train.evaluate(_Uniform(), tokens[:12], block_size=4)
    course.answer("short_stream", [ev["tokens"], ev["loss"], ev["bpb"]], rtol=1e-6)
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
    course.answer("step_history", [step, hist])
    course.answer("data_rng_state", rng2.get_state())
    state = opt2.state_dict()["state"]
    course.answer("optimizer_steps", [float(state[k]["step"]) for k in sorted(state)])
    course.answer("moments", [[float(state[k]["exp_avg"].abs().sum()), float(state[k]["exp_avg_sq"].sum())]
                              for k in sorted(state)], rtol=1e-5, atol=1e-12)
    with torch.no_grad():
        course.answer("loaded_loss", float(train.lm_loss(model2, x, y)), rtol=1e-5)
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
    course.answer("shards", [[sx, sy] for sx, sy in shards])
    assert all(sx.shape == (1, 2) for sx, _ in shards)
    assert [int(sx[0, 0]) for sx, _ in shards] == [0, 2, 4, 6, 8, 10]
    assert torch.equal(shards[3][1], x[3:4] + 100)
    with pytest.raises(ValueError) as e:
        train.shard_batch(x, x, -1, 2)
    course.answer("error", type(e.value).__name__)


# ---------------------------------------------------------------------- 3.12
def _eval_gpt(context=8, seed=11):
    from solutions.gpt import random_gpt

    return random_gpt(context, seed=seed, std=0.4, n_layer=1, n_head=2, n_embd=8)


def _slow_nats(model, ids, block_size):
    nats, start = 0.0, 0
    while start < len(ids) - 1:
        w = ids[start: start + block_size + 1]
        with torch.no_grad():
            logits = model(torch.tensor([w[:-1]]))[0]
        nats += float(torch.nn.functional.cross_entropy(logits, torch.tensor(w[1:]), reduction="sum"))
        start += block_size
    return nats


@pytest.mark.exercise("3.12")
def test_score_document_whole_windows_only_and_one_short_window():
    model = _eval_gpt()
    text = "x = [1, 2, 3]\n" * 4  # 56 bytes
    even = train.score_document(model, text, block_size=8, max_bytes=16)  # 16 targets: exactly two windows
    assert (even.tokens, even.bytes) == (16, 16)
    assert even.nats == pytest.approx(_slow_nats(model, [EOT, *text.encode()[:16]], 8), rel=1e-5)
    short = train.score_document(model, "ab", block_size=8)  # EOT a b EOT: one window of 3
    assert (short.tokens, short.bytes) == (3, 2)
    assert short.nats == pytest.approx(_slow_nats(model, [EOT, 97, 98, EOT], 8), rel=1e-5)
    course.answer("scores", [[even.nats, even.tokens, even.bytes], [short.nats, short.tokens, short.bytes]],
                  rtol=1e-5)
    with pytest.raises(ValueError):
        train.score_document(model, "", block_size=8)


@pytest.mark.exercise("3.12")
def test_mean_interval_two_values_and_another_z():
    iv = train.mean_interval([1.0, 3.0], z=2.576)
    half = 2.576 * math.sqrt(2.0) / math.sqrt(2)  # sample sd of (1, 3) is sqrt(2)
    assert (iv.mean, iv.n) == (2.0, 2)
    assert iv.low == pytest.approx(2.0 - half) and iv.high == pytest.approx(2.0 + half)
    same = train.mean_interval([0.5] * 7)
    assert same.low == same.high == pytest.approx(0.5)
    course.answer("interval", [iv.mean, iv.low, iv.high, iv.n])
    with pytest.raises(ValueError):
        train.mean_interval([1.0, 2.0], z=0)


@pytest.mark.exercise("3.12")
def test_source_row_two_documents_of_different_lengths():
    scores = [train.DocScore(nats=2.0, bits=2.0 / math.log(2), tokens=4, bytes=3),
              train.DocScore(nats=60.0, bits=60.0 / math.log(2), tokens=201, bytes=200)]
    row = train.source_row(scores)
    bpb = [s.bits / s.bytes for s in scores]
    assert row["bpb"] == pytest.approx(sum(bpb) / 2)
    assert row["bpb_high"] - row["bpb"] == pytest.approx(1.96 * abs(bpb[0] - bpb[1]) / math.sqrt(2) / math.sqrt(2))
    course.answer("row", {k: row[k] for k in ("bpb", "bpb_low", "bpb_high", "ppl", "ppl_low", "ppl_high")})


# ---------------------------------------------------------------------- 3.13
@pytest.mark.exercise("3.13")
def test_edit_similarity_on_characters_not_bytes():
    assert train.edit_similarity("é", "e") == 0.0  # one character, one substitution
    assert train.edit_similarity("naïve", "naive") == pytest.approx(0.8)
    assert train.edit_similarity("abcdef", "azced") == pytest.approx(1 - 3 / 6)
    assert train.edit_similarity("a", "a" * 5) == pytest.approx(0.2)
    values = [train.edit_similarity(a, b) for a, b in (("é", "e"), ("abcdef", "azced"), ("", "xy"))]
    course.answer("similarities", values)


@pytest.mark.exercise("3.13")
def test_exact_match_tabs_and_newlines_are_whitespace():
    assert train.exact_match("if x:\t\n", "if x:")
    assert not train.exact_match("if x:", "if x :")
    assert not train.exact_match("", "pass")
    pairs = [("if x:\t\n", "if x:"), ("if x:", "if x :"), ("", "pass"), ("  return  a\n", "return a"), ("x=1", "x = 1")]
    course.answer("matches", [bool(train.exact_match(p, t)) for p, t in pairs])  # str.split() equal


@pytest.mark.exercise("3.13")
def test_select_examples_every_candidate_leaked_or_one_asked():
    cands = [train.CompletionExample("test", f"f{i}.py", i, "p" * 70 + f"{i}", f"v = {i}") for i in range(12)]
    assert train.select_examples(cands, n=5, seed=0, train_text="".join(c.leak_text() for c in cands)) == []
    one = train.select_examples(cands, n=1, seed=5, train_text="")
    order = sorted(cands, key=lambda e: e.key)
    import random as _random

    _random.Random(5).shuffle(order)
    assert one == [order[0]]
    course.answer("picked", [list(e.key) for e in train.select_examples(cands, n=4, seed=9, train_text="")],
                  exact=True)


# ---------------------------------------------------------------------- 3.14
@pytest.mark.exercise("3.14")
def test_compare_with_zero_margins_and_a_missing_baseline_metric():
    margins = {"a": train.Margin(False, 0.0), "b": train.Margin(True, 0.0)}
    base = {"a": 1.0, "b": 1.0}
    assert train.compare(base, dict(base), margins) == []
    got = train.compare({"a": 1.0 + 2 ** -20, "b": 1.0 - 2 ** -20}, base, margins)
    assert len(got) == 2 and any(" a " in f" {g} " or g.startswith("a ") for g in got)
    course.answer("failures", len(got))
    with pytest.raises(KeyError):
        train.compare(base, {"a": 1.0}, margins)


@pytest.mark.exercise("3.11")
def test_two_processes_under_torchrun_match_one_process_with_twice_the_accumulation(tmp_path, one_thread):
    """The visible test's run under torchrun itself (`python -m torch.distributed.run
    --standalone --nproc_per_node 2 <the package>`), not forked from the test's process."""
    import importlib.util
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("_visible_test_train_ddp",
                                                  Path(__file__).parents[1] / "tests" / "test_train_ddp.py")
    visible = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(visible)
    train.shard_batch(torch.zeros(4, 2), torch.zeros(4, 2), 1, 2)  # fail fast while 3.11 is a stub
    visible._write_corpus(tmp_path)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           os.path.dirname(train.__file__), *visible.ddp_args(tmp_path)]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=150, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    ddp = json.loads((tmp_path / "ddp.json").read_text())
    visible.compare_with_one_process(tmp_path, ddp)
    course.answer("loss", ddp["loss"], rtol=0, atol=visible.TOLERANCE)

