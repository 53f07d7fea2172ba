"""Console entry point ``huvm-top``: imports the app inside the error handling, then runs it.

Importing the app imports huvm, which reads the ABI header (``$HUVM_ABI_HEADER`` or the installed one) and
loads its C extension; a bad header or a broken install must be one line on stderr like every other error,
not a traceback. :func:`huvm_top.app.main` does the rest (options, sources, the app).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import NoReturn


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    try:
        from huvm_top import app
    except Exception as exc:  # noqa: BLE001 - reported as one line below
        return _import_failed(exc, debug="--debug" in words)
    return app.main(words)


def _import_failed(exc: Exception, *, debug: bool) -> int:
    """One line for what stopped the import: huvm's own errors (a bad ABI header: file and line), a
    missing package or C extension, an unreadable file; anything else is a bug, worded as such."""
    first = str(exc).splitlines()[0] if str(exc) else ""
    known: tuple[type[BaseException], ...] = (ImportError, OSError)
    try:
        from huvm.errors import HuvmError

        known += (HuvmError,)
    except ImportError:
        pass
    if debug:
        import traceback

        traceback.print_exception(exc)
    if isinstance(exc, known):
        sys.stderr.write(f"huvm-top: error: {first or type(exc).__name__}\n")
    else:
        sys.stderr.write(f"huvm-top: error: internal error: {type(exc).__name__}{': ' + first if first else ''} "
                         f"(a huvm bug: please report it with the command line"
                         f"{'' if debug else '; --debug prints the traceback'})\n")
    return 1


def run() -> NoReturn:
    sys.exit(main())


if __name__ == "__main__":
    run()
