#!/usr/bin/env python3
"""Entry point of `just bench`: the bench package (bench/__init__.py says what it measures)."""

import sys
from pathlib import Path

# Run as a script, this directory is on the path, not the repository root the package is in.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.main import main

if __name__ == "__main__":
    sys.exit(main())
