"""python -m loom.torch verify LAUNCHER.py (cli.py)."""

import sys

from loom.torch.cli import main

sys.exit(main())
