"""``python -m huvm.traces``: see huvm.traces.cli."""

import sys

from .cli import main

sys.exit(main())
