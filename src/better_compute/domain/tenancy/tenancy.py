"""Tenancy rules: valid ids and names, and who may see or change a tenant's pools, quotas and policies.

Two refusals are kept apart on purpose. Calling an admin-only method with a tenant token is FORBIDDEN:
the method is public knowledge. Acting on something another tenant holds is NOT_FOUND, exactly as if
it did not exist, so a tenant cannot probe which tenants, pools or policies exist.

The visibility rule for tenant ids lives here and nowhere else (docs/api.md#conventions): a tenant
token that names another tenant gets an answer that does not depend on whether that tenant exists.
Methods are of two kinds, and each kind has its function:

- `tenant_scope`, for a method that acts for a tenant (books for it, lists its rows, reads it): a
  tenant token naming another tenant is NOT_FOUND, "tenant <id> not found".
- `check_grantee`, for a method whose purpose is to name another tenant (a pool's owner granting
  quota): the owner is answered alike whether or not that tenant exists; only the admin is told.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Collection, Sequence
from typing import Protocol, TypeVar

from better_compute.domain.kernel.errors import (
    AlreadyExists,
    Forbidden,
    InvalidInput,
    InvalidState,
    NotFound,
    listed,
)
from better_compute.domain.tenancy.credentials import Principal, RecalledPrincipal

SLUG = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
"""Tenant and pool ids: they appear in URLs, atom ownership and bills, so they are plain and short."""

CLASS_NAME = re.compile(r"[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?")
"""Device and priority class names (Kubernetes' own rule for such names, capped at 63): they are ids in
URLs and are named in workloads and quotas, and profiles such as `3g.40gb` need the dot."""

MAX_CLASS_NAME = 63

MAX_NAME = 200
MAX_REF = 256
"""The longest id a request may name (`check_ref`): ids made here are far shorter."""

_SHOWN = 64
"""How much of a refused value a message repeats: enough to find it, never megabytes."""

_WHY_CATEGORY = {
    "Cc": "a control character",
    "Cf": "a format character: invisible, it can change how the text around it displays",
    "Cs": "a lone surrogate, which is not text: UTF-8 and the stores cannot hold it",
    "Zl": "a line separator: names and ids are a single line",
    "Zp": "a paragraph separator: names and ids are a single line",
}
_NONCHARACTER = "a Unicode non-character, which is reserved never to appear in text"


def _is_noncharacter(code: int) -> bool:
    """U+FDD0 to U+FDEF and the last two code points of every plane (U+FFFE, U+FFFF, U+1FFFE, ...)."""
    return 0xFDD0 <= code <= 0xFDEF or code & 0xFFFE == 0xFFFE


def forbidden_character(text: str) -> tuple[int, str, str] | None:
    """The first character no name or id may hold, as (position, `U+XXXX`, why), or None.

    Names and ids are shown to people (listings, bills, audit trails) and compared by machines, so
    they must read as what they are: control and format characters (U+202E turns text around,
    U+200B and U+FEFF are invisible, so two names that look alike differ), line and paragraph
    separators, lone surrogates and non-characters are refused wherever a name or id is taken. Other
    text, accents and scripts included, is welcome.
    """
    if text.isprintable():  # every character refused here is unprintable: the common case is one pass
        return None
    for position, char in enumerate(text):
        code = ord(char)
        why = _WHY_CATEGORY.get(unicodedata.category(char))
        if why is None and _is_noncharacter(code):
            why = _NONCHARACTER
        if why is not None:
            return position, f"U+{code:04X}", why
    return None


def check_text(text: str, field: str) -> str:
    """Refuse `text` when it holds a character no name or id may hold, saying which and why."""
    found = forbidden_character(text)
    if found is not None:
        position, char, why = found
        raise InvalidInput(
            f"{field} must not contain {char} ({why})",
            {"field": field, "character": char, "position": position},
        )
    return text


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else f"{text[:_SHOWN]}... ({len(text)} characters)"


def check_slug(value: object, field: str) -> str:
    if isinstance(value, str) and len(value) <= MAX_REF:
        check_text(value, field)
    if not isinstance(value, str) or not SLUG.fullmatch(value):
        raise InvalidInput(
            f"{field} must be 1-63 lowercase letters, digits or '-', starting with a letter or digit, "
            f"not {_shown(value)}",
            {"field": field},
        )
    return value


def check_class_name(value: object, field: str = "name") -> str:
    """A device or priority class name: 1-63 lowercase letters, digits, '-' or '.', starting and
    ending with a letter or digit (`h100-80gb-sxm`, `h100-3g.40gb`, `standard`)."""
    if isinstance(value, str) and len(value) <= MAX_REF:
        check_text(value, field)
    if not isinstance(value, str) or not CLASS_NAME.fullmatch(value):
        raise InvalidInput(
            f"{field} must be 1-{MAX_CLASS_NAME} lowercase letters, digits, '-' or '.', starting and"
            f" ending with a letter or digit, not {_shown(value)}",
            {"field": field, "max": MAX_CLASS_NAME},
        )
    return value


def check_name(value: object, field: str, max_length: int = MAX_NAME) -> str:
    """A human-readable name: non-empty, single line, bounded; surrounding spaces are dropped."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"{field} must be a non-empty string", {"field": field})
    text = value.strip()
    if len(text) > max_length:
        raise InvalidInput(f"{field} must be at most {max_length} characters", {"field": field})
    return check_text(text, field)


def check_ref(value: object, field: str) -> str:
    """An id that names something which must already exist: any text a store can hold and compare.

    Ids made elsewhere (fleet files) need not be slugs, so only what no id can contain is refused:
    the characters `forbidden_character` names, and more than MAX_REF characters.
    """
    if not isinstance(value, str) or not value or len(value) > MAX_REF:
        raise InvalidInput(f"{field} must be an id of 1-{MAX_REF} printable characters", {"field": field})
    return check_text(value, field)


def pool_not_found(pool_id: str) -> NotFound:
    return NotFound(f"pool {pool_id} not found", {"poolId": pool_id})


def require_pool_user(tenant_id: str, pool_id: str, owner_tenant_id: str, offered: bool) -> None:
    """Work done for a tenant goes in a pool that tenant may use: one it owns, or one it was offered
    (a quota row above 0). The admin acts for a tenant but does not widen what the tenant may use,
    so an admin's request naming a pool its tenant cannot use is refused (INVALID_INPUT), as the
    tenant's own would be."""
    if tenant_id == owner_tenant_id or offered:
        return
    raise InvalidInput(
        f"tenant {tenant_id} cannot use pool {pool_id}: it neither owns the pool nor has quota there;"
        f" offer the pool to {tenant_id} first (pools offer), or name a pool it may use",
        {"field": "poolId", "poolId": pool_id, "tenantId": tenant_id},
    )


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


def tenant_scope(principal: Principal | RecalledPrincipal, named: str | None) -> str | None:
    """The tenant a call acts for, given the tenant it names (None: it names none).

    A tenant token acts for its own tenant only: naming none means its own, naming another is
    NOT_FOUND, "tenant <id> not found", before anything is read, so the answer is the same whether
    that tenant exists or not and no answer tells a tenant which tenant ids are real. The admin acts
    for the tenant it names, or for every tenant (None) when it names none. Every method that acts
    for a tenant decides through here: `reservations.create` books for it, `reservations.list`,
    `quotas.list`, `policies.list`, `tenants.list` and `credentials.list` are narrowed to it, and
    `service.tenancy.tenants.get` reads it.
    """
    if principal.is_admin:
        return named
    if named is not None and named != principal.tenant_id:
        raise tenant_not_found(named)
    assert principal.tenant_id is not None, "a tenant token always acts for a tenant"
    return principal.tenant_id


def check_grantee(principal: Principal, tenant_id: str, *, exists: bool) -> None:
    """The tenant a pool's owner or the admin grants quota to (`quotas.set`, `pools.offer`).

    Naming another tenant is what these methods are for, so `tenant_scope` does not apply; instead
    an owner's grant is kept and answered alike whether or not `tenant_id` exists (the rows take
    effect once the admin creates that tenant), so that granting cannot probe tenant ids. The admin,
    who may list every tenant anyway, is told NOT_FOUND for a tenant that does not exist.
    """
    if principal.is_admin and not exists:
        raise tenant_not_found(tenant_id)


def check_tenant_deletable(tenant_id: str, owned_pools: Sequence[str], live: Sequence[str]) -> None:
    """A tenant may be deleted only when nothing would be left without it: it owns no pool (a pool
    cannot change owner, so delete the pool first) and holds no reservation that is not over
    (`live`: scheduled or active; cancel or release them first). Its past reservations stay, so its
    history and bills keep naming it."""
    if owned_pools:
        raise InvalidState(
            f"tenant {tenant_id} owns {len(owned_pools)} pool(s) ({listed(owned_pools)}); "
            "delete them first (pools.delete)",
            {"tenantId": tenant_id, "pools": list(owned_pools[:20])},
        )
    if live:
        raise InvalidState(
            f"tenant {tenant_id} holds reservations that are not over ({listed(live)}); "
            "cancel or release them first",
            {"tenantId": tenant_id, "reservations": list(live[:20])},
        )


def tenant_id_taken(tenant_id: str, deleted: bool) -> AlreadyExists:
    """CONFLICT for an id already taken; a deleted tenant's id stays taken, and the message says so."""
    if deleted:
        return AlreadyExists(
            f"tenant {tenant_id} was deleted, and a tenant id is never reused; choose another id",
            {"tenantId": tenant_id, "deleted": True},
        )
    return AlreadyExists(f"tenant {tenant_id} already exists", {"tenantId": tenant_id})


class _HasClass(Protocol):
    @property
    def cls(self) -> str: ...


QuotaRow = TypeVar("QuotaRow", bound=_HasClass)


def granted_rows_shown(
    principal: Principal, rows: Sequence[QuotaRow], written: Collection[str]
) -> list[QuotaRow]:
    """What an answer to a quota grant shows: the admin every row the tenant has in the pool, a
    pool's owner only the classes it just wrote. Other rows (the admin's) exist only for tenants that
    exist, so showing them to an owner would tell it which tenant ids are real."""
    return list(rows) if principal.is_admin else [r for r in rows if r.cls in written]
