"""A pytest plugin for nbval runs: a notebook's prose may not contradict its own outputs.

Loaded by `tests/test_notebooks.py` into the nbval run that executes every notebook anyway
(`pytest --nbval-lax -p tests.nbclaims NB.ipynb`), so the check costs no second run. It
records what every cell printed, and when a notebook's last cell has run it checks:

1. **Claims.** A markdown cell that quotes a figure printed by a `# NBVAL_CHECK_OUTPUT` cell
   declares it in an HTML comment, invisible when rendered:

       For the course's model that is 3,072 bytes per token. <!-- claims: 3,072 -->

   Several claims are separated by `|`. Each claim must appear in the cell's prose, and in
   the text printed by some `# NBVAL_CHECK_OUTPUT` cell of the notebook (deterministic
   values: nbval's own output check is off for notebooks committed without outputs). A
   figure that depends on a timing is not a claim: print it from the measurement instead.
2. **Clean outputs.** No `<matplotlib.legend.Legend at 0x...>`-style object reprs (end a
   plotting cell with `plt.show()`) and no tqdm warnings about missing widgets.

Problems are reported as an error of the notebook's last cell, with the notebook's name.
`check_notebook` is the pure function the tests exercise directly. With the environment
variable `NBCLAIMS_DUMP=DIR`, the text every cell printed is also written to
`DIR/<notebook>.outputs.json`, to read what the prose was checked against.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Iterable

CLAIMS = re.compile(r"<!--\s*claims:\s*(.*?)\s*-->", re.S)
OBJECT_REPR = re.compile(r"<(?:matplotlib|mpl_toolkits)\.[\w.]+ (?:at|object at) 0x[0-9a-f]+>")
TQDM_WARNING = re.compile(r"TqdmWarning|IProgress not found")
CHECK_MARK = "NBVAL_CHECK_OUTPUT"


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def output_text(outputs: Iterable[dict]) -> str:
    """The text a learner sees from a cell's outputs: streams, results, errors."""
    parts = []
    for out in outputs or ():
        kind = out.get("output_type")
        if kind == "stream":
            text = out.get("text", "")
            parts.append("".join(text) if isinstance(text, list) else text)
        elif kind in ("execute_result", "display_data"):
            plain = out.get("data", {}).get("text/plain", "")
            parts.append("".join(plain) if isinstance(plain, list) else plain)
        elif kind == "error":
            parts.append(f"{out.get('ename')}: {out.get('evalue')}")
    return "\n".join(parts)


def is_checked(cell) -> bool:
    return cell.get("cell_type") == "code" and any(
        line.strip().lstrip("#").strip() == CHECK_MARK for line in _source(cell).splitlines()
        if line.strip().startswith("#"))


def claims_of(markdown: str) -> tuple[list[str], str]:
    """(the claims a markdown cell declares, its prose without the claims comments)."""
    claims = [c.strip() for m in CLAIMS.finditer(markdown) for c in m.group(1).split("|") if c.strip()]
    return claims, CLAIMS.sub("", markdown)


def check_notebook(cells: list[dict], outputs: dict[int, list[dict]] | None = None, name: str = "notebook") -> list[str]:
    """Problems of one notebook: `cells` as in the .ipynb; `outputs[i]` what code cell i
    printed when run (None: only the static checks, on the prose)."""
    problems = []
    checked = ""
    if outputs is not None:
        checked = _squash("\n".join(output_text(outputs.get(i, ())) for i, c in enumerate(cells) if is_checked(c)))
        for i, cell in enumerate(cells):
            text = output_text(outputs.get(i, ()))
            for m in OBJECT_REPR.finditer(text):
                problems.append(f"{name}, cell {i}: prints the object repr {m.group(0)} "
                                "(end the plotting cell with plt.show() or ';')")
            if TQDM_WARNING.search(text):
                problems.append(f"{name}, cell {i}: prints a tqdm warning (pass progress=False, "
                                "or use tqdm.auto's plain-text bar)")
    for i, cell in enumerate(cells):
        if cell.get("cell_type") != "markdown":
            continue
        claims, prose = claims_of(_source(cell))
        prose = _squash(prose)
        for claim in claims:
            if _squash(claim) not in prose:
                problems.append(f"{name}, cell {i}: the claim {claim!r} is declared but not in the cell's prose")
            elif outputs is not None and _squash(claim) not in checked:
                problems.append(f"{name}, cell {i}: the prose states {claim!r}, which no "
                                f"# {CHECK_MARK} cell of the notebook printed")
    return problems


# ------------------------------------------------------------------------------- the plugin

_outputs: dict[str, dict[int, list[dict]]] = {}


def pytest_runtest_teardown(item, nextitem):
    outs = getattr(item, "test_outputs", None)
    parent = getattr(item, "parent", None)
    nb = getattr(parent, "nb", None)
    if nb is None or not hasattr(item, "cell_num"):
        return
    key = str(parent.fspath)
    code_cells = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    # nbval numbers the code cells it collects; map back to the notebook's cell index
    index = code_cells[item.cell_num] if item.cell_num < len(code_cells) else item.cell_num
    _outputs.setdefault(key, {})[index] = list(outs or [])
    if nextitem is not None and getattr(nextitem, "parent", None) is parent:
        return
    recorded = _outputs.pop(key)
    if len(recorded) < len(code_cells):
        return  # a cell failed or was skipped: nbval reports that; the claims need every output
    if os.environ.get("NBCLAIMS_DUMP"):
        out = Path(os.environ["NBCLAIMS_DUMP"]) / f"{parent.fspath.purebasename}.outputs.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({i: output_text(o) for i, o in sorted(recorded.items())}, indent=1), encoding="utf-8")
    problems = check_notebook([dict(c) for c in nb.cells], recorded, name=parent.fspath.basename)
    if problems:
        raise AssertionError("the notebook's prose or outputs need fixing:\n  " + "\n  ".join(problems))
