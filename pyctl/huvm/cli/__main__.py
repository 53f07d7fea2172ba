"""python -m huvm.cli: the same as huvmctl."""

from huvm.cli import run

run()
