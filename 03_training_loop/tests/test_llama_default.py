"""Given code: the course's BPE vocabulary (solutions/assets/course_bpe.json), bits per byte over
BPE targets, and the committed Llama default model (solutions/assets/llama_default.pt)."""
from __future__ import annotations

import importlib
import json
import math

import pytest
import torch

import course

_train = course.load("train")  # the package under test: given modules of it, and 3.9's evaluate
_bpe_data = importlib.import_module(f"{_train.__name__}.bpe_data")
_llama_default = importlib.import_module(f"{_train.__name__}.llama_default")
COURSE_BPE, EOT_TOKEN = _bpe_data.COURSE_BPE, _bpe_data.EOT_TOKEN
build_course_bpe, evaluate_bpe, load_course_bpe = (_bpe_data.build_course_bpe, _bpe_data.evaluate_bpe,
                                                   _bpe_data.load_course_bpe)
LN2, evaluate, random_llama = _train.LN2, _train.evaluate, _train.random_llama
LLAMA_DEFAULT, load_llama, probe, save_llama = (_llama_default.LLAMA_DEFAULT, _llama_default.load_llama,
                                                _llama_default.probe, _llama_default.save_llama)

# Given code, checked on given code alone, is `given`; the tests that run through an exercise
# (3.9's evaluate, the Llama of 3.15-3.18) are that exercise's, so that a stub shows them as
# its TODO and never as "did an edit break given code?".


@pytest.mark.given
def test_course_vocabulary_asset():
    tok = load_course_bpe()
    d = json.loads(COURSE_BPE.read_text(encoding="utf-8"))
    assert tok.vocab_size == d["vocab_size"] == 2048
    assert tok.special_ids == {EOT_TOKEN: 0}
    assert d["trained_on"]["file"] == "train.jsonl"  # the train split only
    text = "def f(x):\n    return x ** 2  # é, 漢字, 🙂\n"
    ids = tok.encode(text)
    assert tok.decode(ids) == text and len(ids) < len(text.encode("utf-8"))
    assert tok.encode(EOT_TOKEN) == [0]


@pytest.mark.given
def test_vocabulary_build_is_deterministic(tmp_path):
    f = tmp_path / "train.jsonl"
    docs = ["def foo(bar):\n    return bar + 1\n", "class Foo:\n    pass\n" * 3, "import os\nos.path.join(a, b)\n"]
    f.write_text("".join(json.dumps({"id": i, "text": t, "source": f"{i}.py"}) + "\n" for i, t in enumerate(docs)))
    a, b = build_course_bpe(f, 270), build_course_bpe(f, 270)
    assert a == b and a["vocab_size"] == 270 and a["tokens"][0] == EOT_TOKEN


@pytest.mark.given
def test_bytes_per_token_splits_code_from_prose_and_counts_every_file(tmp_path):
    tok = load_course_bpe()
    code = ["def f(x):\n    return x + 1\n", "import os\n"]
    prose = ["The quick brown fox jumps over the lazy dog. Émile wrote 漢字."]
    a, b = tmp_path / "val.jsonl", tmp_path / "test.jsonl"
    a.write_text(json.dumps({"id": "py:a.py", "text": code[0]}) + "\n\n"
                 + json.dumps({"id": "topic:t", "text": prose[0]}) + "\n")
    b.write_text(json.dumps({"id": "py:b.py", "text": code[1]}) + "\n")
    rows = _bpe_data.bytes_per_token([a, b], {"ours": tok})
    assert [(r["text"], r["documents"]) for r in rows] == [("code", 2), ("prose", 1)]
    for r, docs in zip(rows, (code, prose)):
        n_bytes = sum(len(d.encode("utf-8")) for d in docs)
        assert r["bytes"] == n_bytes  # bytes, not characters
        assert r["ours"] == n_bytes / sum(len(tok.encode(d)) for d in docs)  # summed before dividing


@pytest.mark.exercise("3.9")
def test_bpb_counts_the_bytes_each_target_spells():
    tok = load_course_bpe()
    text = "for i in range(10):\n    print(i)\n" * 20
    ids = tok.encode(text) + [0]
    stream = torch.tensor(ids, dtype=torch.int16)
    nbytes = torch.tensor([0 if i == 0 else len(tok.token_bytes[i]) for i in ids], dtype=torch.uint8)
    model = random_llama(vocab_size=tok.vocab_size, max_seq_len=32, std=0.02)
    ev = evaluate_bpe(model, stream, nbytes, block_size=16, batch_size=4)
    base = evaluate(model, stream, block_size=16, batch_size=4)
    n = (len(ids) - 1) // 16
    targets = ids[1 : n * 16 + 1]
    assert ev["bytes"] == len(tok.decode([t for t in targets if t != 0]).encode("utf-8"))
    assert ev["loss"] == base["loss"] and ev["tokens"] == base["tokens"] == n * 16
    assert math.isclose(ev["bpb"], base["loss"] * base["tokens"] / LN2 / ev["bytes"], rel_tol=1e-12)


@pytest.mark.given
def test_checkpoint_refuses_another_tokenizer(tmp_path):
    tok = load_course_bpe()
    model = random_llama(vocab_size=tok.vocab_size, max_seq_len=32)
    path = save_llama(model, tmp_path / "m.pt", tokenizer_path=COURSE_BPE, meta={})
    loaded, _, _ = load_llama(path, tokenizer_path=COURSE_BPE)
    for (k, v), (k2, v2) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert k == k2 and torch.equal(v.half().float(), v2)
    other = tmp_path / "other.json"
    d = json.loads(COURSE_BPE.read_text(encoding="utf-8"))
    d["command"] = "edited"
    other.write_text(json.dumps(d))
    with pytest.raises(ValueError, match="not the tokenizer"):
        load_llama(path, tokenizer_path=other)


@pytest.mark.exercise("3.18")
def test_llama_default_loads_and_reproduces_its_probe():
    model, tok, meta = load_llama()
    cfg = model.config
    assert (cfg.n_layers, cfg.dim, cfg.n_heads, cfg.n_kv_heads, cfg.vocab_size) == (
        meta["shape"]["n_layers"], meta["shape"]["dim"], meta["shape"]["n_heads"], meta["shape"]["n_kv_heads"],
        tok.vocab_size)
    assert LLAMA_DEFAULT.stat().st_size < 8e6
    rec = meta["probe"]
    again = probe(model, tok, rec["text"])
    assert again["tokens"] == rec["tokens"] and again["bytes"] == rec["bytes"]
    assert abs(again["bpb"] - rec["bpb"]) < 1e-4, (again["bpb"], rec["bpb"])
    assert rec["bpb"] < 4.0 and meta["val_bpb"] < 4.0  # far below uniform guessing over bytes (8.0)


@pytest.mark.exercise("3.18")
def test_bpe_line_completion_stops_at_the_line_end():
    bpe_completion = importlib.import_module(f"{_train.__name__}.bpe_completion")
    complete_lines_bpe, generate_bpe = bpe_completion.complete_lines_bpe, bpe_completion.generate_bpe

    tok = load_course_bpe()
    model = random_llama(vocab_size=tok.vocab_size, max_seq_len=64, std=0.02)
    outs = complete_lines_bpe(model, tok, ["def f(x):\n    retu", "import o"], block_size=64, max_bytes=12)
    assert len(outs) == 2 and all("\n" not in o and len(o.encode("utf-8")) <= 12 for o in outs)
    a = generate_bpe(model, tok, "def ", 5, block_size=64)
    assert a == generate_bpe(model, tok, "def ", 5, block_size=64) and a.startswith("def ")
