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
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterator
from typing import Any

from fastapi import Request, Response
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from pydantic import AliasChoices, BaseModel

from better_compute.domain.errors import InvalidInput


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


class StrictQueryRoute(APIRoute):
    """An APIRoute whose GET refuses query parameters the route does not declare (INVALID_INPUT)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if self.methods is None or "GET" not in self.methods:
            return handler
        accepted = declared_query_names(self.dependant)
        known = frozenset(accepted) | frozenset(other_spellings(self.dependant))
        route = f"GET {self.path}"

        async def handle(request: Request) -> Response:
            if request.scope["query_string"]:
                for name in request.query_params:
                    if name not in known:
                        raise unknown_query_parameter(name, accepted, route)
            return await handler(request)

        return handle


__all__ = ["StrictQueryRoute", "declared_query_names", "other_spellings", "unknown_query_parameter"]
