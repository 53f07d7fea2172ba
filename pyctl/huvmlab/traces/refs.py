"""Trace references as experiment files and the command line write them: ``bundled:NAME`` or a path."""

from __future__ import annotations

from pathlib import Path

from huvm.errors import ConfigError

from .gen import BUNDLED, bundled


def resolve(ref: str) -> Path:
    """A trace reference: "bundled:NAME" (shipped with huvm) or a path to a NAME.trace directory;
    ConfigError listing the bundled traces for an unknown NAME."""
    if ref.startswith("bundled:"):
        try:
            return bundled(ref.split(":", 1)[1])
        except FileNotFoundError as exc:
            known = ", ".join(s.name for s in BUNDLED)
            raise ConfigError(f"{exc} (bundled traces: {known})") from None
    return Path(ref)
