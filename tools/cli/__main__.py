"""``python -m sessionledger.tools.cli``: the ``sessionledger`` command line."""

import sys

from . import main

sys.exit(main())
