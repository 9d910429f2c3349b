"""The command line of the multiple-choice task for lm-eval (the task itself lives once, in
solutions/train/stdlib_task.py, given code of stage 03: `course eval smollm2` scores the same
questions with the course's model): the first paragraph of a Python standard-library module's
docstring, and which module it describes.

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

import sys

from solutions.train.stdlib_task import CHOICES, MODULES, TASK, YAML, build, context, documents, first_line

__all__ = ["CHOICES", "MODULES", "TASK", "YAML", "build", "context", "documents", "first_line"]

if __name__ == "__main__":
    path = build(sys.argv[1] if len(sys.argv) > 1 else "lm_eval_tasks")
    print(f"{path} ({sum(1 for _ in open(path.with_suffix('.jsonl')))} questions)")
