"""Line-level code completion on CodeXGLUE's task: a fixed held-out set, exact match, edit similarity (3.13).

`edit_similarity` is the course's (1 - Levenshtein / max length); `codexglue_edit_sim` is
CodeXGLUE's evaluator's (fuzzywuzzy's `fuzz.ratio`, difflib's matcher): two different numbers.
"""

from __future__ import annotations

import difflib
import random
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

import torch
from torch import nn

from solutions.checks import check_int
from solutions.tokenizer import EOT

LEAK_CONTEXT = 64  # characters of prefix that, with the target line, must not occur in train


def edit_similarity(a: str, b: str) -> float:
    """1 - lev(a, b) / max(len(a), len(b)), in [0, 1]; 1.0 when both are empty.

    lev is the Levenshtein distance over characters: the fewest insertions, deletions and
    substitutions (each costing 1) that turn a into b. Symmetric; 1.0 exactly when a == b.
    TypeError: a or b not a str.
    """
    _check_strs(a=a, b=b)
    # BEGIN SOLUTION 3.13
    # DECISION: the recurrence's data structure (one DP row at a time), what makes two lines equal
    #   (whitespace-split tokens), and what makes the held-out set independent of input order (sort
    #   by key, then a seeded shuffle) and free of leaks and duplicates.
    # HINT: Dynamic programming, one row at a time: row[j] = lev(a[:i], b[:j]).
    #   Row 0 is 0, 1, ..., len(b) (insert j characters); each new row starts at i.
    # HINT: row_i[j] = min(row_i-1[j] + 1, row_i[j-1] + 1, row_i-1[j-1] + (a[i-1] != b[j-1])).
    # HINT: Both empty: similarity 1.0 (nothing to edit), never a division by zero.
    if not a and not b:
        return 1.0
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        row = [i]
        for j, cb in enumerate(b, 1):
            row.append(min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = row
    return 1.0 - prev[-1] / max(len(a), len(b))
    # END SOLUTION


def exact_match(prediction: str, target: str) -> bool:
    """CodeXGLUE's exact match: the same whitespace-separated tokens (`str.split()` equal).

    So indentation, trailing spaces and runs of spaces do not matter; any other character does.
    """
    _check_strs(prediction=prediction, target=target)
    # BEGIN SOLUTION 3.13
    # HINT: str.split() with no argument splits on runs of whitespace and drops the ends.
    return prediction.split() == target.split()
    # END SOLUTION


def select_examples(candidates: Iterable[CompletionExample], *, n: int, seed: int,
                    train_text: str) -> list[CompletionExample]:
    """A fixed, deduplicated, held-out set of at most n examples from `candidates`.

    Reproducible: the result depends only on the SET of candidates and the seed. It is the
    first n eligible candidates, in that order, of the order `random.Random(seed).shuffle`
    gives the list of the candidates sorted by `key` (split, doc_id, line_no). Eligible: not
    a duplicate of an example EARLIER in the result (the same `line.split()` tokens), and
    held out — its `leak_text()` does not occur in `train_text` (never a line the model saw
    with that context in train).
    ValueError: n not an int >= 1; TypeError: train_text not a str.
    """
    check_int("n", n, 1)
    if not isinstance(train_text, str):
        raise TypeError(f"train_text must be a str (the train split's text), got {type(train_text).__name__}")
    # BEGIN SOLUTION 3.13
    # HINT: sorted(candidates, key=lambda e: e.key) first: the input's order must not matter.
    # HINT: remember the kept lines as tuple(example.line.split()) in a set; test a candidate's
    #   leak_text() with `in train_text` only when it is new (the substring scan is the slow part).
    order = sorted(candidates, key=lambda e: e.key)
    random.Random(seed).shuffle(order)
    kept, seen = [], set()
    for ex in order:
        words = tuple(ex.line.split())
        if words in seen or ex.leak_text() in train_text:
            continue
        seen.add(words)
        kept.append(ex)
        if len(kept) == n:
            break
    return kept
    # END SOLUTION


def codexglue_edit_sim(prediction: str, target: str) -> int:
    """CodeXGLUE's line-level edit similarity (given): `fuzz.ratio(prediction, target)`, an int in 0..100.

    What microsoft/CodeXGLUE's Code-Code/CodeCompletion-line/evaluator/evaluator.py adds up
    per line, after stripping the prediction (`evaluate_model` strips both) and restoring the
    literals its tokenised data abbreviates (raw text has none); it reports the mean, rounded
    to 2 decimals. Its setup names `fuzzywuzzy` without python-Levenshtein, so `fuzz.ratio` is
    difflib's: round(100 * SequenceMatcher(None, prediction, target).ratio()), where ratio()
    is 2 * M / (len(prediction) + len(target)) and M counts the characters of the matching
    blocks difflib finds (the longest common block, then the same on each side of it;
    difflib's defaults, whose autojunk acts only on a target of 200+ characters); the
    rounding is Python's round (half to even: 12.5 gives 12). 100 when the two are equal
    (two empty strings included), 0 when exactly one is empty. Not symmetric (difflib takes
    the first longest block of the first string): the evaluator's order, prediction first.
    It is not 1 - lev / max: "ab" against "ba" scores 50 here and 0.0 by `edit_similarity`.
    TypeError: prediction or target not a str.
    """
    _check_strs(prediction=prediction, target=target)
    if prediction == target:
        return 100
    if not prediction or not target:
        return 0
    return int(round(100 * difflib.SequenceMatcher(None, prediction, target).ratio()))


def _check_strs(**values: object) -> None:
    for name, v in values.items():
        if not isinstance(v, str):
            raise TypeError(f"{name} must be a str, got {type(v).__name__}")


@dataclass(frozen=True)
class CompletionExample:
    """One line to complete: the file's text before the cut (its last PREFIX_CHARS characters,
    ending inside the line) and the rest of the line (no newline, no trailing space)."""

    split: str
    doc_id: str
    line_no: int  # 1-based
    prefix: str
    target: str

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.split, self.doc_id, self.line_no)

    @property
    def line(self) -> str:
        """The whole line, stripped: the prefix's last line and the target."""
        return (self.prefix.rsplit("\n", 1)[-1] + self.target).strip()

    def leak_text(self) -> str:
        """The last LEAK_CONTEXT characters of the prefix and the target: what must not occur in train."""
        return self.prefix[-LEAK_CONTEXT:] + self.target

    def to_dict(self) -> dict:
        return asdict(self)


PREFIX_CHARS = 256  # characters of the file before the line that an example keeps (every model sees at most this)
MIN_CHARS, MAX_CHARS = 4, 60  # a line's stripped length: no one-character lines, none too long to decode quickly


def candidate_lines(split: str, doc_id: str, text: str, *, prefix_chars: int = PREFIX_CHARS,
                    min_chars: int = MIN_CHARS, max_chars: int = MAX_CHARS) -> list[CompletionExample]:
    """Every line of a file that can be an example, each cut once (given code).

    As CodeXGLUE builds its line-level set, the file is cut at a random point inside a line:
    the text before the cut is the context, the rest of the line the target. A line qualifies
    when its stripped text has min_chars..max_chars characters and at least `prefix_chars`
    characters of the file precede it (every example has a full context). The cut falls after
    the line's indentation plus c characters of its text, c drawn uniformly from
    0..len(text) - min_chars by random.Random(f"{doc_id}:{line_no}") (so it is fixed per line,
    whatever else is drawn); the target is the rest of the line, trailing space removed.
    """
    out, start = [], 0
    for line_no, line in enumerate(text.split("\n"), 1):
        body = line.strip()
        if start >= prefix_chars and min_chars <= len(body) <= max_chars:
            c = random.Random(f"{doc_id}:{line_no}").randint(0, len(body) - min_chars)
            cut = start + len(line) - len(line.lstrip()) + c
            out.append(CompletionExample(split, doc_id, line_no, text[cut - prefix_chars:cut], body[c:]))
        start += len(line) + 1
    return out


@torch.no_grad()
def complete_lines(model: nn.Module, prefixes: Sequence[str], *, block_size: int, max_new: int = 48,
                   batch_size: int = 32) -> list[str]:
    """The greedy completion of the line each prefix ends in (given code).

    Each prefix's UTF-8 bytes, cropped to its last P = max(block_size // 2, 1) tokens (half
    the context: room to complete without re-cropping, and half the work per step), are
    continued one greedy (argmax) byte at a time, the model reading the last `block_size`
    tokens, until a newline or EOT (not included) or `max_new` bytes. Prefixes are run
    `batch_size` at a time; a row that has finished leaves the batch. Works for any CPU
    module mapping (B, T) int64 ids to (B, T, V) logits; its train/eval mode is restored.
    """
    check_int("block_size", block_size, 1)
    check_int("max_new", max_new, 1)
    check_int("batch_size", batch_size, 1)
    keep = max(block_size // 2, 1)
    was_training = model.training
    model.eval()
    out: list[str] = []
    try:
        for first in range(0, len(prefixes), batch_size):
            rows = [list(p.encode("utf-8"))[-keep:] for p in prefixes[first:first + batch_size]]
            out.extend(_greedy_lines(model, rows, block_size, max_new))
    finally:
        model.train(was_training)
    return out


def _greedy_lines(model: nn.Module, rows: list[list[int]], block_size: int, max_new: int) -> list[str]:
    newline = ord("\n")
    made: list[list[int]] = [[] for _ in rows]
    live = [i for i, r in enumerate(rows) if r]  # an empty prefix (none in a built set) completes to ""
    by_len: dict[int, list[int]] = {}
    for _ in range(max_new):
        if not live:
            break
        by_len.clear()
        for i in live:  # rows of one length go through one forward
            by_len.setdefault(len(rows[i]) + len(made[i]), []).append(i)
        still = []
        for group in by_len.values():
            x = torch.tensor([(rows[i] + made[i])[-block_size:] for i in group], dtype=torch.int64)
            nxt = model(x)[:, -1].argmax(-1).tolist()
            for i, t in zip(group, nxt):
                if t in (newline, EOT):
                    continue
                made[i].append(t)
                still.append(i)
        live = sorted(still)
    return [bytes(m).decode("utf-8", errors="replace") for m in made]
