"""argparse types for counts, seconds, numbers and ports, in :mod:`huvm.units`' grammar and with their ranges.

A bad value is refused by argparse itself, before anything runs, as one line naming the flag::

    huvmctl: error: argument --count: must be 1..1000000, got -1

(the flag comes from argparse; the message from :class:`argparse.ArgumentTypeError` raised here).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable

from .units import parse_count

_SECONDS_RE = re.compile(r"^-?[0-9]+(\.[0-9]+)?$")


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def count(lo: int, hi: int) -> Callable[[str], int]:
    """A decimal integer in lo..hi."""

    def parse(text: str) -> int:
        try:
            value = parse_count(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer (decimal digits), got {text!r}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be {lo}..{hi}, got {value}")
        return value

    parse.__name__ = "count"
    return parse


def _decimal(lo: float, hi: float, what: str, example: str, name: str) -> Callable[[str], float]:
    """A decimal number more than lo and at most hi; no nan, inf or exponent."""

    def parse(text: str) -> float:
        if not _SECONDS_RE.match(text.strip()):
            raise argparse.ArgumentTypeError(f"expected a number of {what} such as {example}, got {text!r}")
        value = float(text)
        if not lo < value <= hi:
            raise argparse.ArgumentTypeError(f"must be more than {_num(lo)} and at most {_num(hi)} {what}, got {text}")
        return value

    parse.__name__ = name
    return parse


def seconds(hi: float, *, lo: float = 0.0) -> Callable[[str], float]:
    """A decimal number of seconds, more than lo (0 by default) and at most hi; no nan, inf or exponent."""
    return _decimal(lo, hi, "seconds", "1 or 0.5", "seconds")


def number(lo: float, hi: float, what: str) -> Callable[[str], float]:
    """A decimal number (e.g. GiB of memory), more than lo and at most hi."""
    return _decimal(lo, hi, what, "16 or 0.5", "number")


#: a TCP port; 0 asks the kernel for a free one
port = count(0, 65535)
