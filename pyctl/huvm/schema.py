"""Declarative schemas of huvm's TOML files (pydantic v2 models), and their errors as ``file:line: key: message``.

Every file the tools read (policy files, experiment files, simulated-node files) is one :class:`FileModel`
per table: each key with its type and range, unknown keys refused, no coercion (``"16"`` is not an integer,
``4.7`` not a count, ``true`` not a number). Sizes are integers or strings in :mod:`huvm.units`' grammar
(:func:`size`). Ranges come from the compiled ABI and simulator headers (``huvm.abi.lib``), never from copies.

:func:`validate` runs a model over a table of a :class:`huvm.tomlpos.TomlDoc` and turns the first refusal
(in document order) into the document's error: file, line, key path and a one-line message that names
the limit (``tenant[0].steps: 100000000000: must be <= 1000000``).
"""

from __future__ import annotations

import types
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter, ValidationError
from pydantic_core import ErrorDetails

from .errors import ConfigError
from .tomlpos import TomlDoc
from .units import format_size, parse_size


class FileModel(BaseModel):
    """A table of a TOML file: strict types, unknown keys refused."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


def size_value(v: Any) -> Any:
    """An integer stays; a string is read as a size (``"8GiB"``); anything else fails the int check."""
    return parse_size(v) if isinstance(v, str) else v


def count(lo: int, hi: int) -> Any:
    """An integer in lo..hi."""
    return Annotated[int, Field(ge=lo, le=hi)]


def size(lo: int, hi: int) -> Any:
    """A size in bytes in lo..hi: an integer, or a string such as ``"16GiB"``."""
    return Annotated[int, BeforeValidator(size_value), Field(ge=lo, le=hi)]


# ---- errors ----------------------------------------------------------------------------------------------

_EXPECTED = {
    "int_type": "an integer", "bool_type": "a boolean (true/false)", "string_type": "a string",
    "float_type": "a number", "list_type": "a list", "tuple_type": "a list", "dict_type": "a table",
    "model_type": "a table", "model_attributes_type": "a table", "finite_number": "a finite number",
}
_BOUNDS = {"less_than_equal": ("<=", "le"), "less_than": ("<", "lt"), "greater_than_equal": (">=", "ge"),
           "greater_than": (">", "gt")}


def _shown(value: Any) -> str:
    return repr(value) if isinstance(value, (str, dict, list)) else str(value).lower() \
        if isinstance(value, bool) else str(value)


def _strip(tp: Any) -> Any:
    """The type inside Annotated[...] and X | None."""
    while True:
        origin = get_origin(tp)
        if origin is Annotated:
            tp = get_args(tp)[0]
        elif origin in (Union, types.UnionType):
            args = [a for a in get_args(tp) if a is not type(None)]
            if len(args) != 1:
                return tp
            tp = args[0]
        else:
            return tp


def _model_at(model: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model class that holds the table at loc (a pydantic error location) under model."""
    tp: Any = model
    for part in loc:
        tp = _strip(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            field = tp.model_fields.get(str(part))
            if field is None:
                return None
            tp = field.annotation
        elif get_origin(tp) in (list, tuple):
            tp = get_args(tp)[0]
        elif get_origin(tp) is dict:
            tp = get_args(tp)[1]
        else:
            return None
    tp = _strip(tp)
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


def describe(err: ErrorDetails, model: type[BaseModel] | None = None) -> str:
    """One pydantic error as users read it: what was expected and what was written, or the limit."""
    kind = err["type"]
    ctx = err.get("ctx") or {}
    value = err.get("input")
    if kind == "missing":
        return "missing required key"
    if kind == "extra_forbidden":
        holder = _model_at(model, tuple(err["loc"][:-1])) if model is not None else None
        known = f" (known: {', '.join(holder.model_fields)})" if holder is not None else ""
        return f"unknown {'table' if isinstance(value, dict) else 'key'}{known}"
    if kind in _BOUNDS:
        op, name = _BOUNDS[kind]
        bound = ctx[name]
        if isinstance(bound, float) and bound.is_integer():
            bound = int(bound)
        if isinstance(value, str):  # a size as written: the limit as a size
            return f"{value}: must be {op} {format_size(int(bound))}"
        return f"{_shown(value)}: must be {op} {bound}"
    if kind in ("value_error", "assertion_error"):
        return str(ctx.get("error", err["msg"])).removeprefix("Value error, ")
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}, got {_shown(value)}"
    if kind == "literal_error":
        return f"expected one of {ctx.get('expected')}, got {_shown(value)}"
    if kind == "too_short":
        return f"needs at least {ctx.get('min_length')} entries"
    return str(err["msg"])


M = TypeVar("M", bound=BaseModel)


def first_error(doc: TomlDoc, exc: ValidationError, model: type[BaseModel] | None,
                path: tuple[str, ...]) -> ConfigError:
    """The first refusal of exc in document order, as the document's error."""
    errors = exc.errors(include_url=False)

    def where(e: ErrorDetails) -> tuple[int, ...]:
        line = doc.line(*path, *(str(p) for p in e["loc"]))
        return (line if line is not None else 1 << 30,)

    err = min(errors, key=where)
    return doc.error(describe(err, model), *path, *(str(p) for p in err["loc"]))


def validate(doc: TomlDoc, model: type[M], data: Any, *path: str) -> M:
    """model over data (the table of doc at path); the first refusal as doc's error (file, line, key)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise first_error(doc, exc, model, path) from None


def validate_value(doc: TomlDoc, kind: Any, value: Any, *path: str) -> Any:
    """One value of a type (e.g. :func:`count`) at path of doc; its refusal as doc's error."""
    try:
        return TypeAdapter(kind).validate_python(value, strict=True)
    except ValidationError as exc:
        raise first_error(doc, exc, None, path) from None
