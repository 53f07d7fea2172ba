"""Shared pytest helpers for every suite under tests/.

``require_or_skip(condition, reason)``: skip a test whose environment is missing (root, BPF, qemu, a GPU),
but fail instead when ``CI=true``, where the environment is supposed to be complete.
"""

from __future__ import annotations

import os

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def require_or_skip(condition: bool, reason: str) -> None:
    """Skip (locally) or fail (CI=true) when condition is false."""
    if condition:
        return
    if in_ci():
        pytest.fail(f"required in CI: {reason}")
    pytest.skip(reason)
