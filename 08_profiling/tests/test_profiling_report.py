"""Exercise 8.7: the report — written with its plots, and every figure in it from the data."""

import json

import pytest

import course

prof = course.load("profiling")
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def data(model):
    return prof.collect(model, quick=True)


@pytest.mark.exercise("8.7")
def test_report_with_every_plot(data, tmp_path, report_json):
    path = prof.write_report(data, tmp_path)
    assert path == tmp_path / "report.md"
    md = path.read_text()
    for png in ("sweep.png", "roofline.png", "latency.png"):
        assert (tmp_path / png).read_bytes().startswith(PNG), png
        assert f"]({png})" in md, f"the report does not show {png}"
    assert json.loads((tmp_path / "report.json").read_text()) == data
    assert report_json(md) == data
    for section in ("Timers", "profiler", "Memory", "batch size", "Roofline", "request"):
        assert section in md


@pytest.mark.exercise("8.7")
def test_every_figure_comes_from_the_data(data, tmp_path, report_check):
    md = prof.write_report(data, tmp_path).read_text()
    assert report_check(md, data) == []
    # and the table really shows the measurements: the knee sweep's throughputs
    for p in data["sweep"]["points"]:
        assert prof._num(p["tokens_per_s"]) in md


@pytest.mark.exercise("8.7")
def test_only_the_collected_sections(model, tmp_path, report_check):
    part = prof.collect(model, sections=["sweep"], quick=True)
    md = prof.write_report(part, tmp_path).read_text()
    assert (tmp_path / "sweep.png").exists()
    assert not (tmp_path / "roofline.png").exists() and not (tmp_path / "latency.png").exists()
    assert "Roofline" not in md
    assert report_check(md, part) == []


@pytest.mark.exercise("8.7")
def test_collected_data_is_plain_json(data):
    assert json.loads(json.dumps(data, allow_nan=False)) == data
    assert set(prof.SECTIONS) <= set(data)


@pytest.mark.given
def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="out_dir"):
        prof.write_report({}, tmp_path / "missing")
    with pytest.raises(ValueError, match="sections"):
        prof.collect(sections=["nope"])
