"""Errors of the simulated node, all :mod:`huvm.errors` types (so the CLI reports them uniformly).

* :class:`SimConfigError` -- a node configuration, tenant or trace is refused; ``field`` names it
  (``gpus[2].reserved_bytes``, ``topology[0][3]``, ``tenants[1].touch_chunk``) and ``record`` the offending
  record (op, touch or chunk index) when there is one. It is also a :class:`ValueError`.
* :class:`SimRunError` -- the run itself failed (a cudaMalloc that cannot fit, host memory exhausted).
* :class:`SimUnavailable` -- the C extension (policy core and simulator) is not built.
"""

from __future__ import annotations

import re
from typing import Any

from huvm.errors import HuvmError, InvalidValue


class SimConfigError(InvalidValue, ValueError):
    """A refused simulator input; ``field`` names it, ``record`` is the offending record index or None."""

    def __init__(self, message: str, *, field: str, record: int | None = None, **kw: Any) -> None:
        super().__init__(f"{field}: {message}" if field and not message.startswith(field) else message,
                         field=field, **kw)
        self.record = record
        #: the message without the field in front (for errors that name the field their own way)
        self.reason = message.removeprefix(f"{field}: ") if field else message

    @property
    def path(self) -> tuple[str, ...]:
        """The field as a key path: "gpus[0].memory_bytes" -> ("gpus", "0", "memory_bytes")."""
        return tuple(re.findall(r"[^.\[\]]+", self.field or ""))


class SimTraceError(SimConfigError):
    """A tenant's trace is inconsistent (a touch of a missing chunk, offsets out of order, ...)."""


class SimRunError(HuvmError):
    """The simulation stopped with an error (``field`` says what ran out)."""

    def __init__(self, message: str, *, field: str | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.field = field


class SimUnavailable(HuvmError):
    """huvm._huvm_cffi, which holds the simulator, is not built: build the extension."""
