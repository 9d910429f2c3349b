"""Exercises 3.12–3.14: the evaluation before optimisation — per-document bits per byte with a
confidence interval, line completion (edit similarity, exact match, a held-out set), the gate."""
from __future__ import annotations

import functools
import json
import math
import random
import statistics

import pytest
import torch
import torch.nn.functional as F

import course
from solutions.gpt import random_gpt, save_checkpoint
from solutions.tokenizer import EOT

train = course.load("train")

LN2 = math.log(2.0)


def _model(context=16, seed=3):
    return random_gpt(context, seed=seed, std=0.3, n_layer=1, n_head=2, n_embd=16)


def _reference_nats(model, ids, block_size):
    """The summed cross-entropy of ids[1:] given what precedes each, in windows of block_size
    (the last one shorter): a slow reference, one window at a time."""
    nats, start = 0.0, 0
    while start < len(ids) - 1:
        w = ids[start: start + block_size + 1]
        x, y = torch.tensor([w[:-1]]), torch.tensor(w[1:])
        with torch.no_grad():
            nats += float(F.cross_entropy(model(x)[0], y, reduction="sum"))
        start += block_size
    return nats


# ---------------------------------------------------------------------- 3.12
@pytest.mark.exercise("3.12")
def test_score_document_whole_text_predicts_the_end_mark():
    model = _model()
    text = "def f(x):\n    return x + 1  # é\n"  # 34 bytes: é is two
    data = text.encode()
    s = train.score_document(model, text, block_size=16, max_bytes=100)
    ids = [EOT, *data, EOT]
    assert s.tokens == len(data) + 1  # every byte and the end mark are targets
    assert s.bytes == len(data)  # the end mark costs bits but is not a byte
    assert s.nats == pytest.approx(_reference_nats(model, ids, 16), rel=1e-5)  # two windows of 16 + one of 3
    assert s.bits == pytest.approx(s.nats / LN2, rel=1e-12)
    assert s.bpb == pytest.approx(s.nats / LN2 / len(data), rel=1e-12)


@pytest.mark.exercise("3.12")
def test_score_document_cut_text_has_no_end_mark_and_keeps_the_model_as_it_was():
    model = _model().train()
    text = "import os\n" * 20
    before = [p.clone() for p in model.parameters()]
    s = train.score_document(model, text, block_size=16, max_bytes=40)
    assert (s.tokens, s.bytes) == (40, 40)  # 40 bytes kept, no end mark: the text goes on
    assert s.nats == pytest.approx(_reference_nats(model.eval(), [EOT, *text.encode()[:40]], 16), rel=1e-5)
    model.train()
    again = train.score_document(model, text, block_size=16, max_bytes=40)
    assert again == s and model.training  # deterministic (eval mode inside), mode restored
    assert all(torch.equal(p, q) for p, q in zip(before, model.parameters()))
    exact = train.score_document(model, "abc", block_size=16, max_bytes=3)  # fits exactly: the end mark is kept
    assert (exact.tokens, exact.bytes) == (4, 3)


@pytest.mark.exercise("3.12")
def test_mean_interval_uses_the_sample_spread_over_values():
    values = [2.0, 2.5, 1.5, 3.0, 2.2]
    iv = train.mean_interval(values)
    half = 1.96 * statistics.stdev(values) / math.sqrt(5)  # sample sd (n - 1)
    assert iv.n == 5
    assert iv.mean == pytest.approx(statistics.mean(values), rel=1e-12)
    assert (iv.low, iv.high) == (pytest.approx(iv.mean - half, rel=1e-12), pytest.approx(iv.mean + half, rel=1e-12))
    assert train.mean_interval(values, z=1.0).high - iv.mean == pytest.approx(half / 1.96, rel=1e-12)
    for bad in ([1.0], [1.0, float("nan")]):
        with pytest.raises(ValueError):
            train.mean_interval(bad)


@pytest.mark.exercise("3.12")
def test_source_row_counts_every_document_once():
    """A long and a short document: the row's bpb and interval are over the two documents'
    values, not over their bytes (a long file would outvote the short one, and the spread of
    bytes would give a far too narrow interval)."""
    scores = [train.DocScore(nats=1000 * LN2, bits=1000.0, tokens=501, bytes=500),  # 2 bits/byte
              train.DocScore(nats=40 * LN2, bits=40.0, tokens=11, bytes=10),  # 4 bits/byte
              train.DocScore(nats=30 * LN2, bits=30.0, tokens=10, bytes=10)]  # 3 bits/byte
    row = train.source_row(scores)
    per_doc = [2.0, 4.0, 3.0]
    half = 1.96 * statistics.stdev(per_doc) / math.sqrt(3)
    assert (row["docs"], row["bytes"], row["tokens"]) == (3, 520, 522)
    assert row["bpb"] == pytest.approx(3.0, rel=1e-12)
    assert row["bpb_high"] - row["bpb_low"] == pytest.approx(2 * half, rel=1e-9)
    loss = [s.nats / s.tokens for s in scores]
    assert row["ppl"] == pytest.approx(math.exp(statistics.mean(loss)), rel=1e-9)
    assert row["ppl_low"] < row["ppl"] < row["ppl_high"]
    one = train.source_row(scores[:1])
    assert one["bpb"] == pytest.approx(2.0) and one["bpb_low"] is None and one["ppl_high"] is None


# ---------------------------------------------------------------------- 3.13
@functools.lru_cache(maxsize=None)
def _lev(a: str, b: str) -> int:
    if not a or not b:
        return len(a) + len(b)
    return min(_lev(a[1:], b) + 1, _lev(a, b[1:]) + 1, _lev(a[1:], b[1:]) + (a[0] != b[0]))


@pytest.mark.exercise("3.13")
def test_edit_similarity_known_values():
    assert train.edit_similarity("kitten", "sitting") == pytest.approx(1 - 3 / 7)
    assert train.edit_similarity("", "") == 1.0
    assert train.edit_similarity("", "abc") == 0.0 and train.edit_similarity("abc", "") == 0.0
    assert train.edit_similarity("return x", "return x") == 1.0
    assert train.edit_similarity("ab", "ba") == 0.0  # two substitutions (no transpositions)
    assert train.edit_similarity("self.x", "self.y = x") == pytest.approx(1 - 4 / 10)  # insert "y = "
    with pytest.raises(TypeError):
        train.edit_similarity("a", None)


@pytest.mark.exercise("3.13")
def test_edit_similarity_matches_a_recursive_levenshtein():
    rng = random.Random(0)
    for _ in range(150):
        a = "".join(rng.choice("ab c") for _ in range(rng.randint(0, 7)))
        b = "".join(rng.choice("ab c") for _ in range(rng.randint(0, 7)))
        want = 1.0 if not (a or b) else 1 - _lev(a, b) / max(len(a), len(b))
        assert train.edit_similarity(a, b) == pytest.approx(want, abs=1e-12), (a, b)
        assert train.edit_similarity(b, a) == pytest.approx(want, abs=1e-12)


@pytest.mark.exercise("3.13")
def test_exact_match_ignores_whitespace_only():
    assert train.exact_match("  return  x\t", "return x")
    assert not train.exact_match("return x", "return x)")
    assert not train.exact_match("f(a,b)", "f(a, b)")  # a space inside a token matters
    assert train.exact_match("", "   ")


# ---------------------------------------------------------------------- CodeXGLUE's edit sim (given)
def _fuzz_ratio(s1, s2):
    """The oracle: fuzzywuzzy 0.18's `fuzz.ratio` as CodeXGLUE's setup runs it (fuzzywuzzy alone,
    so difflib's SequenceMatcher): None -> 0, equal -> 100, one empty -> 0, else int(round(100 * ratio))."""
    import difflib

    if s1 is None or s2 is None:
        return 0
    if s1 == s2:
        return 100
    if not s1 or not s2:
        return 0
    return int(round(100 * difflib.SequenceMatcher(None, s1, s2).ratio()))


@pytest.mark.given
def test_codexglue_edit_sim_is_fuzz_ratio_with_difflib():
    sim = train.line_completion.codexglue_edit_sim
    hand = {  # (prediction, target): 2 * M / (len + len), M the characters of difflib's matching blocks
        ("kitten", "sitting"): 62,  # "itt" then "n": M = 4, 800 / 13 = 61.5
        ("abcdefgh", "hijklmno"): 12,  # M = 1: exactly 12.5, rounded half to even (not 13, not truncated)
        ("abcdefgh", "xbcdyzwh"): 50,  # "bcd" and "h": M = 4 of 16
        ("abcdefgh", "abcxyzwv"): 38,  # M = 3: exactly 37.5, half to even gives 38 (int() would give 37)
        ("return x", "return x"): 100,
    }
    for (p, t), want in hand.items():
        got = sim(p, t)
        assert isinstance(got, int), f"fuzz.ratio returns an int, got {got!r} for {(p, t)}"
        assert got == want, f"fuzz.ratio{(p, t)} is {want} (difflib's 2M/T, round half to even), got {got}"
    rng = random.Random(5)
    for _ in range(300):
        p = "".join(rng.choice("ab c(") for _ in range(rng.randint(0, 9)))
        t = "".join(rng.choice("ab c(") for _ in range(rng.randint(0, 9)))
        assert sim(p, t) == _fuzz_ratio(p, t), f"codexglue_edit_sim{(p, t)} != fuzz.ratio's {_fuzz_ratio(p, t)}"


@pytest.mark.given
def test_codexglue_edit_sim_edges_and_argument_order():
    sim = train.line_completion.codexglue_edit_sim
    assert sim("", "") == 100, "fuzz.ratio checks equality before emptiness: two empty strings score 100"
    assert sim("", "pass") == 0 and sim("pass", "") == 0, "one empty string scores 0"
    # difflib takes the first longest block in the FIRST string: the order is the evaluator's, (pred, gt)
    assert (sim("xy", "yxzy"), sim("yxzy", "xy")) == (67, 33), "fuzz.ratio is not symmetric; keep (prediction, target)"
    with pytest.raises(TypeError):
        sim("a", None)
    with pytest.raises(TypeError):
        sim(b"a", "a")


@pytest.mark.exercise("3.13")
def test_course_edit_similarity_is_not_codexglue_edit_sim():
    """The two metrics, on pairs where they must differ: unit-cost Levenshtein over the longer
    length against difflib's matched characters over both lengths."""
    sim = train.line_completion.codexglue_edit_sim
    for p, t, course_value, codexglue in (("xy", "yx", 0.0, 50),  # two substitutions; one matched character
                                          ("kitten", "sitting", 1 - 3 / 7, 62),
                                          ("f(a)", "f(a, b)", 1 - 3 / 7, 73)):  # 3 inserts; M = 4 of 11
        assert train.edit_similarity(p, t) == pytest.approx(course_value), \
            f"edit_similarity{(p, t)} is 1 - lev/max = {course_value:.4f}"
        assert sim(p, t) == codexglue, f"CodeXGLUE's fuzz.ratio{(p, t)} is {codexglue}"
        assert abs(100 * train.edit_similarity(p, t) - sim(p, t)) > 4, "the two metrics differ on this pair"


def _ex(split, doc, line_no, prefix, target):
    return train.CompletionExample(split, doc, line_no, prefix, target)


def _candidates():
    out = [_ex("val" if i % 2 else "test", f"d{i % 5}.py", i, f"x = {i}\n" * 12 + "    ", f"y{i} = f({i})")
           for i in range(30)]
    out.append(_ex("val", "dup.py", 1, "z\n" * 40 + "    ", "y3  =  f(3)"))  # the same line as #3, spaced apart
    out.append(_ex("test", "leak.py", 7, "a\n" * 40 + "LEAKED_", "line = copied()"))  # occurs in train
    return out


TRAIN_TEXT = "from train\n" + "a\n" * 60 + "LEAKED_line = copied()\n"


@pytest.mark.exercise("3.13")
def test_select_examples_is_fixed_deduplicated_and_held_out():
    cands = _candidates()
    got = train.select_examples(cands, n=100, seed=1, train_text=TRAIN_TEXT)
    keys = [e.key for e in got]
    assert len(got) == 30  # 32 candidates: the duplicate line and the leaked one are left out
    assert ("test", "leak.py", 7) not in keys
    assert not any(e.leak_text() in TRAIN_TEXT for e in got)
    assert len({tuple(e.line.split()) for e in got}) == len(got)
    order = sorted(cands, key=lambda e: e.key)
    random.Random(1).shuffle(order)
    first_of_3 = next(e for e in order if e.line.split() == ["y3", "=", "f(3)"])
    assert first_of_3.key in keys  # the first of two copies in the walk is the one kept
    assert keys == [e.key for e in order if e.key in set(keys)]  # in walk order
    shuffled = cands[::-1]
    assert [e.key for e in train.select_examples(shuffled, n=100, seed=1, train_text=TRAIN_TEXT)] == keys
    five = train.select_examples(cands, n=5, seed=1, train_text=TRAIN_TEXT)
    assert [e.key for e in five] == keys[:5]
    assert [e.key for e in train.select_examples(cands, n=5, seed=2, train_text=TRAIN_TEXT)] != keys[:5]
    with pytest.raises(ValueError):
        train.select_examples(cands, n=0, seed=1, train_text=TRAIN_TEXT)


# ---------------------------------------------------------------------- the sets (given), on planted splits
def _write_corpus(folder):
    """train/val/test.jsonl: code files (lines of a few kinds) and pydoc topics, with a block
    of train copied into one val file."""
    folder.mkdir()

    def code(tag, n):
        return "".join(f"def {tag}_{i}(a, b):\n    total = a * {i} + b\n    return total - {i % 7}\n\n"
                       for i in range(n))

    copied = "".join(f"    copied_line_{i} = source_of_train({i})\n" for i in range(40))
    splits = {
        "train": [{"id": "py:t1.py", "source": "t1.py", "text": code("train", 30) + copied},
                  {"id": "topic:if", "source": "pydoc_data.topics:if", "text": "The if statement. " * 30}],
        "val": [{"id": "py:v1.py", "source": "v1.py", "text": code("val", 12) + copied},
                {"id": "topic:for", "source": "pydoc_data.topics:for", "text": "The for statement. " * 20}],
        "test": [{"id": "py:s1.py", "source": "s1.py", "text": code("test", 12)},
                 {"id": "topic:while", "source": "pydoc_data.topics:while", "text": "The while loop. " * 25}],
    }
    for name, docs in splits.items():
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    return splits


@pytest.mark.exercise("3.13")
def test_built_completion_set_never_holds_train_text(tmp_path):
    splits = _write_corpus(tmp_path / "corpus")
    sets = train.build_eval_sets(tmp_path / "corpus", n_examples=60, seed=0)
    train_text = "\0".join(d["text"] for d in splits["train"])
    assert 0 < len(sets.completions) <= 60
    assert all(e.split in ("val", "test") for e in sets.completions)
    assert not any(e.leak_text() in train_text for e in sets.completions)
    copied = [int(e.line.split("_")[2].split()[0]) for e in sets.completions if "copied_line" in e.line]
    assert all(k < 2 for k in copied)  # past its first lines, the copied block's context is train's
    assert [d.source for d in sets.documents] == ["code", "prose", "code", "prose"]
    again = train.build_eval_sets(tmp_path / "corpus", n_examples=60, seed=0)
    assert again.completions == sets.completions and again.fingerprint == sets.fingerprint


# ---------------------------------------------------------------------- 3.14
M = train.Margin


@pytest.mark.exercise("3.14")
def test_compare_fails_only_past_the_margin_the_wrong_way():
    margins = {"bpb": M(False, 0.25), "em": M(True, 2.0)}  # values exact in binary: the boundary is exact
    base = {"bpb": 2.0, "em": 10.0, "other": 1.0}
    assert train.compare(base, base, margins) == []
    assert train.compare({"bpb": 1.5, "em": 30.0}, base, margins) == []  # better both ways
    assert train.compare({"bpb": 2.25, "em": 8.0}, base, margins) == []  # exactly the margin passes
    worse = train.compare({"bpb": 2.375, "em": 10.0}, base, margins)
    assert len(worse) == 1 and "bpb" in worse[0]
    fell = train.compare({"bpb": 2.0, "em": 7.5, "other": -100.0}, base, margins)  # "other" is not judged
    assert len(fell) == 1 and "em" in fell[0]
    assert len(train.compare({"bpb": 2.5, "em": 0.0}, base, margins)) == 2
    with pytest.raises(KeyError):
        train.compare({"bpb": 2.0}, base, margins)


@pytest.mark.exercise("3.14")
def test_course_eval_gate_on_the_command_line(tmp_path, capsys):
    from course import cli

    _write_corpus(tmp_path / "corpus")
    ckpt = save_checkpoint(_model(context=32), tmp_path / "tiny.pt")
    report = tmp_path / "report.json"
    args = ["--impl", course.current_impl(), "eval", str(ckpt), "--data", str(tmp_path / "corpus"),
            "--examples", "6", "--threads", "1"]
    assert cli.main(args + ["--json", str(report)]) == 0
    out = capsys.readouterr().out
    assert "| code |" in out and "| prose |" in out and "exact match" in out
    assert "edit similarity (1 - Levenshtein/max)" in out and "CodeXGLUE edit sim (fuzz.ratio)" in out, \
        "the table names both edit similarities by what they compute"
    saved = json.loads(report.read_text())
    sim = train.line_completion.codexglue_edit_sim
    per_line = [sim(s["prediction"], s["target"]) for s in saved["samples"]]
    assert [s["codexglue_similarity"] for s in saved["samples"]] == per_line, \
        "each sample's codexglue_similarity is fuzz.ratio(prediction, target)"
    assert saved["completion"]["codexglue_edit_sim"] == pytest.approx(statistics.mean(per_line)), \
        "the report's CodeXGLUE edit sim is the mean of the per-line fuzz.ratio (0..100)"
    assert saved["metrics"]["codexglue_edit_sim"] == saved["completion"]["codexglue_edit_sim"]
    assert cli.main(args + ["--against", str(report)]) == 0  # against itself
    assert "gate: pass" in capsys.readouterr().out
    older = json.loads(report.read_text())  # CodeXGLUE's edit sim is reported, not gated:
    older["completion"]["codexglue_edit_sim"] += 50.0  # a baseline far above on it still passes,
    (tmp_path / "older.json").write_text(json.dumps(older))
    assert cli.main(args + ["--against", str(tmp_path / "older.json")]) == 0, "codexglue_edit_sim is not gated"
    del older["completion"]["codexglue_edit_sim"]  # and a report from before it existed is a baseline
    (tmp_path / "older.json").write_text(json.dumps(older))
    assert cli.main(args + ["--against", str(tmp_path / "older.json")]) == 0, "a report without it is a baseline"
    capsys.readouterr()
    lower = json.loads(report.read_text())
    lower["completion"]["edit_similarity"] += 2.5  # the course's edit similarity stays gated (margin 2)
    (tmp_path / "lower.json").write_text(json.dumps(lower))
    assert cli.main(args + ["--against", str(tmp_path / "lower.json")]) == 1
    assert "edit_similarity fell" in capsys.readouterr().out
    better = json.loads(report.read_text())
    better["rows"]["code"]["bpb"] -= 0.5  # a baseline the model falls 0.5 bits/byte short of
    (tmp_path / "better.json").write_text(json.dumps(better))
    assert cli.main(args + ["--against", str(tmp_path / "better.json")]) == 1
    assert "code.bpb rose" in capsys.readouterr().out
    assert cli.main(args[:3] + [str(tmp_path / "missing.pt")]) == 2
    assert "error:" in capsys.readouterr().err


@pytest.mark.exercise("3.13")
def test_completion_set_from_a_real_stage02_corpus_is_held_out(tmp_path):
    """Stage 02's pipeline on the first 60 standard-library files: the set comes from val and
    test code files only, and no example's context + line occurs in the train split."""
    from solutions.dedup import build_train_split

    train_path = build_train_split(tmp_path / "corpus", limit=60)
    sets = train.build_eval_sets(tmp_path / "corpus", n_examples=40, seed=0)
    held_out = {(d.split, d.doc_id) for d in sets.documents if d.source == "code"}
    train_text = "\0".join(d.text for d in train.read_split(train_path, "train"))
    assert len(sets.completions) == 40
    assert all((e.split, e.doc_id) in held_out for e in sets.completions)
    assert not any(e.leak_text() in train_text for e in sets.completions)
    assert len({tuple(e.line.split()) for e in sets.completions}) == 40
