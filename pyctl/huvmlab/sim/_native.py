"""The C simulator inside huvm._huvm_cffi (driver/sim, compiled with the policy core)."""

from __future__ import annotations

from typing import Any

from .errors import SimUnavailable

try:
    from huvm._huvm_cffi import ffi as _ffi
    from huvm._huvm_cffi import lib as _lib
except ImportError as exc:  # pragma: no cover - depends on the build
    raise SimUnavailable(f"the huvm C extension is not built ({exc}); run `make venv` or "
                         "`cd pyctl && python setup.py build_ext --inplace`") from None

ffi: Any = _ffi
lib: Any = _lib
