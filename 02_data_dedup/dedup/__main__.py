# GENERATED from solutions/dedup/__main__.py by `course stubs --write`.
# Nothing to write here: given code of stage 02 (02_data_dedup/02_data_dedup.ipynb).
"""`python -m solutions.dedup ...`: the stage's command line (see cli.py)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
