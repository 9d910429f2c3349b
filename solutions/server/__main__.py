"""`python -m solutions.server`: see `cli.main`."""

import sys

from .cli import main

sys.exit(main())
