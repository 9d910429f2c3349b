"""A small multiple-choice task for lm-eval, built reproducibly from data on this machine: the
first line of a Python standard-library module's docstring, and which module it describes.

    Question: Which Python standard library module does this describe? "JSON (JavaScript
    Object Notation) <https://json.org> is a subset of JavaScript syntax ..."
    Answer: json          (choices: the module and 3 others, drawn with random.Random(index))

`build(out_dir)` writes `stdlib_modules.jsonl` (one document a line: question, choices,
answer index) and `stdlib_modules.yaml` (the lm-eval task reading it: `--include_path
out_dir --tasks stdlib_modules`). The texts are this interpreter's docstrings (the file
records its version); the same Python gives the same file, byte for byte.

    python 07_serving/tests/lm_eval_stdlib.py OUT_DIR
"""

from __future__ import annotations

import importlib
import json
import random
import re
import sys
from pathlib import Path

#: Standard-library modules, each documented by a docstring that says what it does.
MODULES = ("abc", "argparse", "array", "ast", "base64", "bisect", "calendar", "cmath", "codecs", "colorsys",
           "contextlib", "copy", "csv", "dataclasses", "datetime", "decimal", "difflib", "doctest", "enum",
           "fnmatch", "fractions", "functools", "getpass", "gettext", "glob", "gzip", "hashlib", "heapq", "hmac",
           "html", "imaplib", "inspect", "io", "ipaddress", "json", "keyword", "linecache", "locale", "logging",
           "lzma", "mailbox", "math", "mimetypes", "operator", "os", "pathlib", "pickle", "pprint", "queue",
           "random", "re", "sched", "secrets", "shelve", "shlex", "shutil", "signal", "smtplib", "socket",
           "sqlite3", "statistics", "string", "struct", "subprocess", "tarfile", "tempfile", "textwrap",
           "threading", "timeit", "tokenize", "traceback", "typing", "unittest", "uuid", "warnings", "wave",
           "weakref", "zipfile", "zlib")
TASK = "stdlib_modules"
CHOICES = 4

YAML = """\
# lm-eval task (built by 07_serving/tests/lm_eval_stdlib.py with Python {python})
task: {task}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "Question: Which Python standard library module does this describe? \\"{{{{question}}}}\\"\\nAnswer:"
doc_to_choice: choices
doc_to_target: answer
target_delimiter: " "
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
  - metric: acc_norm
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""


def first_line(name: str) -> str | None:
    """The module's docstring's first paragraph (at most 200 characters, its whitespace
    collapsed), the module's name in it written "___"; None if fewer than 3 words are left."""
    doc = (importlib.import_module(name).__doc__ or "").strip()
    line = " ".join(doc.split("\n\n")[0].split())[:200]
    line = re.sub(rf"\b{name}\b", "___", line, flags=re.IGNORECASE)
    return line if len(re.findall(r"[A-Za-z]{3,}", line)) >= 3 else None  # words to go by


def documents() -> list[dict]:
    names = [n for n in MODULES if first_line(n)]
    docs = []
    for i, name in enumerate(names):
        rng = random.Random(i)
        choices = [name, *rng.sample([n for n in names if n != name], CHOICES - 1)]
        rng.shuffle(choices)
        docs.append({"question": first_line(name), "choices": choices, "answer": choices.index(name)})
    return docs


def build(out_dir: str | Path) -> Path:
    """Write the task's data and YAML into `out_dir`; return the YAML's path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = out / f"{TASK}.jsonl"
    data.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in documents()), encoding="utf-8")
    yaml = out / f"{TASK}.yaml"
    yaml.write_text(YAML.format(python=sys.version.split()[0], task=TASK, data=data.resolve()), encoding="utf-8")
    return yaml


if __name__ == "__main__":
    path = build(sys.argv[1] if len(sys.argv) > 1 else "lm_eval_tasks")
    print(f"{path} ({sum(1 for _ in open(path.with_suffix('.jsonl')))} questions)")
