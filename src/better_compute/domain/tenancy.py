"""Tenancy rules: valid ids and names, and who may see or change a tenant's pools, quotas and policies.

Two refusals are kept apart on purpose. Calling an admin-only method with a tenant token is FORBIDDEN:
the method is public knowledge. Acting on something another tenant holds is NOT_FOUND, exactly as if
it did not exist, so a tenant cannot probe which tenants, pools or policies exist.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from better_compute.domain.credentials import Principal
from better_compute.domain.errors import Forbidden, InvalidInput, NotFound

SLUG = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
"""Tenant and pool ids: they appear in URLs, atom ownership and bills, so they are plain and short."""

MAX_NAME = 200

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_UNSTORABLE = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff]")
"""Control characters, and lone surrogates (JSON can carry them, UTF-8 and the stores cannot)."""


def check_slug(value: object, field: str) -> str:
    if not isinstance(value, str) or not SLUG.fullmatch(value):
        raise InvalidInput(
            f"{field} must be 1-63 lowercase letters, digits or '-', starting with a letter or digit, "
            f"not {value!r}",
            {"field": field},
        )
    return value


def check_name(value: object, field: str, max_length: int = MAX_NAME) -> str:
    """A human-readable name: non-empty, single line, bounded; surrounding spaces are dropped."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"{field} must be a non-empty string", {"field": field})
    text = value.strip()
    if len(text) > max_length:
        raise InvalidInput(f"{field} must be at most {max_length} characters", {"field": field})
    if _CONTROL.search(text):
        raise InvalidInput(f"{field} must not contain control characters", {"field": field})
    if _UNSTORABLE.search(text):
        raise InvalidInput(f"{field} must be valid Unicode text (no lone surrogates)", {"field": field})
    return text


def check_ref(value: object, field: str) -> str:
    """An id that names something which must already exist: any text a store can hold and compare.

    Ids made elsewhere (fleet files) need not be slugs, so only what no id can contain is refused.
    """
    if not isinstance(value, str) or not value or len(value) > 256 or _UNSTORABLE.search(value):
        raise InvalidInput(f"{field} must be an id of 1-256 printable characters", {"field": field})
    return value


def pool_not_found(pool_id: str) -> NotFound:
    return NotFound(f"pool {pool_id} not found", {"poolId": pool_id})


def tenant_not_found(tenant_id: str) -> NotFound:
    return NotFound(f"tenant {tenant_id} not found", {"tenantId": tenant_id})


def sees_pool(
    principal: Principal, owner_tenant_id: str, quota_pool_ids: Collection[str], pool_id: str
) -> bool:
    """A tenant sees the pools it owns and those it has quota rows in; the admin sees every pool."""
    return principal.is_admin or principal.tenant_id == owner_tenant_id or pool_id in quota_pool_ids


def require_pool_owner(
    principal: Principal, pool_id: str, owner_tenant_id: str, visible: bool, action: str
) -> None:
    """Only the admin or the pool's owner may hand out access to a pool.

    A pool the caller cannot see is NOT_FOUND; one it sees through its own quota but does not own is
    FORBIDDEN (it knows the pool exists, it just may not share it).
    """
    if principal.is_admin or principal.tenant_id == owner_tenant_id:
        return
    if not visible:
        raise pool_not_found(pool_id)
    raise Forbidden(
        f"{action} in pool {pool_id} needs its owner's or a fleet-admin token",
        {"poolId": pool_id, "action": action},
    )


def tenant_scope(principal: Principal, requested: str | None) -> str | None:
    """The tenant a listing is narrowed to: a tenant token only ever lists its own rows.

    None means every tenant (an admin who named none). A tenant token naming another tenant is
    NOT_FOUND, the same answer as for a tenant that does not exist.
    """
    if principal.is_admin:
        return requested
    if requested is not None and requested != principal.tenant_id:
        raise tenant_not_found(requested)
    return principal.tenant_id
