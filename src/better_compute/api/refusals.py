"""The OpenAPI document says how each operation refuses: the statuses it can really answer, as `ErrorBody`.

FastAPI documents a `422` with its own `HTTPValidationError` on every operation that takes input,
but this API answers bad input `400 INVALID_INPUT` in the one refusal shape (`api/errors.py`), and
a generated client or API tester reading `openapi.json` would expect what is written there. So the
`422` goes, and each operation lists the refusals it can answer, each status with the codes behind
it, derived rather than written per route:

- 400 always: every request is checked for NUL characters, and input against its model;
- 401, 403, 404 and 409 when the route reaches an error of that code (`api.reachable_errors` follows
  the route's function, its dependencies and its route class through the source), 404 also when the
  path names something; 409 also on every write, since a write may lose a race the storage layer
  refuses (`concurrent_change`, `generation_mismatch`), and never on a read or a POST that writes
  nothing unless the route reaches a 409 by name;
- 408, 413 and 415 when the operation takes a body (`api.limits`: a stalled body, one over the cap,
  one in a `Content-Encoding` other than identity);
- 503 with `Retry-After` when the route reads the store (it cannot while the database is down);
- a `default` for what no route chooses (405 on a verb the path does not take, 500).

There is no 429: the API has no rate limit of its own (`endpoints.invoke` relays its model server's
answers, a 429 among them, and says so itself). Node-signed operations (`nodes.report`,
`nodes.spec`) get the `BC-*` headers as parameters and the `nodeSignature` security scheme.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute, iter_route_contexts
from starlette.routing import BaseRoute

from better_compute.api.errors import STATUS
from better_compute.api.reachable_errors import graph, qualified
from better_compute.domain.fleet.node_reports import (
    CLOCK_SKEW,
    HEADER_NODE,
    HEADER_SEQUENCE,
    HEADER_SIGNATURE,
    HEADER_TIMESTAMP,
    SCHEME,
)
from better_compute.wire import codes
from better_compute.wire.common import ErrorBody
from better_compute.wire.methods import METHODS

_REF = "#/components/schemas/ErrorBody"
_FASTAPI_ONLY = ("HTTPValidationError", "ValidationError")
_SIGNED = "better_compute.api.signed.signed_request"
_BEARER = "better_compute.api.auth.get_principal"
_STORE = (
    "better_compute.api.deps.services_of",
    "better_compute.api.deps.get_store",
    "better_compute.api.deps.get_services",
)
_CONFLICTS = (codes.CONFLICT, codes.INVALID_STATE, codes.QUOTA_EXCEEDED, codes.INSUFFICIENT_CAPACITY)
_WRITES_NOTHING = {(m.verb, m.path) for m in METHODS.values() if m.writes_nothing}

SIGNATURE_SCHEME = "nodeSignature"
SIGNATURE_DESCRIPTION = (
    f"A node's Ed25519 signature (`{HEADER_SIGNATURE}`, standard base64) over the canonical bytes:"
    f" these seven lines joined by `\\n`, UTF-8, no trailing newline: `{SCHEME}`, the HTTP method"
    " (upper case), the request target as sent (path, and `?` with the query string when there is"
    f" one), `{HEADER_NODE}`, `{HEADER_TIMESTAMP}`, `{HEADER_SEQUENCE}`, and the lowercase hex SHA-256"
    " of the body (of no bytes for a GET). The key is the one the node registered when it joined."
    f" Refused with 401 UNAUTHENTICATED: a header missing or malformed, a signature that does not"
    f" verify, a timestamp more than {int(CLOCK_SKEW.total_seconds())} seconds from the server's"
    " clock, a sequence not greater than the last the server accepted from the node (a replay)."
    " docs/node-auth.md."
)
SIGNED_HEADERS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    (HEADER_NODE, "The node's id: the node that signed.", {"type": "string", "maxLength": 63}),
    (
        HEADER_TIMESTAMP,
        "When the request was signed, in whole seconds since the Unix epoch (UTC).",
        {"type": "string", "pattern": "^[0-9]+$"},
    ),
    (
        HEADER_SEQUENCE,
        "A decimal integer larger than the last one the server accepted from this node.",
        {"type": "string", "pattern": "^[0-9]+$"},
    ),
    (
        HEADER_SIGNATURE,
        "The Ed25519 signature of the canonical bytes, in standard base64 (see the security scheme"
        f" `{SIGNATURE_SCHEME}`).",
        {"type": "string", "format": "byte"},
    ),
)


@dataclass(frozen=True)
class Refusals:
    """What one operation can answer besides its success: error codes by status, and how it signs."""

    codes_by_status: dict[int, tuple[str, ...]]
    signed: bool
    bearer: bool


def _calls(dependant: Dependant) -> Iterator[str]:
    for dependency in dependant.dependencies:
        if dependency.call is not None and hasattr(dependency.call, "__qualname__"):
            yield qualified(dependency.call)
        yield from _calls(dependency)


def _roots(route: Any, declared: type[object]) -> list[str]:
    handlers = [
        f"{cls.__module__}.{cls.__qualname__}.get_route_handler"
        for cls in declared.__mro__
        if cls.__module__.startswith("better_compute.") and "get_route_handler" in vars(cls)
    ]
    return [qualified(route.endpoint), *_calls(route.dependant), *handlers]


def refusals_of(route: Any, declared: type[object], verb: str, takes_body: bool) -> Refusals:
    """The statuses `route` (one `verb` of it; an `APIRoute` as the app serves it, the router's
    dependencies and prefix included, declared as a `declared`) can refuse with, each with the codes
    behind it."""
    source = graph()
    roots = _roots(route, declared)
    reached = source.reachable(roots)
    found = {error.code for error in source.errors(roots)}
    found.add(codes.INVALID_INPUT)
    if route.param_convertors:
        found.add(codes.NOT_FOUND)
    if verb != "GET" and (verb, route.path_format) not in _WRITES_NOTHING:
        found.add(codes.CONFLICT)
    if any(name in reached for name in _STORE):
        found.add(codes.UNAVAILABLE)
    by_status: dict[int, list[str]] = {}
    for code in sorted(found):
        by_status.setdefault(STATUS.get(code, 400), []).append(code)
    if takes_body:
        for status in (408, 413, 415):
            by_status[status] = [codes.INVALID_INPUT]
    by_status.pop(500, None)
    return Refusals(
        {status: tuple(found_codes) for status, found_codes in sorted(by_status.items())},
        signed=_SIGNED in reached,
        bearer=_BEARER in reached,
    )


_WHY: dict[int, str] = {
    400: "a parameter or the body is malformed, unknown or out of its limits",
    401: "no valid credentials: a missing, malformed, unknown or revoked token (`WWW-Authenticate:"
    " Bearer`), or a node signature that is missing or does not verify",
    403: "the credentials may not do this: a tenant token where the fleet admin's is needed, a pool"
    " the caller does not own, a policy's limit",
    404: "something the request names does not exist, or is not the caller's to see",
    408: "the request body stalled: no part of it arrived within the server's timeout",
    409: "the request conflicts with the current state (details.reason says how: a stale `generation`"
    " to read again, a name taken, requests racing)",
    413: "the request body is larger than the server's limit (`details.limit`)",
    415: "a `Content-Encoding` other than identity (`Accept-Encoding: identity` says what is taken)",
    503: "the database cannot be reached or written; nothing was applied; send it again after"
    " `Retry-After` seconds",
}

_HEADERS: dict[int, dict[str, Any]] = {
    401: {"WWW-Authenticate": {"schema": {"type": "string"}, "description": "`Bearer`."}},
    415: {"Accept-Encoding": {"schema": {"type": "string"}, "description": "`identity`."}},
    503: {"Retry-After": {"schema": {"type": "integer"}, "description": "Seconds to wait before resending."}},
}


def _answer(status: int, found: tuple[str, ...]) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "description": f"{' / '.join(found)}: {_WHY.get(status, 'refused')}. docs/api.md#errors.",
        "content": {"application/json": {"schema": {"$ref": _REF}}},
    }
    if status in _HEADERS:
        answer["headers"] = _HEADERS[status]
    return answer


_DEFAULT = _answer(500, ("METHOD_NOT_ALLOWED", "INTERNAL")) | {
    "description": "Any other refusal, in the same shape: 405 on a verb the path does not take (with"
    " `Allow`), 500 INTERNAL when the server failed (nothing was applied). docs/api.md#errors."
}


def _sign(operation: dict[str, Any], refusals: Refusals) -> None:
    """The BC-* headers as parameters (required where a signature is the only way in), and the
    operation's security: the node signature, or a bearer token where either is taken."""
    required = not refusals.bearer
    parameters = operation.setdefault("parameters", [])
    present = {(p.get("in"), p.get("name")) for p in parameters}
    for name, description, schema in SIGNED_HEADERS:
        if ("header", name) in present:
            continue
        parameters.append(
            {
                "in": "header",
                "name": name,
                "required": required,
                "description": description + ("" if required else " Only when a node signs the request."),
                "schema": schema,
            }
        )
    operation["security"] = [{SIGNATURE_SCHEME: []}] + ([{"bearer": []}] if refusals.bearer else [])


def document_refusals(document: dict[str, Any], routes: list[BaseRoute]) -> dict[str, Any]:
    """`document` with FastAPI's 422 replaced by each operation's own refusals, in place; `routes`
    are the app's (`app.routes`), which the document was made of."""
    components = document.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    error_schema = ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
    for name, definition in error_schema.pop("$defs", {}).items():
        schemas.setdefault(name, definition)
    schemas["ErrorBody"] = error_schema
    by_operation = {
        (context.path_format, verb.lower()): context
        for context in iter_route_contexts(routes)
        if isinstance(context.original_route, APIRoute) and context.include_in_schema
        for verb in context.methods or ()
    }
    signed_anywhere = False
    for path, path_item in document.get("paths", {}).items():
        for verb, operation in path_item.items():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            responses = operation["responses"]
            responses.pop("422", None)
            route = by_operation.get((path, verb))
            if route is None:
                responses.setdefault("400", _answer(400, (codes.INVALID_INPUT,)))
            else:
                declared = type(route.original_route)
                refusals = refusals_of(route, declared, verb.upper(), "requestBody" in operation)
                for status, found in refusals.codes_by_status.items():
                    responses.setdefault(str(status), _answer(status, found))
                if refusals.signed:
                    signed_anywhere = True
                    _sign(operation, refusals)
            responses.setdefault("default", _DEFAULT)
    if signed_anywhere:
        components.setdefault("securitySchemes", {})[SIGNATURE_SCHEME] = {
            "type": "apiKey",
            "in": "header",
            "name": HEADER_SIGNATURE,
            "description": SIGNATURE_DESCRIPTION,
        }
    text = str(document.get("paths", {}))
    for name in _FASTAPI_ONLY:
        if f"/{name}'" not in text:
            schemas.pop(name, None)
    return document


def install(app: FastAPI) -> None:
    """Make the app's OpenAPI document say how it refuses (FastAPI builds it once and keeps it)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = document_refusals(generate(), list(app.routes))
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
