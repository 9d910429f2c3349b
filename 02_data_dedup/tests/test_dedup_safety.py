"""The pipeline never loses data (given code around 2.8) and its quality filters come as profiles."""
from __future__ import annotations

import hashlib
import importlib
import json
from pathlib import Path

import pytest

import course

dd = course.load("dedup")


def _write(path, records):
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    return path


def _docs(n):
    return [{"id": f"d{i}", "text": f"def f{i}(x):\n" + "".join(f"    x = x * {i} + {j}  # step {j}\n"
                                                                for j in range(8)) + "    return x\n",
             "source": f"p{i % 4}/m{i}.py"} for i in range(n)]


def _digests(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def _fake_previous_outputs(out):
    out.mkdir()
    for name in dd.OUTPUT_FILES:
        (out / name).write_text(f"previous {name}\n", encoding="utf-8")
    return _digests(out)


@pytest.mark.given
def test_input_inside_the_output_folder_is_refused_before_writing(tmp_path):
    out = tmp_path / "out"
    before = _fake_previous_outputs(out)
    _write(out / "train.jsonl", _docs(5))  # re-running on its own output
    before["train.jsonl"] = _digests(out)["train.jsonl"]
    for source in (out / "train.jsonl", out / "removed.jsonl"):
        with pytest.raises(ValueError, match="inside the output folder"):
            dd.run_pipeline(source, out, progress=False)
    assert _digests(out) == before and not list(out.glob(".partial-*"))


@pytest.mark.given
def test_unusable_output_paths_are_refused(tmp_path):
    corpus = _write(tmp_path / "c.jsonl", _docs(5))
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        dd.run_pipeline(corpus, tmp_path / "file", progress=False)
    with pytest.raises(ValueError, match="is a file"):
        dd.run_pipeline(corpus, tmp_path / "file" / "sub", progress=False)
    (tmp_path / "o" / "val.jsonl").mkdir(parents=True)
    with pytest.raises(ValueError, match="val.jsonl is a folder"):
        dd.run_pipeline(corpus, tmp_path / "o", progress=False)
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["val.jsonl"]
    with pytest.raises(ValueError, match="is a folder"):
        dd.run_pipeline(tmp_path / "o", tmp_path / "o2", progress=False)
    with pytest.raises(ValueError, match="course's package"):
        dd.build_corpus(Path(dd.__file__).resolve().parents[2] / "solutions" / "never.jsonl", limit=1)


@pytest.mark.given
def test_a_failed_run_leaves_the_previous_outputs(tmp_path, monkeypatch):
    corpus = _write(tmp_path / "c.jsonl", _docs(20))
    out = tmp_path / "out"
    before = _fake_previous_outputs(out)

    def broken(*args, **kwargs):
        raise RuntimeError("the disk filled up")

    # run_pipeline's pass lives in the package's pipeline.py: patch the name it calls there
    pipeline = importlib.import_module(dd.__name__ + ".pipeline")
    monkeypatch.setattr(pipeline, "assign_splits", broken)  # fails after removed.jsonl was written
    with pytest.raises((RuntimeError, NotImplementedError)):
        dd.run_pipeline(corpus, out, progress=False)
    assert _digests(out) == before
    assert not list(out.glob(".partial-*")) and not list(tmp_path.glob(".partial-*"))
    with pytest.raises((RuntimeError, NotImplementedError)):
        dd.run_pipeline(corpus, tmp_path / "new", progress=False)
    assert not (tmp_path / "new").exists()  # nothing, rather than half a set


@pytest.mark.exercise("2.8")
def test_a_finished_run_replaces_the_outputs_and_keeps_other_files(tmp_path):
    corpus = _write(tmp_path / "c.jsonl", _docs(20) + ["not a record"])
    out = tmp_path / "out"
    _fake_previous_outputs(out)
    (out / "notes.txt").write_text("mine\n")
    report = dd.run_pipeline(corpus, out, progress=False)
    assert (out / "notes.txt").read_text() == "mine\n"
    assert not list(out.glob(".partial-*"))
    assert json.loads((out / "report.json").read_text()) == report
    kept = sum(len((out / f"{s}.jsonl").read_text().splitlines()) for s in dd.SPLITS)
    removed = len((out / "removed.jsonl").read_text().splitlines())
    assert report["input_lines"] == 21 == kept + removed + report["malformed"]


@pytest.mark.given
def test_quality_profiles_are_named():
    assert dd.quality_profile("code") == dd.QualityConfig()
    text = dd.quality_profile("text")
    assert text.max_line_chars > 100_000 and text.min_letters > dd.QualityConfig().min_letters
    assert dd.profile_name(text) == "text" and dd.profile_name(dd.QualityConfig(min_chars=3)) == "custom"
    with pytest.raises(ValueError, match="profile.*'prose'"):
        dd.quality_profile("prose")


@pytest.mark.exercise("2.1")
def test_text_profile_keeps_prose_written_one_paragraph_per_line():
    paragraph = " ".join(["The quick brown fox jumps over the lazy dog, and then it rests."] * 30)
    prose = "\n\n".join([paragraph] * 3)  # lines of ~1,900 characters
    assert dd.quality_reason(prose, dd.quality_profile("code")) == "long_line"
    assert dd.quality_reason(prose, dd.quality_profile("text")) is None
    numbers = "\n".join(" ".join(str(i * j) for j in range(20)) for i in range(40))
    assert dd.quality_reason(numbers, dd.quality_profile("text")) == "few_letters"


@pytest.mark.exercise("2.8")
def test_report_says_which_profile_ran(tmp_path, capsys):
    prose = " ".join(["Every document is accounted for, and none is lost on the way."] * 25)
    corpus = _write(tmp_path / "c.jsonl", [{"id": f"p{i}", "text": f"{i}. {prose}", "source": f"doc{i}"}
                                           for i in range(6)])
    assert dd.main([str(corpus), str(tmp_path / "a"), "--no-progress"]) == 0
    assert "quality filters: code profile" in capsys.readouterr().out
    code = json.loads((tmp_path / "a" / "report.json").read_text())
    assert code["quality_profile"] == "code" and code["filtered"]["long_line"] == 6
    assert dd.main([str(corpus), str(tmp_path / "b"), "--no-progress", "--profile", "text"]) == 0
    assert "quality filters: text profile" in capsys.readouterr().out
    text = json.loads((tmp_path / "b" / "report.json").read_text())
    assert text["quality_profile"] == "text" and text["filtered"]["long_line"] == 0
    assert dd.main([str(corpus), str(tmp_path / "c"), "--no-progress", "--profile", "text",
                    "--min-letters", "0.3"]) == 0
    assert json.loads((tmp_path / "c" / "report.json").read_text())["quality_profile"] == "custom"


@pytest.mark.given
def test_cli_errors_exit_2_without_traceback(tmp_path, capsys):
    corpus = _write(tmp_path / "c.jsonl", _docs(3))
    for argv, message in (([str(tmp_path / "o" / "x.jsonl"), str(tmp_path / "o")], "no such input file"),
                          ([str(corpus), str(tmp_path)], "inside the output folder"),
                          ([str(corpus), str(tmp_path / "o"), "--threshold", "2"], "threshold"),
                          ([str(corpus), str(tmp_path / "o"), "--limit", "2"], "--build-corpus")):
        try:
            code = dd.main(argv)
        except SystemExit as e:
            code = e.code
        err = capsys.readouterr().err
        assert code == 2 and "error: " in err and message in err, err
    assert not (tmp_path / "o").exists()


@pytest.mark.exercise("2.8")
def test_build_train_split_leaves_no_corpus_behind(tmp_path):
    path = dd.build_train_split(tmp_path / "split", limit=20)
    assert path == tmp_path / "split" / "train.jsonl"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["split"]
    assert sorted(p.name for p in (tmp_path / "split").iterdir()) == sorted(dd.OUTPUT_FILES)


def _call_main(argv, capsys):
    try:
        code = dd.main(argv)
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


@pytest.mark.given
def test_a_compressed_or_empty_input_is_refused_and_the_outputs_kept(tmp_path, capsys):
    """A gzip (or bzip2, UTF-16, empty) file has no record to split: exit 2 naming the file
    and what it looks like, before anything is read; the previous outputs stay as they were
    (not 'input lines 25, malformed 25, kept 0' and empty splits in their place)."""
    import bz2
    import gzip

    out = tmp_path / "out"
    before = _fake_previous_outputs(out)
    text = "".join(json.dumps(r) + "\n" for r in _docs(25)).encode("utf-8")
    cases = {"corpus.jsonl.gz": (gzip.compress(text), "gzip"),
             "corpus.jsonl.bz2": (bz2.compress(text), "bzip2"),
             "utf16.jsonl": (text.decode("utf-8").encode("utf-16"), "UTF-16"),
             "empty.jsonl": (b"", "empty")}
    for name, (data, looks_like) in cases.items():
        (tmp_path / name).write_bytes(data)
        code, err = _call_main([str(tmp_path / name), str(out), "--no-progress"], capsys)
        assert code == 2, (f"dedup on {name} must refuse with exit status 2 (an input with no record "
                           f"must not replace the outputs), got {code}; stderr: {err}")
        assert err.startswith("error: ") and "Traceback" not in err, err
        assert name in err and looks_like in err, f"the error must name the file and say it looks like {looks_like}: {err}"
        assert _digests(out) == before, f"dedup on {name} must leave the previous outputs as they were"
        with pytest.raises(ValueError, match=looks_like):
            dd.run_pipeline(tmp_path / name, tmp_path / "fresh", progress=False)
    assert not (tmp_path / "fresh").exists() and not list(tmp_path.rglob(".partial-*"))


@pytest.mark.exercise("2.8")
def test_an_input_without_one_record_is_refused_and_the_outputs_kept(tmp_path, capsys):
    """Text in which no line is a record (a CSV, one JSON array spread over lines, blank
    lines) is refused after the first pass, exit 2, naming the file and its first line;
    the previous run's outputs stay. One record among bad lines is a corpus: it runs."""
    corpus = _write(tmp_path / "good.jsonl", _docs(25))
    out = tmp_path / "out"
    assert dd.main([str(corpus), str(out), "--no-progress"]) == 0
    capsys.readouterr()
    before = _digests(out)
    records = _docs(25)
    bad = {"table.csv": "id,text,source\n" + "".join(f"{r['id']},{r['text'][:20]!r},{r['source']}\n"
                                                   for r in records[:24]),
           "array.json": json.dumps(records[:3], indent=2) + "\n",
           "blank.jsonl": "\n" * 25}
    for name, data in bad.items():
        (tmp_path / name).write_text(data, encoding="utf-8")
        lines = len(data.splitlines())
        code, err = _call_main([str(tmp_path / name), str(out), "--no-progress"], capsys)
        assert code == 2, (f"dedup on {name}, where none of its {lines} lines is a record, must refuse "
                           f"with exit status 2 and keep the previous outputs; got {code}; stderr: {err}")
        assert err.startswith("error: ") and "Traceback" not in err, err
        assert name in err and f"all {lines} lines are malformed" in err and "line 1" in err, (
            f"the error must name the file, the count of malformed lines and what line 1 looks like: {err}")
        assert _digests(out) == before, f"dedup on {name} must leave the previous outputs as they were"
        assert not list(tmp_path.rglob(".partial-*"))
    assert json.loads((out / "report.json").read_text())["input_lines"] == 25  # the previous run's
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(bad["table.csv"] + json.dumps(records[0]) + "\n", encoding="utf-8")
    code, err = _call_main([str(mixed), str(tmp_path / "mixed_out"), "--no-progress"], capsys)
    assert code == 0, f"one record among malformed lines is still a corpus (the report counts the rest): {err}"
