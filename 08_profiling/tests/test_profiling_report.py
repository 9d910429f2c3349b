"""Exercise 8.7: the report — written with its plots, and every figure in it from the data."""

import json
from pathlib import Path

import pytest

import course

prof = course.load("profiling")
PNG = b"\x89PNG\r\n\x1a\n"


DATA = Path(__file__).with_name("report_data.json")


@pytest.fixture
def data():
    """What `collect(model, quick=True)` measured on the conftest's tiny model (committed,
    so that the report's tests depend only on `write_report`)."""
    return json.loads(DATA.read_text())


@pytest.fixture
def unrendered(monkeypatch):
    """Figures saved without being drawn (each file only a PNG signature), for the tests that
    read the report's text: drawing is most of a report's time (test_report_with_every_plot
    draws them)."""
    import matplotlib.figure

    def savefig(self, fname, *args, **kwargs):
        if hasattr(fname, "write"):
            fname.write(PNG)
        else:
            path = Path(fname)
            (path if path.suffix else path.with_suffix(".png")).write_bytes(PNG)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)


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
def test_every_figure_comes_from_the_data(data, tmp_path, report_check, unrendered):
    md = prof.write_report(data, tmp_path).read_text()
    made_up = report_check(md, data)
    assert made_up == [], (
        f"the report prints figures no value of the data explains: {made_up[:8]}. Every figure is a stored "
        f"value times one unit scale (ms/µs from s, G from FLOP/s or B/s, % from a fraction, MiB from bytes), "
        f"formatted by _num; a ratio or sum the report computes itself, or a number typed in, fails (with or "
        f"without a unit glued on: 5.02x, 12ms)")
    # and the tables really show the measurements
    for p in data["sweep"]["points"]:
        assert prof._num(p["tokens_per_s"]) in md
    for op in data["ops"]["b1"]["top"]:
        assert f"`{op['name']}`" in md
    assert data["latency"]["recommendation"]["advice"] in md


@pytest.mark.exercise("8.7")
def test_only_the_sections_in_the_data(data, tmp_path, report_check, unrendered):
    part = {k: data[k] for k in ("environment", "model", "conditions", "sweep")}
    md = prof.write_report(part, tmp_path).read_text()
    assert (tmp_path / "sweep.png").exists()
    assert not (tmp_path / "roofline.png").exists() and not (tmp_path / "latency.png").exists()
    assert "## Roofline" not in md and "## Where a decode step" not in md
    assert report_check(md, part) == []


@pytest.mark.exercise("8.7")
def test_a_fresh_measurement_reports_cleanly(model, tmp_path, report_check, unrendered):
    """collect on a real (tiny) model, end to end: plain JSON, and a report that passes the check."""
    fresh = prof.collect(model, sections=["memory", "sweep", "latency"], quick=True)
    assert json.loads(json.dumps(fresh, allow_nan=False)) == fresh
    md = prof.write_report(fresh, tmp_path).read_text()
    assert report_check(md, fresh) == []


@pytest.mark.given
def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="out_dir"):
        prof.write_report({}, tmp_path / "missing")
    with pytest.raises(ValueError, match="sections"):
        prof.collect(sections=["nope"])


@pytest.mark.exercise("8.7")
def test_sections_come_in_the_contracts_order(data, tmp_path, unrendered):
    md = prof.write_report(data, tmp_path).read_text()
    heads = [line for line in md.splitlines() if line.startswith("## ")]
    want = ["## Timers", "## Where a decode step's time goes", "## Memory", "## Throughput against batch size",
            "## Roofline", "## Where a request's time goes", "## The data"]
    assert len(heads) == len(want) and all(h.startswith(w) for h, w in zip(heads, want)), (
        "report.md has one '## ' section per section of the data, in the order timers, ops, memory, sweep, "
        f"roofline, latency, and '## The data' last; got {heads}")
    assert md.startswith("# "), "report.md starts with a '# ' title"
    assert data["environment"]["device"] in md.splitlines()[0], "the title names the environment's device"


@pytest.mark.exercise("8.7")
def test_the_recommendation_and_the_knee_are_shown(data, tmp_path, unrendered):
    md = prof.write_report(data, tmp_path).read_text()
    rec = data["latency"]["recommendation"]
    assert f"`{rec['key']}`" in md, "the recommendation's key is shown in backticks"
    assert rec["evidence"] in md, "the recommendation's evidence is shown"
    pts = data["sweep"]["points"]
    kneed = json.loads(json.dumps(data))
    kneed["sweep"]["knee"] = {"batch": pts[1]["batch"], "tokens_per_s": pts[1]["tokens_per_s"], "min_gain": 0.1}
    sweep_md = prof.write_report(kneed, tmp_path).read_text().split("## Throughput")[1].split("## Roofline")[0]
    assert f"batch {pts[1]['batch']}" in sweep_md, "the sweep section states the knee's batch when there is one"
    for p in data["roofline"]["points"]:
        row = next((line for line in md.splitlines() if line.startswith(f"| {p['name']} |")), None)
        assert row is not None and p["regime"] in row, f"the roofline has a row per step with its regime: {p['name']}"
