# GENERATED from solutions/train/eval_sets.py by `course stubs --write`.
# Nothing to write here: given code of stage 03 (03_training_loop/03_training_loop.ipynb).
"""The evaluation sets (given): held-out documents and the line-completion set, built reproducibly."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from solutions.checks import check_int
from solutions.dedup import read_jsonl

from .line_completion import CompletionExample, candidate_lines, select_examples
from .perplexity import DOC_BYTES

SOURCES = ("code", "prose")  # stdlib sources (*.py), pydoc_data topics
HELD_OUT = ("val", "test")
N_EXAMPLES, SEED = 150, 0


def source_kind(source: str) -> str:
    """"prose" for the pydoc_data topics ("pydoc_data.topics:if"), else "code" (stdlib files)."""
    return "prose" if str(source).startswith("pydoc_data") else "code"


@dataclass(frozen=True)
class Document:
    split: str
    doc_id: str
    source: str  # "code" or "prose"
    text: str


@dataclass(frozen=True)
class EvalSets:
    """What every model is evaluated on: held-out documents and the line-completion set."""

    documents: tuple[Document, ...]
    completions: tuple[CompletionExample, ...]
    construction: dict = field(default_factory=dict)

    @property
    def fingerprint(self) -> str:
        """SHA-256 (first 16 hex digits) of the sets' contents: reports compare only on equal sets."""
        h = hashlib.sha256()
        for d in self.documents:
            h.update(f"{d.split}\0{d.doc_id}\0{d.source}\0{d.text[:4 * DOC_BYTES]}\0".encode())
        for e in self.completions:
            h.update(f"{e.split}\0{e.doc_id}\0{e.line_no}\0{e.prefix}\0{e.target}\0".encode())
        h.update(json.dumps(self.construction.get("scoring", {}), sort_keys=True).encode())
        return h.hexdigest()[:16]


def read_split(path: str | Path, split: str) -> list[Document]:
    """The documents of one JSONL split as stage 02 writes them (records {"id", "text",
    "source"}, read by stage 02's `read_jsonl`), in file order; blank lines are skipped, any
    other bad line is a ValueError naming the file, the line and what is wrong."""
    docs = []
    for n, record, problem in read_jsonl(path):
        if record is None:
            if problem == "blank line":
                continue
            raise ValueError(f"{path}:{n}: {problem}")
        docs.append(Document(split, record["id"], source_kind(record["source"]), record["text"]))
    return docs


def build_eval_sets(data_dir: str | Path | None = None, *, n_examples: int = N_EXAMPLES,
                    seed: int = SEED) -> EvalSets:
    """The sets, built reproducibly from stage 02's splits (data_dir holds train/val/test.jsonl;
    None: stage 02's corpus in data/corpus, built if missing).

    Documents: every document of val and test. Completion set: the candidate lines
    (`candidate_lines`) of the code documents of val and test, `select_examples(n=n_examples,
    seed=seed)` against the train split's text (documents joined by NUL, so no match spans two).
    """
    from .cli import corpus_splits

    check_int("n_examples", n_examples, 1)
    train_path, val_path = corpus_splits(data_dir)
    test_path = val_path.with_name("test.jsonl")
    if not test_path.is_file():
        raise FileNotFoundError(f"no split at {test_path}; a data directory holds train, val and test .jsonl")
    docs = read_split(val_path, "val") + read_split(test_path, "test")
    train_text = "\0".join(d.text for d in read_split(train_path, "train"))
    candidates = [c for d in docs if d.source == "code" for c in candidate_lines(d.split, d.doc_id, d.text)]
    examples = select_examples(candidates, n=n_examples, seed=seed, train_text=train_text)
    construction = {
        "documents": {s: {k: sum(d.split == s and d.source == k for d in docs) for k in SOURCES} for s in HELD_OUT},
        "completion": {"splits": list(HELD_OUT), "candidates": len(candidates), "asked": n_examples,
                       "kept": len(examples), "seed": seed, "dedup": "the line's split() tokens",
                       "held_out": "prefix[-64:] + target not in train"},
        "scoring": {"doc_bytes": DOC_BYTES, "max_new": 48},
    }
    return EvalSets(tuple(docs), tuple(examples), construction)


_CACHE: dict[tuple, EvalSets] = {}


def load_eval_sets(data_dir: str | Path | None = None, *, n_examples: int = N_EXAMPLES, seed: int = SEED) -> EvalSets:
    """`build_eval_sets`, built once per process and argument set (the train scan takes seconds)."""
    key = (str(data_dir), n_examples, seed)
    if key not in _CACHE:
        _CACHE[key] = build_eval_sets(data_dir, n_examples=n_examples, seed=seed)
    return _CACHE[key]
