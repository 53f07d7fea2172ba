"""python -m huvm: the same as huvmctl."""

from huvm.cli import run

run()
