# GENERATED from solutions/train/stdlib_task.py by `course stubs --write`.
# Nothing to write here: given code of stage 03 (03_training_loop/03_training_loop.ipynb).
"""A multiple-choice task built reproducibly from data on this machine (given): the first
paragraph of a Python standard-library module's docstring, and which module it describes.

    Question: Which Python standard library module does this describe? "JSON (JavaScript
    Object Notation) <https://json.org> is a subset of JavaScript syntax ..."
    Answer: json          (choices: the module and 3 others, drawn with random.Random(index))

`documents()` builds the questions (question, choices, answer index); `context(doc)` is the
prompt a choice continues, after `TARGET_DELIMITER` (lm-eval's `doc_to_text` and
`target_delimiter` in `YAML`: the same text whoever scores it). `build(out_dir)` writes
`stdlib_modules.jsonl` and `stdlib_modules.yaml`, the lm-eval task reading it (`--include_path
out_dir --tasks stdlib_modules`; 07_serving/tests/lm_eval_stdlib.py is its command line).
`course eval smollm2` scores the same questions with the course's model
(`smollm2_eval.score_task`). The texts are this interpreter's docstrings (the jsonl records
nothing else); the same Python gives the same file, byte for byte.
"""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path
from types import ModuleType

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
#: the prompt of a question (lm-eval's doc_to_text, below) and what separates it from a choice
PROMPT = 'Question: Which Python standard library module does this describe? "{question}"\nAnswer:'
TARGET_DELIMITER = " "

YAML = """\
# lm-eval task (built by solutions/train/stdlib_task.py with Python {python})
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


def _stdlib() -> dict[str, ModuleType]:
    """MODULES, imported (each by name here, so that every import of the course is visible to
    tests/test_import_cycles.py), by name."""
    import abc, argparse, array, ast, base64, bisect, calendar, cmath, codecs, colorsys  # noqa: E401, F401, I001
    import contextlib, copy, csv, dataclasses, datetime, decimal, difflib, doctest, enum  # noqa: E401, F401, I001
    import fnmatch, fractions, functools, getpass, gettext, glob, gzip, hashlib, heapq  # noqa: E401, F401, I001
    import hmac, html, imaplib, inspect, io, ipaddress, json, keyword, linecache, locale  # noqa: E401, F401, I001
    import logging, lzma, mailbox, math, mimetypes, operator, os, pathlib, pickle, pprint  # noqa: E401, F401, I001
    import queue, random, re, sched, secrets, shelve, shlex, shutil, signal, smtplib  # noqa: E401, F401, I001
    import socket, sqlite3, statistics, string, struct, subprocess, tarfile, tempfile  # noqa: E401, F401, I001
    import textwrap, threading, timeit, tokenize, traceback, typing, unittest, uuid  # noqa: E401, F401, I001
    import warnings, wave, weakref, zipfile, zlib  # noqa: E401, F401, I001

    missing = [n for n in MODULES if n not in sys.modules]
    if missing:
        raise ImportError(f"stdlib_task imports no module {missing}: add it to _stdlib's imports")
    return {n: sys.modules[n] for n in MODULES}


def first_line(name: str) -> str | None:
    """The module's docstring's first paragraph (at most 200 characters, its whitespace
    collapsed), the module's name in it written "___"; None if fewer than 3 words are left."""
    doc = (_stdlib()[name].__doc__ or "").strip()
    line = " ".join(doc.split("\n\n")[0].split())[:200]
    line = re.sub(rf"\b{name}\b", "___", line, flags=re.IGNORECASE)
    return line if len(re.findall(r"[A-Za-z]{3,}", line)) >= 3 else None  # words to go by


def documents() -> list[dict]:
    """The task's questions, in MODULES' order (those whose `first_line` is not None): dicts
    {"question", "choices", "answer"}, the choices the module and CHOICES - 1 other names of
    the list drawn with random.Random(index), shuffled by it; answer = the module's index."""
    names = [n for n in MODULES if first_line(n)]
    docs = []
    for i, name in enumerate(names):
        rng = random.Random(i)
        choices = [name, *rng.sample([n for n in names if n != name], CHOICES - 1)]
        rng.shuffle(choices)
        docs.append({"question": first_line(name), "choices": choices, "answer": choices.index(name)})
    return docs


def context(doc: dict) -> str:
    """The prompt of one question (`PROMPT`); each choice is scored as its continuation
    TARGET_DELIMITER + choice."""
    return PROMPT.format(question=doc["question"])


def build(out_dir: str | Path) -> Path:
    """Write the task's data and YAML into `out_dir`; return the YAML's path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = out / f"{TASK}.jsonl"
    data.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in documents()), encoding="utf-8")
    yaml = out / f"{TASK}.yaml"
    yaml.write_text(YAML.format(python=sys.version.split()[0], task=TASK, data=data.resolve()), encoding="utf-8")
    return yaml
