"""`course eval smollm2`'s machinery (solutions/train/smollm2_eval.py, stdlib_task.py, given code
of stage 03) on a tiny random Llama with the tiny byte-level BPE tokenizer of stage 04's
tiny_gguf (never SmolLM2 itself: its figures are README 03's, from a real run). Oracles: the
model's own log-softmax computed here, and lm-eval's rules for a multiple-choice task."""

from __future__ import annotations

import json
import math
import statistics

import pytest
import torch

from solutions.dedup import ByteLevelBPE
from solutions.kv_cache.tiny_gguf import TINY_MERGES, TINY_SPECIAL, TINY_VOCAB, tiny_tokens
from solutions.train import random_llama, run_eval, smollm2_eval, stdlib_task


@pytest.fixture(scope="module")
def tok():
    return ByteLevelBPE(tiny_tokens(), list(TINY_MERGES), list(TINY_SPECIAL), pretokenizer="smollm")


@pytest.fixture(scope="module")
def model():
    return random_llama(vocab_size=TINY_VOCAB, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=48,
                        max_seq_len=512, std=0.3)


def _logprobs(model, ids):
    """(len(ids) - 1, V): the model's log-softmax at each position but the last, one row, no batching."""
    with torch.no_grad():
        return torch.log_softmax(model(torch.tensor([ids[:-1]])).double()[0], -1)


def test_the_task_is_built_deterministically_with_its_answer_among_the_choices_once():
    docs = stdlib_task.documents()
    assert docs == stdlib_task.documents(), "the same interpreter must build the same questions"
    assert len(docs) == 64, "README 03 and 07 record 64 questions on this Python"
    for i, d in enumerate(docs):
        assert len(d["choices"]) == stdlib_task.CHOICES == len(set(d["choices"])), f"question {i}: {d['choices']}"
        module = d["choices"][d["answer"]]
        assert d["choices"].count(module) == 1 and module in stdlib_task.MODULES, \
            f"question {i}: the answer must be one of the choices exactly once, got {d}"
        assert module not in d["question"].lower().split(), f"question {i} names its answer: {d['question']!r}"
        assert stdlib_task.context(d) == f'Question: Which Python standard library module does this describe? ' \
                                         f'"{d["question"]}"\nAnswer:', "the prompt must be lm-eval's doc_to_text"
    assert sum(d["answer"] == k for d in docs for k in range(4)) == 64 and len({d["answer"] for d in docs}) == 4, \
        "the answers' positions are shuffled, not always the first"


def test_bits_per_byte_is_the_models_nll_in_bits_over_the_documents_utf8_bytes(model, tok):
    text = "the theme: héllo\n"  # bytes != characters, merges apply
    [score] = smollm2_eval.score_texts(model, tok, [text])
    eot = tok.special_ids["<|endoftext|>"]
    ids = [eot, *tok.encode(text), eot]  # the whole text fits: its end is predicted too
    lp = _logprobs(model, ids)
    nats = -sum(float(lp[t, ids[t + 1]]) for t in range(len(ids) - 1))
    assert score.bytes == len(text.encode("utf-8")) == 18, "bytes are the text's UTF-8 bytes, not its characters"
    assert score.tokens == len(ids) - 1
    assert score.bits == pytest.approx(nats / math.log(2), rel=1e-6), \
        "bits = the summed NLL of every token after the leading <|endoftext|> (the final one included), in bits"
    cut = smollm2_eval.score_texts(model, tok, [text], max_bytes=8)[0]  # "the them": no end mark is predicted
    ids = [eot, *tok.encode(text[:8])]
    lp = _logprobs(model, ids)
    assert cut.bytes == 8 and cut.tokens == len(ids) - 1
    assert cut.nats == pytest.approx(-sum(float(lp[t, ids[t + 1]]) for t in range(len(ids) - 1)), rel=1e-6), \
        "a cut document is scored without a final <|endoftext|>"
    whole, half = smollm2_eval.score_texts(model, tok, [text, text], max_bytes=14)[0], \
        smollm2_eval.score_texts(model, tok, [text], max_bytes=13)[0]  # "é" is bytes 13-14
    assert whole.bytes == 14 and half.bytes == 12, \
        "a character the limit cuts is dropped, never half-counted"


def test_batched_and_windowed_scoring_equals_one_row_at_a_time(model, tok):
    texts = ["a", "the the the", "x = 1\n" * 30]  # lengths differ: padded rows in one batch
    nats = smollm2_eval.sequence_nats(model, [smollm2_eval.document_ids(tok, t)[0] for t in texts])
    for t, n in zip(texts, nats):
        ids = smollm2_eval.document_ids(tok, t)[0]
        lp = _logprobs(model, ids)
        want = torch.tensor([-float(lp[i, ids[i + 1]]) for i in range(len(ids) - 1)], dtype=torch.float64)
        assert torch.allclose(n, want, atol=1e-5), f"padding to the right must not change a row's NLL ({t!r})"
    short = random_llama(vocab_size=TINY_VOCAB, dim=32, n_layers=1, n_heads=4, n_kv_heads=2, hidden_dim=48,
                         max_seq_len=16, std=0.3)
    ids = smollm2_eval.document_ids(tok, texts[2])[0]  # 181 ids: windows of 16 targets
    [n] = smollm2_eval.sequence_nats(short, [ids])
    want = []
    for start in range(0, len(ids) - 1, 16):
        w = ids[start:start + 17]
        lp = _logprobs(short, w)
        want += [-float(lp[i, w[i + 1]]) for i in range(len(w) - 1)]
    assert len(n) == len(ids) - 1 and torch.allclose(n, torch.tensor(want, dtype=torch.float64), atol=1e-5), \
        "a document longer than the context is scored in consecutive windows, each from its own start"


def test_each_choice_is_scored_by_its_continuations_log_likelihood_as_lm_eval_does(model, tok):
    doc = {"question": "the theme", "choices": ["re", "os", "the", "abc"], "answer": 2}
    got = smollm2_eval.score_question(model, tok, doc)
    context = stdlib_task.context(doc)
    ctx = tok.encode(context)
    lls = []
    for c in doc["choices"]:
        cont = tok.encode(context + " " + c)[len(ctx):]
        ids = ctx + cont
        lp = _logprobs(model, ids)
        lls.append(sum(float(lp[len(ctx) - 1 + j, cont[j]]) for j in range(len(cont))))
    assert got["loglikelihoods"] == pytest.approx(lls, abs=1e-4), \
        "ll(choice) = the summed log-probabilities of ' ' + choice's tokens after the prompt's (not the prompt's)"
    assert got["pred"] == max(range(4), key=lambda i: lls[i]) and got["correct"] == (got["pred"] == 2)
    norm = [ll / len(c) for ll, c in zip(lls, doc["choices"])]
    assert got["pred_norm"] == max(range(4), key=lambda i: norm[i]), \
        "acc_norm divides by the choice's length in characters (lm-eval), not its tokens"
    assert smollm2_eval.choice_tokens(tok, "Answer: ", "x") == (tok.encode("Answer:"), tok.encode("Answer: x")[
        len(tok.encode("Answer:")):]), "lm-eval moves a context's trailing space into the continuation"


def _write_corpus(folder):
    folder.mkdir()
    code = "".join(f"def f_{i}(a, b):\n    total = a * {i} + b\n    return total\n\n" for i in range(12))
    splits = {"train": [{"id": "py:t.py", "source": "t.py", "text": code.replace("f_", "g_")}],
              "val": [{"id": "py:v.py", "source": "v.py", "text": code},
                      {"id": "topic:for", "source": "pydoc_data.topics:for", "text": "The for statement. " * 40}],
              "test": [{"id": "py:s.py", "source": "s.py", "text": code.replace("f_", "h_")},
                       {"id": "topic:if", "source": "pydoc_data.topics:if", "text": "The if statement. " * 9}]}
    for name, docs in splits.items():
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")


def test_evaluate_decoder_and_the_gate_on_its_reports(model, tok, tmp_path, capsys):
    _write_corpus(tmp_path / "corpus")
    data = str(tmp_path / "corpus")
    before = torch.get_num_threads()
    r = smollm2_eval.evaluate_decoder(model, tok, examples=1, task_questions=2, max_bytes=1000, threads=1, data=data)
    assert torch.get_num_threads() == before and not model.training, "threads and the model's mode come back"
    assert set(r) >= {"bits_per_byte", "line_exact", "line_edit_sim", "task_acc", "task_acc_norm", "task_n"}
    assert r["task_n"] == 2 and 0 <= r["task_acc"] <= 1 and 0 <= r["task_acc_norm"] <= 1
    assert r["task_acc"] == statistics.mean(t["correct"] for t in r["task_samples"])
    assert len(r["line_samples"]) == 1 and 0 <= r["line_exact"] <= 100 and 0 <= r["line_edit_sim"] <= 100
    docs = r["construction"]["documents"]
    assert len(docs["code"]) == 1 and len(docs["prose"]) == 2, \
        "under a 1,000-byte cap: one 512-byte code document (a second would pass the cap), both short prose ones"
    texts = {d["id"]: d["text"] for s in ("val", "test")
             for d in map(json.loads, (tmp_path / "corpus" / f"{s}.jsonl").read_text().splitlines())}
    for kind, ids in docs.items():
        scores = smollm2_eval.score_texts(model, tok, [texts[i] for i in ids])
        assert r["bits_per_byte"][kind] == pytest.approx(statistics.mean(s.bpb for s in scores)), \
            "bits/byte of a source is the mean over its documents of bits / bytes (stage 03's source_row)"
    # the command's gate between two reports of the same family
    loaders = {"tiny": lambda: (model, tok)}
    args = dict(data=data, examples=1, task_questions=2, max_bytes=1000, threads=1, loaders=loaders)
    report = tmp_path / "tiny.json"
    assert run_eval("tiny", json_out=str(report), **args) == 0
    out = capsys.readouterr().out
    assert "task stdlib_modules, 2 questions" in out and "at most 1,000 bytes per source" in out, out
    assert run_eval("tiny", str(report), **args) == 0 and "task_acc -0.05" in capsys.readouterr().out
    better = json.loads(report.read_text())
    better["task"]["acc"] += 0.06  # a baseline 0.06 above: past the margin
    (tmp_path / "better.json").write_text(json.dumps(better))
    assert run_eval("tiny", str(tmp_path / "better.json"), **args) == 1
    assert "task_acc fell" in capsys.readouterr().out
    assert run_eval("tiny", str(report), **(args | {"max_bytes": 2000})) == 2, \
        "reports made on other documents (another cap) do not compare"
    assert "different evaluation sets" in capsys.readouterr().err
