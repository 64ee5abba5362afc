"""``python -m sessionledger.tools``: the ``sessionledger`` command line."""

import sys

from .cli import main

sys.exit(main())
