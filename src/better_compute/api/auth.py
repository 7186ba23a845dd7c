"""Who is calling: the bearer-token dependency every `/v1` route takes.

Routes write `principal: PrincipalDep` to get the caller, or list `AUTHENTICATED` in a router's
`dependencies` when they only need the call to be authenticated. `/healthz`, `/openapi.json` and
`/docs` take neither and stay open; `/metrics` checks for a fleet-admin token itself when the server is
told to (`api/metrics.py`).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from better_compute.api.deps import services_of
from better_compute.domain.tenancy.credentials import Principal, bearer_token
from better_compute.service.tenancy import credentials

_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="bearer",
    description="A better-compute API token (`bc_...`), for one tenant or for the fleet admin.",
)


async def get_principal(
    request: Request,
    _scheme: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)] = None,
) -> Principal:
    """The principal behind the request's bearer token; UNAUTHENTICATED (401) when there is none.

    The header is parsed here rather than by `HTTPBearer` so that each refusal says what was wrong
    (missing, not Bearer, malformed, unknown, revoked); `_scheme` only documents the scheme in OpenAPI.
    The look-up is one indexed query, run on the event loop: a hop to a worker thread for it costs
    more than the query itself.
    """
    store = services_of(request).store
    return credentials.authenticate(store, bearer_token(request.headers.get("authorization")))


PrincipalDep = Annotated[Principal, Depends(get_principal)]
AUTHENTICATED = [Depends(get_principal)]
"""Router-level dependencies that demand a valid token (the principal is computed once per request)."""

__all__ = ["AUTHENTICATED", "Principal", "PrincipalDep", "get_principal"]
