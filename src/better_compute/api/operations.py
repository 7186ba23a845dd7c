"""The routes as the method table names them: OpenAPI operation ids, and the verbs of a path.

OpenAPI operation ids are the method table's names (`reservations.create`), not FastAPI's own.

The client, the CLI (`better-compute api reservations.create`) and the documentation already call
each method by that name; a generated client or an API tester reading `openapi.json` now does too,
and renaming a route function changes nothing a caller sees. A route outside the table (`/healthz`)
keeps FastAPI's id.
"""

from __future__ import annotations

import re

from fastapi.routing import APIRoute
from fastapi.utils import generate_unique_id

from better_compute.wire.methods import METHODS

_NAMES: dict[tuple[str, str], str] = {(m.verb, m.path): m.name for m in METHODS.values()}
"""Method names by (verb, path template)."""


def _pattern(template: str) -> re.Pattern[str]:
    """The concrete paths of `template` (`/v1/pools/{id}`): each `{param}` is one path segment."""
    return re.compile(re.sub(r"\\\{\w+\\\}", "[^/]+", re.escape(template)) + "$")


_TEMPLATES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (_pattern(m.path), m.verb) for m in METHODS.values()
)
"""Each method's path template as a pattern of concrete paths, with its verb."""


def operation_id(route: APIRoute) -> str:
    """The method name of `route` (FastAPI's `generate_unique_id_function`)."""
    verbs = sorted(route.methods or ())
    if len(verbs) == 1 and (name := _NAMES.get((verbs[0], route.path))) is not None:
        return name
    return generate_unique_id(route)


def verbs_of(path: str) -> list[str]:
    """The verbs the method table takes on the concrete `path` (`/v1/pools/p1`: GET and PATCH)."""
    return sorted({verb for pattern, verb in _TEMPLATES if pattern.match(path)})


__all__ = ["operation_id", "verbs_of"]
