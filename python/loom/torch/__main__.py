"""python -m loom.torch verify LAUNCHER.py, python -m loom.torch titan ... (cli.py)."""

import sys

from loom.torch.cli import main

sys.exit(main())
