"""`python -m bench`, from the repository root: the same as `python bench/run.py`."""

import sys

from bench.main import main

sys.exit(main())
