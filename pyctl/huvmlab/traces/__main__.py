"""``python -m huvmlab.traces``: huvmlab.traces.cli (``huvmctl trace large|bundled`` runs it)."""

import sys

from .cli import main

sys.exit(main())
