"""``python -m nexrl``: the ``nexrl`` command (``nexrl.driver.cli.main``)."""

import sys

from nexrl.driver.cli.main import main

if __name__ == "__main__":  # (a spawned worker re-imports the parent's main module)
    sys.exit(main())
