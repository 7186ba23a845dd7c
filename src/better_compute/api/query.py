"""Query parameters a route does not take are refused, not ignored.

An ignored parameter fails silently and widely: `GET /v1/atoms?poolId=p1` (the parameter is `pool`)
would answer every atom of every pool, and the caller would take it for the pool's. A route that
lists query parameters with a Pydantic model already refuses unknown ones (the models forbid extra
fields), but a route that declares them one by one does not, and the two would answer differently.

`StrictQueryRoute` refuses them all the same way, before the route runs: the names it accepts are
read from the route's own declaration (its parameters and those of its dependencies, a model's
fields by their wire names), the same ones OpenAPI documents, so no list is kept by hand. A model's
field may also take other spellings (`AliasChoices`: `subject_type` beside `subjectType`); those are
accepted too, though only the wire name is documented and offered. Only GET
routes check: other methods take their input as a JSON body, whose models refuse unknown fields.

A parameter given twice is refused too, on every route and verb (`limit=1&limit=1000` would be read
as its last value, the first dropped without a word), unless it is a list, which is sent by repeating
it (`attr=a=b&attr=c=d`); two spellings of one field are that field twice.

The same route class reads each route's JSON body through `api.bodies` (UTF-8, each key once) before
FastAPI decodes it, so every route with a body refuses the same bodies the same way.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from typing import Annotated, Any, Union, get_args, get_origin

from fastapi import Request, Response
from fastapi.dependencies.models import Dependant
from fastapi.params import Form
from fastapi.routing import APIRoute
from pydantic import AliasChoices, BaseModel
from starlette.datastructures import QueryParams

from better_compute.api.bodies import json_body
from better_compute.domain.kernel.errors import InvalidInput


def declared_query_names(dependant: Dependant) -> tuple[str, ...]:
    """The query parameter names a route takes, in declaration order, by their wire names."""
    names: dict[str, None] = {}
    for field in _query_fields(dependant):
        annotation = field.field_info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            for name, info in annotation.model_fields.items():
                names[info.alias or name] = None
        else:
            names[field.alias] = None
    return tuple(names)


def other_spellings(dependant: Dependant) -> tuple[str, ...]:
    """The other names a model's query parameter takes besides its wire name (`subject_type` beside
    `subjectType`, from the field's `AliasChoices`): accepted, but neither documented nor offered."""
    names: dict[str, None] = {}
    for field in _query_fields(dependant):
        annotation = field.field_info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            for info in annotation.model_fields.values():
                if isinstance(info.validation_alias, AliasChoices):
                    names.update(
                        dict.fromkeys(c for c in info.validation_alias.choices if isinstance(c, str))
                    )
    return tuple(names)


def _is_list(annotation: Any) -> bool:
    """Whether a parameter of this type is a list (sent by repeating it), optional or not."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _is_list(get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        return any(_is_list(a) for a in get_args(annotation) if a is not type(None))
    return isinstance(origin, type) and issubclass(origin, (list, tuple, set, frozenset, Sequence))


def query_fields(dependant: Dependant) -> tuple[dict[str, str], frozenset[str]]:
    """Every name a route's query parameters take (other spellings included), each with the wire
    name of its field, and the wire names of the list parameters (which repeat)."""
    fields: dict[str, str] = {}
    lists: set[str] = set()
    for field in _query_fields(dependant):
        annotation = field.field_info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            for name, info in annotation.model_fields.items():
                wire = info.alias or name
                fields[wire] = wire
                if isinstance(info.validation_alias, AliasChoices):
                    for choice in info.validation_alias.choices:
                        if isinstance(choice, str):
                            fields.setdefault(choice, wire)
                if _is_list(info.annotation):
                    lists.add(wire)
        else:
            fields[field.alias] = field.alias
            if _is_list(annotation):
                lists.add(field.alias)
    return fields, frozenset(lists)


def _query_fields(dependant: Dependant) -> Iterator[Any]:
    yield from dependant.query_params
    for dependency in dependant.dependencies:
        yield from _query_fields(dependency)


def unknown_query_parameter(name: str, accepted: tuple[str, ...], route: str) -> InvalidInput:
    """The refusal of query parameter `name`, listing what the route takes instead."""
    if not accepted:
        use = f"{route} takes no query parameters"
    elif len(accepted) == 1:
        use = f"use {accepted[0]}"
    else:
        use = f"use {', '.join(accepted[:-1])} or {accepted[-1]}"
    return InvalidInput(
        f"{name}: unknown query parameter; {use}", {"field": name, "accepted": list(accepted)}
    )


def repeated_query_parameter(name: str) -> InvalidInput:
    """The refusal of a parameter that is not a list, given more than once."""
    return InvalidInput(f"{name}: repeated query parameter; give it once", {"field": name})


def check_repeats(params: QueryParams, fields: Mapping[str, str], lists: frozenset[str]) -> None:
    """Refuse a parameter given twice (by any of its spellings, `fields`) unless it is a list."""
    seen: set[str] = set()
    for name, _ in params.multi_items():
        field = fields.get(name, name)
        if field in seen and field not in lists:
            raise repeated_query_parameter(field)
        seen.add(field)


class StrictQueryRoute(APIRoute):
    """An APIRoute that refuses query parameters a GET does not declare and any repeated one
    (INVALID_INPUT), and reads its JSON body strictly (`api.bodies`)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        refuses_unknown = self.methods is not None and "GET" in self.methods
        accepted = declared_query_names(self.dependant)
        fields, lists = query_fields(self.dependant)
        route = f"GET {self.path}"
        reads_json = self.body_field is not None and not isinstance(self.body_field.field_info, Form)

        async def handle(request: Request) -> Response:
            if request.scope["query_string"]:
                params = request.query_params
                if refuses_unknown:
                    for name in params:
                        if name not in fields:
                            raise unknown_query_parameter(name, accepted, route)
                check_repeats(params, fields, lists)
            if reads_json:
                # Refuses what FastAPI's own decoding would take (UTF-16, a key twice); FastAPI
                # then decodes the same bytes (kept by the request) as it does for any route.
                json_body(request.headers.get("content-type"), await request.body())
            return await handler(request)

        return handle


__all__ = [
    "StrictQueryRoute",
    "check_repeats",
    "declared_query_names",
    "other_spellings",
    "query_fields",
    "repeated_query_parameter",
    "unknown_query_parameter",
]
