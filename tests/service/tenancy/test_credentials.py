"""Remembered tokens: a process may recall whose a token is, never that it is still live.

A recalled owner is a `RecalledPrincipal`, which no use case that takes a `Principal` accepts (mypy
refuses it: tests/typechecks/principals.py); it becomes one only once a transaction reads the
credential live. These tests pin what that means at run time, on both stores.
"""

from __future__ import annotations

from typing import Any

import pytest

from better_compute.domain.kernel.errors import Unauthenticated
from better_compute.domain.tenancy.credentials import Principal, RecalledPrincipal, hash_token
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.fleet import pools
from better_compute.service.ledger import reservations
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.service.tenancy import credentials
from better_compute.service.tenancy.credentials import TokenMemory
from better_compute.storage.store import Store
from tests.builders import T0, CountingIds, at, fleet_spec

ADMIN = Principal(tenant_id=None, is_admin=True, credential_id="admin")
RESERVE: dict[str, Any] = {"poolId": "p1", "devices": [{"class": "gpu.mig", "count": 1}], "duration": "1h"}


@pytest.fixture
def fleet(store: Store) -> Store:
    load_fleet(store, fleet_spec(nodes=1, layout="all-1g.10gb"), T0)
    pools.offer(store, ADMIN, "p1", "acme", {"gpu.mig": 4}, T0)
    return store


def issue(store: Store) -> credentials.Issued:
    return credentials.create(store, ADMIN, "acme", "ci", T0, new_id=CountingIds().credential)


def test_a_token_is_looked_up_once_then_recalled_as_a_recalled_principal(fleet: Store) -> None:
    token = issue(fleet).token
    memory = TokenMemory()
    first = credentials.identify(fleet, memory, token)
    again = credentials.identify(fleet, memory, token)
    assert first == Principal("acme", False, "cred-000001")
    assert again == RecalledPrincipal("acme", False, "cred-000001")
    assert not isinstance(again, Principal)


def test_a_recalled_principal_becomes_a_principal_only_while_its_credential_is_live(fleet: Store) -> None:
    issued = issue(fleet)
    memory = TokenMemory()
    memory.remember(hash_token(issued.token), credentials.authenticate(fleet, issued.token))
    recalled = memory.recall(hash_token(issued.token))
    assert recalled is not None
    with fleet.read() as tx:
        assert credentials.confirm_live(tx, recalled) == Principal("acme", False, issued.credential.id)
    credentials.revoke(fleet, ADMIN, issued.credential.id, at(1))
    with fleet.read() as tx, pytest.raises(Unauthenticated) as refused:
        credentials.confirm_live(tx, recalled)
    assert refused.value.details == {"reason": "revoked"}


def test_admission_refuses_a_recalled_caller_whose_credential_was_revoked_and_books_nothing(
    fleet: Store,
) -> None:
    issued = issue(fleet)
    recalled = credentials.authenticate(fleet, issued.token).remembered()
    ids = CountingIds()
    index = BookingIndex()
    booked = reservations.create(fleet, index, recalled, RESERVE, T0, ids.reservation)
    assert booked.reservation.tenant_id == "acme"
    credentials.revoke(fleet, ADMIN, issued.credential.id, at(1))
    with pytest.raises(Unauthenticated) as refused:
        reservations.create(fleet, index, recalled, RESERVE, at(1), ids.reservation)
    assert refused.value.details == {"reason": "revoked"}
    with fleet.read() as tx:
        assert [r.id for r in tx.reservations.page(None, None, None, None)] == [booked.id]


def test_a_refusal_answers_a_revoked_recalled_token_as_revoked_and_forgets_it(fleet: Store) -> None:
    """Whatever refuses the request first (here: naming another tenant), a revoked token's caller is
    told the token was revoked, as a fresh look-up would tell it."""
    issued = issue(fleet)
    memory = TokenMemory()
    credentials.identify(fleet, memory, issued.token)  # remembered
    credentials.revoke(fleet, ADMIN, issued.credential.id, at(1))
    with (
        pytest.raises(Unauthenticated) as refused,
        credentials.acting_as(fleet, memory, issued.token) as caller,
    ):
        assert isinstance(caller, RecalledPrincipal)
        reservations.create(
            fleet, BookingIndex(), caller, {**RESERVE, "tenantId": "globex"}, at(1), lambda: "rsv-x"
        )
    assert refused.value.details == {"reason": "revoked"}
    assert memory.recall(hash_token(issued.token)) is None
