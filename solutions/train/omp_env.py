"""The command line's OpenMP setting (given), made before anything loads torch.

Idle OpenMP threads sleep instead of spinning (an explicit setting wins). On a machine shared
with other jobs, spinning threads take the cores the working threads need, and a 2-thread
training step became up to 9x slower than a 1-thread one. The OpenMP runtime reads this once,
when torch loads it. `python -m solutions.train` imports this package before it runs
`__main__.py`, so the package imports this file first. Only the command line changes the
setting: while `-m` is still locating the module to run, sys.argv[0] is "-m"; a program that
merely imports the package changes nothing.
"""

import os
import sys

if sys.argv[:1] == ["-m"]:  # `python -m solutions.train`, being set up to run as the program
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
