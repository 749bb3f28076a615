"""``python -m actors.dashboard RUN_DIR``: the same as ``miles-dashboard``."""

import sys

from actors.dashboard.cli import main

sys.exit(main())
