"""``python -m tools``: the ``sessionlog`` command line."""

import sys

from .cli import main

sys.exit(main())
