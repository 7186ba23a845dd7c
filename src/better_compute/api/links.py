"""OpenAPI links: what one answer lets a client call next (a reservation's id -> get, cancel, release).

They document how operations chain and let stateful API testers (schemathesis' state machine) follow
them. Each link names its source answer and its target operation by method and path; `install` adds
them to the app's generated document, with the target's `operationId` looked up there, so a renamed
route function cannot leave a link dangling (a link to an operation the app lacks is an error).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI


@dataclass(frozen=True)
class Link:
    """From the `status` answer of `source` (method, path) to the operation `target` (method, path).

    `parameters` map a target parameter (`path.id`, `query.poolId`) to a runtime expression such as
    `$response.body#/id`; `body` gives request-body fields the same way (the rest is the caller's)."""

    name: str
    source: tuple[str, str]
    status: int
    target: tuple[str, str]
    parameters: dict[str, str] = field(default_factory=dict)
    body: dict[str, str] = field(default_factory=dict)


def _from(
    source: tuple[str, str], status: int, *links: tuple[str, tuple[str, str], dict[str, Any]]
) -> list[Link]:
    return [
        Link(name, source, status, target, spec.get("parameters", {}), spec.get("body", {}))
        for name, target, spec in links
    ]


ID = "$response.body#/id"
FIRST_ID = "$response.body#/items/0/id"

RESERVATION = ("GET", "/v1/reservations/{id}")
CANCEL = ("POST", "/v1/reservations/{id}/cancel")
RELEASE = ("POST", "/v1/reservations/{id}/release")
RESERVATIONS = ("GET", "/v1/reservations")
CREATE_RESERVATION = ("POST", "/v1/reservations")
POOL = ("GET", "/v1/pools/{id}")
UPDATE_POOL = ("PATCH", "/v1/pools/{id}")
OFFER = ("POST", "/v1/pools/{poolId}/offers")
ATOMS = ("GET", "/v1/atoms")
QUOTAS = ("GET", "/v1/quotas")
SET_QUOTA = ("PUT", "/v1/quotas")
POLICIES = ("GET", "/v1/policies")
CREATE_POLICY = ("POST", "/v1/policies")
CREATE_CREDENTIAL = ("POST", "/v1/credentials")
REVOKE = ("POST", "/v1/credentials/{id}/revoke")


def _reservation_links(body_id: str) -> tuple[tuple[str, tuple[str, str], dict[str, Any]], ...]:
    by_id = {"parameters": {"path.id": body_id}}
    return (
        ("GetReservation", RESERVATION, by_id),
        ("CancelReservation", CANCEL, by_id),
        ("ReleaseReservation", RELEASE, by_id),
    )


def _pool_links(pool_id: str) -> tuple[tuple[str, tuple[str, str], dict[str, Any]], ...]:
    return (
        ("GetPool", POOL, {"parameters": {"path.id": pool_id}}),
        ("UpdatePool", UPDATE_POOL, {"parameters": {"path.id": pool_id}, "body": {"id": pool_id}}),
        ("OfferPool", OFFER, {"parameters": {"path.poolId": pool_id}, "body": {"poolId": pool_id}}),
        ("ListPoolAtoms", ATOMS, {"parameters": {"query.pool": pool_id}}),
        ("CreateReservationInPool", CREATE_RESERVATION, {"body": {"poolId": pool_id}}),
        ("ListPoolReservations", RESERVATIONS, {"parameters": {"query.poolId": pool_id}}),
    )


def _tenant_pool_links(tenant: str, pool: str) -> tuple[tuple[str, tuple[str, str], dict[str, Any]], ...]:
    """Where a tenant now has quota in a pool: book there, or look at its rows."""
    return (
        ("CreateReservationWithQuota", CREATE_RESERVATION, {"body": {"poolId": pool, "tenantId": tenant}}),
        ("ListTenantQuotas", QUOTAS, {"parameters": {"query.tenantId": tenant, "query.poolId": pool}}),
    )


LINKS: list[Link] = [
    *_from(CREATE_RESERVATION, 201, *_reservation_links(ID)),
    *_from(CREATE_RESERVATION, 200, *_reservation_links(ID)),
    *_from(RESERVATION, 200, *_reservation_links(ID)[1:]),
    *_from(CANCEL, 200, *_reservation_links(ID)[::2]),
    *_from(RELEASE, 200, *_reservation_links(ID)[:2]),
    *_from(RESERVATIONS, 200, *_reservation_links(FIRST_ID)),
    *_from(("POST", "/v1/pools"), 201, *_pool_links(ID)),
    *_from(UPDATE_POOL, 200, *_pool_links(ID)),
    *_from(("GET", "/v1/pools"), 200, *_pool_links(FIRST_ID)),
    *_from(OFFER, 200, *_tenant_pool_links("$response.body#/tenantId", "$response.body#/poolId")),
    *_from(SET_QUOTA, 200, *_tenant_pool_links("$response.body#/tenantId", "$response.body#/poolId")),
    *_from(
        ("POST", "/v1/tenants"),
        201,
        ("CreateTenantCredential", CREATE_CREDENTIAL, {"body": {"tenantId": ID}}),
        ("SetTenantQuota", SET_QUOTA, {"body": {"tenantId": ID}}),
        ("CreateTenantPolicy", CREATE_POLICY, {"body": {"tenantId": ID}}),
        ("ListTenantQuotas", QUOTAS, {"parameters": {"query.tenantId": ID}}),
        ("ListTenantPolicies", POLICIES, {"parameters": {"query.tenantId": ID}}),
    ),
    *_from(CREATE_CREDENTIAL, 201, ("RevokeCredential", REVOKE, {"parameters": {"path.id": ID}})),
    *_from(
        CREATE_POLICY,
        201,
        ("ListTenantPolicies", POLICIES, {"parameters": {"query.tenantId": "$response.body#/tenantId"}}),
    ),
]
"""Every link of the API. A list answer links from its first item; a list of credentials has no link
to revoke its first item, which may be the caller's own."""


def add_links(document: dict[str, Any], links: list[Link] = LINKS) -> dict[str, Any]:
    """`document` with `links` added to its answers, in place; KeyError for an unknown operation."""
    paths = document["paths"]
    for link in links:
        method, path = link.source
        answer = paths[path][method.lower()]["responses"][str(link.status)]
        target_method, target_path = link.target
        target = paths[target_path][target_method.lower()]
        spec: dict[str, Any] = {"operationId": target["operationId"]}
        if link.parameters:
            spec["parameters"] = dict(link.parameters)
        if link.body:
            spec["requestBody"] = dict(link.body)
        answer.setdefault("links", {})[link.name] = spec
    return document


def install(app: FastAPI) -> None:
    """Make the app's OpenAPI document carry `LINKS` (FastAPI builds the document once and keeps it)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = add_links(generate())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


__all__ = ["LINKS", "Link", "add_links", "install"]
