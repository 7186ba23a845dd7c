"""Payloads built from a wire model's own fields, for tests that hold every model of `wire/` to a rule.

`sample(Model, extra=...)` is the JSON a server could send for `Model`: every field filled with a valid
value (optional ones too, so nested models are reached), by its wire name, and `extra` added to every
object that is a model. Dicts that are data (`attributes`, a quota per class) get nothing added.
"""

from __future__ import annotations

import importlib
import pkgutil
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel

import better_compute.wire

NOW = "2030-01-01T10:00:00Z"


def wire_models() -> Iterator[type[BaseModel]]:
    """Every model class defined in a module of `better_compute.wire`, once each."""
    seen: set[type[BaseModel]] = set()
    for info in pkgutil.iter_modules(better_compute.wire.__path__, "better_compute.wire."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, BaseModel)
                and value.__module__ == module.__name__
                and value not in seen
            ):
                seen.add(value)
                yield value


def sample(model: type[BaseModel], extra: Mapping[str, Any]) -> dict[str, Any]:
    """A valid JSON object for `model`, with `extra` in it and in every nested model's object."""
    body: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        body[field.alias or name] = _value(field.annotation, extra)
    return {**body, **extra}


def _value(annotation: Any, extra: Mapping[str, Any]) -> Any:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _value(args[0], extra)
    if origin in (typing.Union, types.UnionType):
        return _value(next(a for a in args if a is not type(None)), extra)
    if origin is typing.Literal:
        return args[0]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return sample(annotation, extra)
    if origin in (list, Sequence, tuple):
        return [_value(args[0], extra)]
    if origin is dict:
        return {_value(args[0], extra): _value(args[1], extra)}
    if annotation is Any:
        return "any"
    if annotation is str:
        return "x"
    if annotation is bool:
        return True
    if annotation in (int, float):
        return 1
    if annotation is datetime:
        return NOW
    raise AssertionError(f"no sample for {annotation!r}: teach tests/tripwires/wire_samples.py its type")
