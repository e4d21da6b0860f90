"""``python -m nexrl``: the ``nexrl`` command (``nexrl.cli.main``)."""

import sys

from nexrl.cli.main import main

sys.exit(main())
