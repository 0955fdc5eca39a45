import sys

from exedra_engine.cli import main

sys.exit(main())
