"""Names and ids: one rule for what text they may hold, wherever they are taken; and the one rule for
which tenant a call acts for."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from better_compute.domain.kernel.errors import InvalidInput, NotFound
from better_compute.domain.ops.fleet import parse_fleet
from better_compute.domain.tenancy.credentials import Principal
from better_compute.domain.tenancy.tenancy import (
    check_grantee,
    check_name,
    check_ref,
    check_slug,
    forbidden_character,
    tenant_scope,
)
from tests.builders import small_fleet

SPOOFING = [
    ("\u202e", "U+202E", "format character"),  # right-to-left override: text reads backwards
    ("\u200b", "U+200B", "format character"),  # zero-width space: two names that look alike differ
    ("\ufeff", "U+FEFF", "format character"),  # zero-width no-break space (byte order mark)
    ("\u2066", "U+2066", "format character"),  # left-to-right isolate
    ("\u00ad", "U+00AD", "format character"),  # soft hyphen
    ("\uffff", "U+FFFF", "non-character"),
    ("\ufffe", "U+FFFE", "non-character"),
    ("\ufdd0", "U+FDD0", "non-character"),
    ("\ufdef", "U+FDEF", "non-character"),
    ("\U0001fffe", "U+1FFFE", "non-character"),
    ("\U0010ffff", "U+10FFFF", "non-character"),
    ("\u2028", "U+2028", "line separator"),
    ("\u2029", "U+2029", "paragraph separator"),
    ("\x00", "U+0000", "control character"),
    ("\n", "U+000A", "control character"),
    ("\x85", "U+0085", "control character"),  # next line (C1)
    ("\ud800", "U+D800", "lone surrogate"),
]

CHECKS: list[tuple[str, Callable[[object, str], str]]] = [
    ("name", check_name),
    ("idempotencyKey", check_ref),
    ("id", check_slug),
]


@pytest.mark.parametrize(
    ("char", "code", "why"), SPOOFING, ids=[f"{code}, a {why}" for _, code, why in SPOOFING]
)
@pytest.mark.parametrize(("field", "check"), CHECKS, ids=[f for f, _ in CHECKS])
def test_display_spoofing_characters_in_names_and_ids(
    field: str, check: Callable[[object, str], str], char: str, code: str, why: str
) -> None:
    with pytest.raises(InvalidInput) as err:
        check(f"acme{char}corp", field)
    assert err.value.message.startswith(f"{field} must not contain {code} (")
    assert why in err.value.message
    assert err.value.details == {"field": field, "character": code, "position": 4}


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("Café Zürich", id="Latin letters with accents"),
        pytest.param("東京チーム", id="Japanese"),
        pytest.param("Ἀθῆναι", id="polytonic Greek"),
        pytest.param("a\u00a0b", id="a no-break space"),
        pytest.param("x" * 200, id="200 characters"),
        pytest.param("data-team 2", id="a hyphen, a space and a digit"),
    ],
)
def test_text_in_any_script_is_a_name(text: str) -> None:
    assert forbidden_character(text) is None
    assert check_name(text, "name") == text
    assert check_ref(text, "id") == text


def test_the_first_forbidden_character_is_named() -> None:
    found = forbidden_character("ok\u00e9\u200b\u202e")
    assert found is not None and found[:2] == (3, "U+200B")


def test_display_spoofing_characters_in_fleet_files() -> None:
    """A fleet file's ids and names are held to the API's rule."""
    for path, set_value in [
        ("tenants[1].id", lambda f: f["tenants"][1].update(id="ac\u202eme")),
        ("tenants[1].name", lambda f: f["tenants"][1].update(name="ACME\u200b")),
        ("clusters[0].name", lambda f: f["clusters"][0].update(name="c\ufeff1")),
        ("clusters[0].nodes[0].name", lambda f: f["clusters"][0]["nodes"][0].update(name="n\uffff")),
        ("pools[0].name", lambda f: f["pools"][0].update(name="p\u20281")),
        ("pools[0].owner", lambda f: f["pools"][0].update(owner="plat\u202eform")),
    ]:
        fleet = small_fleet()
        set_value(fleet)
        with pytest.raises(InvalidInput, match=r"must not contain U\+") as err:
            parse_fleet(fleet)
        assert err.value.details["field"] == path


ACME = Principal("acme", False, "cred-acme")
ADMIN = Principal(None, True, "cred-admin")


@pytest.mark.parametrize(
    ("principal", "named", "scope"),
    [
        pytest.param(ACME, None, "acme", id="a tenant naming none acts for itself"),
        pytest.param(ACME, "acme", "acme", id="a tenant naming itself acts for itself"),
        pytest.param(ADMIN, "beta", "beta", id="the admin acts for the tenant it names"),
        pytest.param(ADMIN, None, None, id="the admin naming none acts for every tenant"),
    ],
)
def test_tenant_scope_is_the_tenant_a_call_acts_for(
    principal: Principal, named: str | None, scope: str
) -> None:
    assert tenant_scope(principal, named) == scope


@pytest.mark.parametrize("named", ["beta", "no-such-tenant"])
def test_tenant_scope_another_tenant_is_not_found_whether_or_not_it_exists(named: str) -> None:
    with pytest.raises(NotFound) as refused:
        tenant_scope(ACME, named)
    assert (refused.value.message, refused.value.details) == (
        f"tenant {named} not found",
        {"tenantId": named},
    )


def test_check_grantee_tells_only_the_admin_that_a_tenant_does_not_exist() -> None:
    owner = Principal("platform", False, "cred-platform")
    for exists in (True, False):
        check_grantee(owner, "beta", exists=exists)
    check_grantee(ADMIN, "beta", exists=True)
    with pytest.raises(NotFound, match="tenant beta not found"):
        check_grantee(ADMIN, "beta", exists=False)
