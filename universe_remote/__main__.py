"""``python -m universe_remote``: the same as the ``universe-remote`` command."""

import sys

from .cli import main

sys.exit(main())
