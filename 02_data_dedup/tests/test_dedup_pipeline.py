"""Exercises 2.7 (leak-free splits) and 2.8 (the pipeline), and the given corpus builder."""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import course

dd = course.load("dedup")


def _write_jsonl(path: Path, lines: list) -> Path:
    """Each item: a dict (written as JSON), or bytes/str written verbatim as one line."""
    with open(path, "wb") as f:
        for item in lines:
            if isinstance(item, dict):
                item = json.dumps(item, ensure_ascii=False)
            f.write((item.encode("utf-8") if isinstance(item, str) else item) + b"\n")
    return path


def _read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _outputs(out_dir: Path) -> dict[str, list[dict]]:
    return {name: _read_jsonl(out_dir / f"{name}.jsonl") for name in dd.SPLITS}


# ------------------------------------------------------------------------------ 2.7


@pytest.mark.exercise("2.7")
@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c/x", "c/y", "d/e/f", "d/e/g", "h"]),
                          st.sampled_from(["1.py", "2.py", "3.py"])), min_size=1, max_size=40),
       st.data())
def test_no_group_and_no_cluster_straddles_splits(parts, data):
    sources = [f"{d}/{f}" for d, f in parts]
    n = len(sources)
    family = data.draw(st.lists(st.integers(0, 20), min_size=n, max_size=n))  # near-dup families
    labels = np.array([family.index(f) for f in family])  # as `cluster` labels: smallest member
    split = dd.assign_splits(sources, labels, (0.5, 0.25, 0.25), group_depth=2)
    assert split.dtype == np.int8 and split.shape == (n,)
    assert set(split.tolist()) <= {0, 1, 2}
    for key in [dd.source_group(s, 2) for s in sources] + labels.tolist():
        members = [i for i in range(n) if dd.source_group(sources[i], 2) == key or labels[i] == key]
        assert len({int(split[i]) for i in members}) <= 1


@pytest.mark.exercise("2.7")
def test_splits_follow_fractions_and_are_stable():
    sources = [f"pkg{i}/mod.py" for i in range(4000)]
    split = dd.assign_splits(sources, None, (0.8, 0.1, 0.1))
    shares = np.bincount(split, minlength=3) / len(sources)
    np.testing.assert_allclose(shares, [0.8, 0.1, 0.1], atol=0.03,  # 4000 hashed units
                               err_msg="the shares of train, val, test over 4,000 one-document units must "
                                       "follow fractions (0.8, 0.1, 0.1): x lands in train if x < f0, in val "
                                       "if f0 <= x < f0 + f1, in test above")
    # a unit keeps its split when the rest of the corpus changes
    half = dd.assign_splits(sources[::2], None, (0.8, 0.1, 0.1))
    np.testing.assert_array_equal(half, split[::2])
    np.testing.assert_array_equal(dd.assign_splits(sources, None, (0.8, 0.1, 0.1)), split)
    # the salt reshuffles
    assert not np.array_equal(dd.assign_splits(sources, None, (0.8, 0.1, 0.1), salt="x"), split)
    assert set(dd.assign_splits(sources, None, (0.0, 0.0, 1.0)).tolist()) == {2}


@pytest.mark.exercise("2.7")
def test_cluster_links_groups_into_one_unit():
    sources = ["a/1.py", "a/2.py", "b/1.py", "c/1.py"]
    labels = np.array([0, 1, 0, 3])  # a/1.py and b/1.py are near-duplicates
    for salt in map(str, range(20)):
        split = dd.assign_splits(sources, labels, (0.4, 0.3, 0.3), group_depth=1, salt=salt)
        assert split[0] == split[1] == split[2]


@pytest.mark.exercise("2.7")
def test_a_unit_is_named_by_its_smallest_group():
    """A cluster joining groups `a/x`, `q/r` and `z/y` is one unit named `a/x`: it lands where
    `a/x` alone lands, for every salt and whichever document comes first (the unit's name is
    not its first document's group, nor its union-find root's)."""
    members = ["z/y/1.py", "a/x/2.py", "q/r/3.py"]
    for order in itertools.permutations(range(3)):
        sources = [members[k] for k in order] + ["m/n/4.py"]
        labels = np.array([0, 0, 0, 3])  # the first three are one near-duplicate cluster
        for salt in map(str, range(12)):
            split = dd.assign_splits(sources, labels, (0.4, 0.3, 0.3), salt=salt)
            alone = dd.assign_splits(["a/x/9.py"], None, (0.4, 0.3, 0.3), salt=salt)
            assert split[0] == split[1] == split[2] == alone[0], (
                f"salt {salt!r}, documents {sources[:3]}: a unit's split is fixed by its smallest group "
                f"name ('a/x'), got {split[:3].tolist()} where 'a/x' alone goes to {int(alone[0])}")


@pytest.mark.exercise("2.7")
def test_a_unit_exactly_on_an_edge_goes_to_the_later_split():
    """x = _unit_interval(salt + name) lands in train only if x < f0, in val only if
    x < f0 + f1: a unit whose x equals an edge goes to the split after it."""
    name = "edge/unit"
    x = int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "big") / 2**64
    cases = [((x, (1 - x) / 2, 1 - x - (1 - x) / 2), 1, "x == f0"),
             ((x / 2, x / 2, 1 - x), 2, "x == f0 + f1")]
    for fractions, want, where in cases:
        got = int(dd.assign_splits([f"{name}/mod.py"], None, fractions, group_depth=2)[0])
        assert got == want, (
            f"{where}: a unit lands in split 0 only if x < f0 and in split 1 only if x < f0 + f1, so x on "
            f"an edge belongs to the split after it: expected {want}, got {got}")


def _reference_split(key: str, fractions) -> int:
    """Where sha256(key)'s first 8 bytes / 2**64 falls among the cumulative fractions."""
    x = int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big") / 2**64
    return int(np.searchsorted(np.cumsum(fractions)[:-1], x, side="right"))


@pytest.mark.exercise("2.7")
def test_a_units_split_hashes_the_salt_then_the_name():
    """The contract fixes the split of a unit: `_unit_interval(salt + name)`, the salt first.
    A salt appended (`name + salt`) still reshuffles and still follows the fractions, so only
    the exact hash tells it apart: a release's splits must be reproducible from the rule."""
    fractions = (0.4, 0.3, 0.3)
    names = [f"pkg{i}/sub" for i in range(40)]
    sources = [f"{name}/mod.py" for name in names]
    wrong = []
    for salt in ("", "7", "seed-42"):
        split = dd.assign_splits(sources, None, fractions, group_depth=2, salt=salt)
        for name, got in zip(names, split.tolist()):
            want = _reference_split(salt + name, fractions)
            if got != want:
                wrong.append(f"salt {salt!r}, unit {name!r}: split {got}, expected {want}")
    assert not wrong, (
        f"{len(wrong)} of {3 * len(names)} units are in the wrong split: a unit's split is where "
        f"x = _unit_interval(salt + name) falls, the salt PREPENDED to the unit's name (train if x < f0, "
        f"val if x < f0 + f1, else test); e.g. {wrong[0]}")


@pytest.mark.given
def test_source_group_and_split_arguments():
    assert dd.source_group("test/test_asyncio/test_tasks.py") == "test/test_asyncio"
    assert dd.source_group("test/test_os.py") == "test/test_os.py"
    assert dd.source_group("a/b/c.py", 0) == "a/b/c.py"
    assert dd.source_group("a/b/c.py", 1) == "a"
    with pytest.raises(ValueError, match="depth"):
        dd.source_group("a", -1)
    with pytest.raises(ValueError, match="fractions"):
        dd.assign_splits(["a"], None, (0.5, 0.5, 0.5))
    with pytest.raises(ValueError, match="labels must have shape"):
        dd.assign_splits(["a", "b"], np.array([0]))
    with pytest.raises(TypeError, match="sequence"):
        dd.assign_splits("abc")


# ------------------------------------------------------------------------------ 2.8

GOOD = "def handler(request):\n    return render(request, 'page.html', {'title': 'Home'})\n" * 3


def _doc(i: int, text: str | None = None, source: str | None = None) -> dict:
    text = text if text is not None else f"# module {i}\n" + " ".join(f"word{i}_{k}" for k in range(60))
    return {"id": f"d{i}", "text": text, "source": source or f"pkg{i}/mod.py"}


@pytest.mark.exercise("2.8")
def test_read_jsonl_reports_each_bad_line(tmp_path):
    path = _write_jsonl(tmp_path / "in.jsonl", [
        _doc(1),
        "",                                              # 2 blank
        '{"id": "x", "text": "unclosed',                 # 3 broken JSON
        '["a", "list"]',                                 # 4 not an object
        '{"id": "x", "text": "no source"}',              # 5 missing field
        '{"id": 7, "text": "t", "source": "s"}',         # 6 wrong type
        b'{"id": "x", "text": "\xff\xfe", "source": "s"}',  # 7 not UTF-8
        '{"id": "x", "text": "\\ud800", "source": "s"}',  # 8 lone surrogate
        json.dumps(_doc(9)) + "\r",                      # 9 CRLF: fine
    ])
    rows = list(dd.read_jsonl(path))
    assert [r[0] for r in rows] == list(range(1, 10))
    good = [n for n, rec, err in rows if err is None]
    assert good == [1, 9]
    assert rows[8][1] == _doc(9)
    errors = {n: err for n, rec, err in rows if err is not None}
    assert "blank" in errors[2]
    assert "JSON" in errors[3]
    assert "object" in errors[4]
    assert "source" in errors[5]
    assert "'id'" in errors[6]
    assert "UTF-8" in errors[7]
    assert "surrogate" in errors[8]
    assert all(rec is None for n, rec, err in rows if err is not None)


@pytest.fixture()
def messy_corpus(tmp_path, planted) -> Path:
    """Planted near-duplicates, exact copies (some only after normalisation), junk, bad lines."""
    lines: list = []
    for i, text in enumerate(planted.texts):
        lines.append({"id": planted.ids[i], "text": text, "source": f"base{planted.base_of[i]}/copy{i}.py"})
    lines.insert(3, {"id": "exact1", "text": planted.texts[0], "source": "other/a.py"})
    lines.insert(7, {"id": "exact2", "text": planted.texts[5].replace("\n", "\r\n") + "   \n\n",
                     "source": "other/b.py"})
    lines.insert(9, "{broken json")
    lines.insert(12, {"id": "short", "text": "x = 1", "source": "other/c.py"})
    lines.insert(13, {"id": 5, "text": "wrong type", "source": "s"})
    lines.insert(20, {"id": "table", "text": "0, 1, 2, 3,\n" * 40, "source": "other/d.py"})
    lines.insert(21, b'\xc3\x28 not utf-8')
    lines.append("")
    return _write_jsonl(tmp_path / "corpus.jsonl", lines)


@pytest.mark.exercise("2.8")
def test_pipeline_accounts_for_every_line(messy_corpus, tmp_path, planted):
    out = tmp_path / "out"
    report = dd.run_pipeline(messy_corpus, out, progress=False)
    n_lines = len(messy_corpus.read_bytes().splitlines())
    assert report["input_lines"] == n_lines
    assert report["malformed"] == 4
    assert [m["line"] for m in report["malformed_lines"]] == [10, 14, 22, n_lines]
    assert report["filtered"]["too_short"] == 1 and report["filtered"]["few_letters"] == 1
    assert report["exact_duplicates"] == 2
    kept = sum(report["kept"].values())
    assert report["input_lines"] == (report["malformed"] + sum(report["filtered"].values())
                                     + report["exact_duplicates"] + report["near_duplicates"] + kept)
    # Every valid line is in exactly one output or in removed.jsonl, once.
    outputs = _outputs(out)
    removed = _read_jsonl(out / "removed.jsonl")
    out_ids = [r["id"] for split in outputs.values() for r in split]
    assert len(out_ids) == kept and len(removed) == n_lines - kept - report["malformed"]
    assert sorted(out_ids + [r["id"] for r in removed]) == sorted(
        json.loads(line)["id"] for line in messy_corpus.read_bytes().splitlines()
        if _is_valid(line))
    by_reason = {r["id"]: r for r in removed}
    assert by_reason["exact1"]["duplicate_of"] == planted.ids[0]
    assert by_reason["exact2"]["reason"] == "exact_duplicate"
    # Near duplicates: the planted copies at J > 0.9 of their base are removed in favour of it
    # (the base comes first in the input); the copies at 0.7 and 0.45 are kept.
    base_id = {b: planted.ids[planted.base_of.index(b)] for b in set(planted.base_of)}
    close = [i for i, level in enumerate(planted.level_of) if 0.9 < level < 1]
    removed_close = [i for i in close if by_reason.get(planted.ids[i], {}).get("duplicate_of")
                     == base_id[planted.base_of[i]]]
    assert len(removed_close) >= 0.95 * len(close)
    far = [planted.ids[i] for i, level in enumerate(planted.level_of) if level < 0.8]
    assert not set(far) & set(by_reason)
    # Written records are normalised and keep their fields.
    for split in outputs.values():
        for rec in split:
            assert set(rec) == {"id", "text", "source"}
            assert rec["text"] == dd.normalize_text(rec["text"])
    saved = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert saved["kept"] == report["kept"] and saved["input_lines"] == n_lines


def _is_valid(line: bytes) -> bool:
    try:
        rec = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(rec, dict) and all(isinstance(rec.get(k), str) for k in ("id", "text", "source"))


@pytest.mark.exercise("2.8")
def test_near_duplicates_recall_and_precision(messy_corpus, tmp_path, planted):
    """Removed as near-duplicates: (almost) every copy that has a kept twin at J >= 0.85,
    and nothing else."""
    report = dd.run_pipeline(messy_corpus, tmp_path / "out", progress=False)
    removed = {r["id"]: r for r in _read_jsonl(tmp_path / "out" / "removed.jsonl")
               if r["reason"] == "near_duplicate"}
    index = {doc_id: i for i, doc_id in enumerate(planted.ids)}
    should = {planted.ids[max(p)] for p in planted.truth}  # the later document of each true pair
    assert len(should & set(removed)) >= 0.95 * len(should)
    for doc_id, row in removed.items():  # precision: a removal has a true twin in its family
        i, j = index[doc_id], index[row["duplicate_of"]]
        assert j < i and planted.base_of[i] == planted.base_of[j]
        assert any(i in pair for pair in planted.truth)
    assert report["near_duplicates"] == len(removed)


@pytest.mark.exercise("2.8")
def test_pipeline_on_its_own_output_removes_nothing(messy_corpus, tmp_path):
    first = dd.run_pipeline(messy_corpus, tmp_path / "one", progress=False)
    again_in = tmp_path / "again.jsonl"
    with open(again_in, "w", encoding="utf-8") as f:
        for name in dd.SPLITS:
            f.write((tmp_path / "one" / f"{name}.jsonl").read_text(encoding="utf-8"))
    second = dd.run_pipeline(again_in, tmp_path / "two", progress=False)
    assert second["malformed"] == 0 and sum(second["filtered"].values()) == 0
    assert second["exact_duplicates"] == 0 and second["near_duplicates"] == 0
    assert sum(second["kept"].values()) == sum(first["kept"].values())
    ids_one = sorted(r["id"] for split in _outputs(tmp_path / "one").values() for r in split)
    ids_two = sorted(r["id"] for split in _outputs(tmp_path / "two").values() for r in split)
    assert ids_one == ids_two


@pytest.mark.exercise("2.8")
def test_pipeline_splits_do_not_leak(tmp_path):
    """Real text: the encodings package (near-identical codec tables) and the json package."""
    corpus = tmp_path / "corpus.jsonl"
    dd.build_corpus(corpus, packages=["encodings", "json"])
    config = dd.PipelineConfig(fractions=(0.5, 0.25, 0.25), group_depth=0)
    report = dd.run_pipeline(corpus, tmp_path / "out", config, progress=False)
    assert report["near_duplicates"] >= 5  # mac_roman / mac_iceland, iso8859_1 / iso8859_15, ...
    outputs = _outputs(tmp_path / "out")
    split_of = {r["id"]: s for s, name in enumerate(dd.SPLITS) for r in outputs[name]}
    assert all(outputs.values())
    # no source in two splits, and no near-duplicate pair across splits (brute force)
    sources = [(r["source"], s) for s, name in enumerate(dd.SPLITS) for r in outputs[name]]
    assert len({src for src, _ in sources}) == len(sources)
    texts = {r["id"]: dd.shingle_hashes(r["text"]) for split in outputs.values() for r in split}
    for a, b in itertools.combinations(texts, 2):
        if split_of[a] != split_of[b]:
            assert dd.jaccard(texts[a], texts[b]) < 0.85
    # every reported cluster was verified: its members are in removed.jsonl pointing at the keeper
    removed = {r["id"]: r for r in _read_jsonl(tmp_path / "out" / "removed.jsonl")}
    for members in report["clusters"]:
        assert members[0] in split_of
        assert all(removed[m]["duplicate_of"] == members[0] for m in members[1:])


@pytest.mark.exercise("2.8")
def test_cli_builds_corpus_and_runs(tmp_path, capsys):
    corpus = tmp_path / "c.jsonl"
    assert dd.main(["--build-corpus", str(corpus), "--packages", "json", "--limit", "4"]) == 0
    assert len(corpus.read_text(encoding="utf-8").splitlines()) == 4
    assert dd.main([str(corpus), str(tmp_path / "o"), "--threshold", "0.9", "--num-perm", "64",
                    "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "input lines" in printed and "accounted for" in printed and "ok" in printed
    report = json.loads((tmp_path / "o" / "report.json").read_text(encoding="utf-8"))
    assert report["params"]["threshold"] == 0.9 and report["params"]["num_perm"] == 64
    assert dd.main([str(tmp_path / "missing.jsonl"), str(tmp_path / "o")]) == 2
    assert "no such input file" in capsys.readouterr().err


@pytest.mark.exercise("2.8")
def test_filters_come_before_exact_dedup_and_outputs_are_normalised(tmp_path):
    """A copy of a filtered record is filtered too (an exact duplicate is one of an earlier
    record *not filtered*); a kept record is written with its text normalised."""
    messy = "def area(w, h):   \r\n    return w * h  \r\n" * 6 + "\r\n\r\n"
    path = _write_jsonl(tmp_path / "in.jsonl", [
        {"id": "s1", "text": "x = 1", "source": "a/s1.py"},
        {"id": "s2", "text": "x = 1", "source": "a/s2.py"},
        {"id": "m", "text": messy, "source": "b/m.py"},
        _doc(4)])
    report = dd.run_pipeline(path, tmp_path / "out", progress=False)
    assert report["filtered"]["too_short"] == 2 and report["exact_duplicates"] == 0, (
        f"both copies of a too-short text must be filtered, not one filtered and one an exact duplicate: "
        f"filtered {report['filtered']}, exact duplicates {report['exact_duplicates']}")
    written = {r["id"]: r for split in _outputs(tmp_path / "out").values() for r in split}
    assert written["m"]["text"] == dd.normalize_text(messy), "kept records must be written with normalised text"


@pytest.mark.exercise("2.8")
def test_pipeline_does_not_depend_on_the_batch_size(messy_corpus, tmp_path):
    """`config.batch_size` (documents per MinHash call) bounds the memory, nothing else."""
    whole = dd.run_pipeline(messy_corpus, tmp_path / "a", progress=False)
    small = dd.run_pipeline(messy_corpus, tmp_path / "b", dd.PipelineConfig(batch_size=7), progress=False)
    for key in ("exact_duplicates", "near_duplicates", "clusters", "kept", "candidate_pairs", "verified_pairs"):
        assert small[key] == whole[key], f"{key} with batch_size=7: {small[key]} != {whole[key]} (batch_size=512)"
    for name in (*dd.SPLITS, "removed"):
        assert ((tmp_path / "a" / f"{name}.jsonl").read_bytes() == (tmp_path / "b" / f"{name}.jsonl").read_bytes()), name


@pytest.mark.exercise("2.8")
def test_build_train_split_is_cached(tmp_path):
    path = dd.build_train_split(tmp_path, limit=30)
    assert path == tmp_path / "train.jsonl" and path.is_file()
    records = _read_jsonl(path)
    assert records and all(set(r) >= {"id", "text", "source"} for r in records)
    stamp = path.stat().st_mtime_ns
    assert dd.build_train_split(tmp_path, limit=30) == path
    assert path.stat().st_mtime_ns == stamp  # cached: not rebuilt


@pytest.mark.given
def test_pipeline_arguments_rejected(tmp_path):
    with pytest.raises(ValueError, match="threshold"):
        dd.PipelineConfig(threshold=1.0)
    with pytest.raises(ValueError, match="verify"):
        dd.PipelineConfig(verify="maybe")
    with pytest.raises(ValueError, match="fractions"):
        dd.PipelineConfig(fractions=(1.0, 0.5, 0.0))
    with pytest.raises(ValueError, match="weights"):
        dd.PipelineConfig(lsh_weights=(0.0, 0.0))
    with pytest.raises(TypeError, match="PipelineConfig"):
        dd.run_pipeline(tmp_path / "x", tmp_path / "o", {"threshold": 0.8})
    with pytest.raises(FileNotFoundError, match="no such input file"):
        dd.run_pipeline(tmp_path / "x", tmp_path / "o")
    with pytest.raises(FileNotFoundError, match="no such input file"):
        list(dd.read_jsonl(tmp_path / "x"))


# ------------------------------------------------------------------------- given: corpus


@pytest.mark.given
def test_corpus_is_deterministic_and_well_formed():
    stats: dict = {}
    first = list(dd.iter_corpus(limit=25, packages=["json", "pydoc_data"], stats=stats))
    again = list(dd.iter_corpus(limit=25, packages=["json", "pydoc_data"]))
    assert first == again and len(first) == 25 and stats["documents"] == 25
    assert [r["source"] for r in first] == sorted(r["source"] for r in first)
    for r in first:
        assert set(r) == {"id", "text", "source"} and all(isinstance(v, str) for v in r.values())
        assert dd.top_level(r["source"]) in {"json", "pydoc_data"}
    assert any(r["id"].startswith("topic:") for r in first)
    assert "site-packages" not in " ".join(r["source"] for r in dd.iter_corpus(packages=["json"]))


@pytest.mark.given
def test_corpus_counts_files_that_are_not_utf8():
    stats: dict = {}
    docs = sum(1 for _ in dd.iter_corpus(packages=["test"], stats=stats))
    root = dd.stdlib_dir() / "test"
    bad = []
    for p in root.rglob("*.py"):
        try:
            p.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            bad.append(p)
    assert stats["skipped_not_utf8"] == len(bad) and len(stats["skipped"]) == len(bad)
    assert docs + len(bad) == sum(1 for _ in root.rglob("*.py"))
    with pytest.raises(ValueError, match="limit"):
        list(dd.iter_corpus(limit=-1))
    with pytest.raises(TypeError, match="iterable of names"):
        list(dd.iter_corpus(packages="json"))
