# GENERATED from solutions/server/__main__.py by `course stubs --write`.
# Nothing to write here: given code of stage 07 (07_serving/07_serving.ipynb).
"""`python -m solutions.server`: see `cli.main`."""

import sys

from .cli import main

sys.exit(main())
