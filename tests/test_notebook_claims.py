"""The lessons never contradict their own measurements (course-level, cheap: nothing here runs
a stage notebook).

The figures a notebook's prose quotes from its deterministic outputs are declared with
`<!-- claims: ... -->` and checked against the executed outputs by the `tests.nbclaims`
plugin, inside the one nbval run of `test_notebooks.py`. Here: the plugin's checker itself
(it must catch a contradiction, an object repr, a tqdm warning), the plugin end to end on a
tiny notebook, and static rules on every committed notebook: declared claims are in the
prose, no citation of sources a learner does not have, no cell ends with a matplotlib call
whose returned object Jupyter would print, temporary files and folders are removed.
"""
from __future__ import annotations

import ast
import json
import re
import sys

import pytest

from course import manifest
from tests import nbclaims
from tests.helpers import ROOT, existing_stages, run


def notebook_params():
    """Stages with a notebook (a missing one is test_notebooks.py's to report)."""
    return [pytest.param(st, id=st.folder) for st in existing_stages() if (ROOT / st.notebook).exists()]


def _cells(st: manifest.Stage) -> list[dict]:
    return json.loads((ROOT / st.notebook).read_text(encoding="utf-8"))["cells"]


def _src(cell: dict) -> str:
    return "".join(cell["source"])


def md(text: str) -> dict:
    return {"cell_type": "markdown", "metadata": {}, "source": text}


def code(text: str) -> dict:
    return {"cell_type": "code", "metadata": {}, "source": text, "outputs": [], "execution_count": None}


def stream(text: str) -> list[dict]:
    return [{"output_type": "stream", "name": "stdout", "text": text}]


# ------------------------------------------------------------------------ the checker itself

CELLS = [code("# NBVAL_CHECK_OUTPUT\nprint(bytes_per_token)"),
         md("That is 3,072 bytes per token. <!-- claims: 3,072 -->"),
         code("print(timing)")]


def test_a_claim_its_checked_output_prints_passes():
    assert nbclaims.check_notebook(CELLS, {0: stream("3,072 bytes/token\n"), 2: stream("1.2 ms\n")}) == []


def test_a_claim_its_checked_output_contradicts_fails():
    problems = nbclaims.check_notebook(CELLS, {0: stream("4,096 bytes/token\n"), 2: stream("3,072 ms\n")}, "nb")
    assert len(problems) == 1 and "'3,072'" in problems[0] and "cell 1" in problems[0], problems


def test_a_declared_claim_must_be_in_the_prose():
    cells = [md("That is 4,096 bytes per token. <!-- claims: 3,072 -->")]
    assert "not in the cell's prose" in nbclaims.check_notebook(cells)[0]
    assert nbclaims.check_notebook([md("Several: 1.5 and\n2.5 GB <!-- claims: 1.5 | 2.5 GB -->")]) == []


@pytest.mark.parametrize("text", ["<matplotlib.legend.Legend at 0x7f3a2c1d5e50>",
                                  "[<matplotlib.lines.Line2D object at 0x7f0000000000>]",
                                  "TqdmWarning: IProgress not found. Please update jupyter and ipywidgets."])
def test_object_reprs_and_tqdm_warnings_fail(text):
    outputs = {0: [{"output_type": "execute_result", "data": {"text/plain": text}}]}
    assert nbclaims.check_notebook([code("ax.legend()")], outputs)


def test_the_plugin_fails_a_notebook_whose_prose_contradicts_its_output(tmp_path):
    # one kernel: cell 1 quotes the checked output right, cell 2 quotes a figure it never printed
    meta = json.loads((ROOT / manifest.STAGES[0].notebook).read_text(encoding="utf-8"))["metadata"]
    nb = {"cells": [code("# NBVAL_CHECK_OUTPUT\nprint('3,072 bytes per token')"),
                    md("The cache takes 3,072 bytes per token. <!-- claims: 3,072 -->"),
                    md("For the course's model that is 4,096 bytes. <!-- claims: 4,096 -->")],
          "metadata": meta, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "lesson.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    proc = run([sys.executable, "-m", "pytest", "--nbval-lax", "-q", "-p", "no:cacheprovider", "-p", "tests.nbclaims",
                "--rootdir", str(tmp_path), str(tmp_path / "lesson.ipynb")], timeout=300, env={"PYTHONPATH": str(ROOT)})
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "lesson.ipynb, cell 2: the prose states '4,096'" in out, out[-3000:]
    assert "cell 1:" not in out, out[-3000:]


# ------------------------------------------------------------------- the committed notebooks

@pytest.mark.parametrize("st", notebook_params())
def test_declared_claims_are_in_the_prose(st: manifest.Stage):
    assert nbclaims.check_notebook(_cells(st), name=st.notebook) == []


def test_the_notebooks_declare_claims():
    declared = sum(len(nbclaims.claims_of(_src(c))[0]) for p in notebook_params() for c in _cells(p.values[0])
                   if c["cell_type"] == "markdown")
    assert declared >= 5, "the notebooks quote their checked outputs without declaring it"


NOTES = re.compile(r"source notes|\bthe notes\b|\bnotes'", re.I)


@pytest.mark.parametrize("st", notebook_params())
def test_no_citation_of_notes_a_learner_does_not_have(st: manifest.Stage):
    readme = ROOT / st.folder / "README.md"
    texts = [_src(c) for c in _cells(st)] + ([readme.read_text(encoding="utf-8")] if readme.exists() else [])
    hits = [m.group(0) for t in texts for m in NOTES.finditer(t)]
    assert not hits, f"{st.folder} cites {hits}: cite the paper or documentation, or state the claim and check it"


# matplotlib calls that return an object, whose repr Jupyter prints if the call ends the cell
RETURNS_OBJECT = {"legend", "set", "plot", "annotate", "text", "bar", "barh", "hist", "scatter", "imshow", "axvline",
                  "axhline", "axvspan", "axhspan", "fill_between", "loglog", "semilogx", "semilogy", "step",
                  "broken_barh", "subplots", "figure", "colorbar", "set_title", "set_xlabel", "set_ylabel",
                  "suptitle", "errorbar", "contourf", "pie", "twinx"}


def ends_in_object_repr(source: str) -> bool:
    try:
        body = ast.parse(source).body
    except SyntaxError:  # IPython magics: not this rule's business
        return False
    last = body[-1] if body else None
    return (not source.rstrip().endswith(";") and isinstance(last, ast.Expr) and isinstance(last.value, ast.Call)
            and isinstance(last.value.func, ast.Attribute) and last.value.func.attr in RETURNS_OBJECT)


def test_the_repr_rule():
    assert ends_in_object_repr("fig, ax = plt.subplots()\nax.legend()")
    assert not ends_in_object_repr("fig, ax = plt.subplots()\nax.legend();")
    assert not ends_in_object_repr("ax.legend()\nplt.show()")
    assert not ends_in_object_repr("ax.legend()\nprint(1)")


@pytest.mark.parametrize("st", notebook_params())
def test_no_plotting_cell_ends_in_an_object_repr(st: manifest.Stage):
    bad = [i for i, c in enumerate(_cells(st)) if c["cell_type"] == "code" and ends_in_object_repr(_src(c))]
    assert not bad, f"{st.notebook}: cells {bad} end with a call whose result Jupyter prints (end with plt.show())"


@pytest.mark.parametrize("st", notebook_params())
def test_temporary_folders_are_removed(st: manifest.Stage):
    sources = [_src(c) for c in _cells(st) if c["cell_type"] == "code"]
    made = [i for i, s in enumerate(sources) if re.search(r"\bmkdtemp\(|\bmkstemp\(|NamedTemporaryFile\(.*delete=False", s)]
    for i in made:
        assert any("rmtree(" in s or ".unlink(" in s for s in sources[i:]), (
            f"{st.notebook}: code cell {i} makes a temporary file or folder that no later cell removes")
