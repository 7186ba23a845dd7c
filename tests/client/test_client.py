from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

import better_compute.client as client_module
from better_compute.client import (
    Compute,
    ComputeError,
    ConflictError,
    ForbiddenError,
    InsufficientCapacityError,
    InternalError,
    InvalidInputError,
    InvalidStateError,
    MethodNotAllowedError,
    NotFoundError,
    QuotaExceededError,
    TransportError,
    UnauthenticatedError,
)
from better_compute.wire.common import Page
from better_compute.wire.reservations import ReservationPublic
from tests.client.fakes import FakeServer, error_json, reservation_json


def compute_for(server: FakeServer, *, token: str | None = "tok", retries: int = 3) -> Compute:
    return Compute(
        "http://bc.test", token, transport=server.transport(), retries=retries, sleep=lambda _: None
    )


def test_public_names_are_pinned() -> None:
    assert client_module.__all__ == sorted(client_module.__all__)
    assert set(client_module.__all__) == {
        "Compute",
        "ComputeError",
        "ConflictError",
        "ForbiddenError",
        "InsufficientCapacityError",
        "InternalError",
        "InvalidInputError",
        "InvalidStateError",
        "MethodNotAllowedError",
        "NotFoundError",
        "QuotaExceededError",
        "TransportError",
        "UnauthenticatedError",
        "UnavailableError",
    }


def test_create_reservation_returns_the_typed_model_and_sends_camel_case() -> None:
    server = FakeServer({("POST", "/v1/reservations"): (201, reservation_json())})
    compute = compute_for(server)

    booked = compute.reservations.create(
        tenant_id="acme",
        pool_id="h100-a",
        devices=[{"class": "gpu", "count": 2}],
        duration="4h",
        start=datetime(2030, 1, 1, 10, tzinfo=UTC),
        idempotency_key="k-1",
    )

    assert isinstance(booked, ReservationPublic)
    assert booked.gpu_count == 2
    assert booked.atoms[0].cls == "gpu"
    assert booked.start == datetime(2030, 1, 1, 10, tzinfo=UTC)
    assert server.bodies() == [
        {
            "tenantId": "acme",
            "poolId": "h100-a",
            "devices": [{"class": "gpu", "count": 2}],
            "start": "2030-01-01T10:00:00Z",
            "duration": "4h",
            "idempotencyKey": "k-1",
        }
    ]
    assert server.requests[0].headers["authorization"] == "Bearer tok"
    assert server.requests[0].headers["bc-api-version"] == "1"


def test_fractional_request_carries_its_selector() -> None:
    server = FakeServer({("POST", "/v1/reservations"): reservation_json()})
    compute_for(server).reservations.create(
        pool_id="mig-a",
        devices=[
            {
                "class": "gpu.mig",
                "count": 1,
                "selector": {"matchExpressions": [{"key": "migProfile", "op": "In", "values": ["3g.40gb"]}]},
            }
        ],
        duration="4h",
        idempotency_key="notebook-ana-0924",
    )
    (body,) = server.bodies()
    assert "tenantId" not in body  # the server takes the credential's tenant
    assert body["devices"] == [
        {
            "class": "gpu.mig",
            "count": 1,
            "selector": {"matchExpressions": [{"key": "migProfile", "op": "In", "values": ["3g.40gb"]}]},
        }
    ]


def test_lists_return_pages_and_send_filters_as_query() -> None:
    server = FakeServer({("GET", "/v1/reservations"): {"items": [reservation_json()], "nextCursor": "c2"}})
    page = compute_for(server).reservations.list(pool_id="h100-a", status="active", limit=10)

    assert isinstance(page, Page)
    assert [item.id for item in page.items] == ["rsv-1"]
    assert page.next_cursor == "c2"
    request = server.requests[0]
    assert dict(request.url.params) == {"poolId": "h100-a", "status": "active", "limit": "10"}
    assert request.content == b""


def test_iter_follows_cursors() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.params.get("cursor") == "c2":
            return httpx.Response(200, json={"items": [reservation_json(id="rsv-2")], "nextCursor": None})
        return httpx.Response(200, json={"items": [reservation_json(id="rsv-1")], "nextCursor": "c2"})

    server = FakeServer({("GET", "/v1/reservations"): answer})
    assert [r.id for r in compute_for(server).reservations.iter()] == ["rsv-1", "rsv-2"]


@pytest.mark.parametrize(
    ("verb", "path", "invoke"),
    [
        pytest.param(
            "GET",
            "/v1/reservations/rsv-1",
            lambda c: c.reservations.get("rsv-1"),
            id="reservations.get puts the id in the path",
        ),
        pytest.param(
            "POST",
            "/v1/reservations/rsv-1/cancel",
            lambda c: c.reservations.cancel("rsv-1"),
            id="reservations.cancel puts the id in the path",
        ),
        pytest.param(
            "POST",
            "/v1/reservations/rsv-1/release",
            lambda c: c.reservations.release("rsv-1"),
            id="reservations.release puts the id in the path",
        ),
    ],
)
def test_path_parameters_come_from_the_body(verb, path, invoke) -> None:
    server = FakeServer({(verb, path): reservation_json()})
    assert invoke(compute_for(server)).id == "rsv-1"
    assert server.requests[0].method == verb


def test_pool_offer_fills_pool_id_in_the_path() -> None:
    server = FakeServer(
        {
            ("POST", "/v1/pools/mig-a/offers"): {
                "poolId": "mig-a",
                "tenantId": "globex",
                "quotas": [{"tenantId": "globex", "poolId": "mig-a", "class": "gpu.mig", "limit": 7}],
            }
        }
    )
    offer = compute_for(server).pools.offer("mig-a", tenant_id="globex", quota={"gpu.mig": 7})
    assert offer.quotas[0].cls == "gpu.mig"
    assert server.bodies() == [{"poolId": "mig-a", "tenantId": "globex", "quota": {"gpu.mig": 7}}]


def test_quota_set_and_credentials() -> None:
    server = FakeServer(
        {
            ("PUT", "/v1/quotas"): {"tenantId": "acme", "poolId": "p", "class": "gpu.slot", "limit": 4},
            ("POST", "/v1/credentials"): {
                "id": "cred-1",
                "tenantId": None,
                "name": "ops",
                "createdAt": "2030-01-01T00:00:00Z",
                "token": "secret",
            },
        }
    )
    compute = compute_for(server)
    assert compute.quotas.set(tenant_id="acme", pool_id="p", cls="gpu.slot", limit=4).limit == 4
    assert compute.credentials.create(tenant_id=None, name="ops").token == "secret"
    assert server.bodies() == [
        {"tenantId": "acme", "poolId": "p", "class": "gpu.slot", "limit": 4},
        {"tenantId": None, "name": "ops"},  # a null tenant is explicit: a fleet-admin credential
    ]


def test_credentials_list_and_revoke() -> None:
    shown = {"id": "cred-1", "tenantId": "acme", "name": "ci", "createdAt": "2030-01-01T00:00:00Z"}
    revoked = {**shown, "revokedAt": "2030-01-02T00:00:00Z"}
    server = FakeServer(
        {
            ("GET", "/v1/credentials"): {"items": [shown], "nextCursor": None},
            ("POST", "/v1/credentials/cred-1/revoke"): revoked,
        }
    )
    compute = compute_for(server)
    page = compute.credentials.list(limit=5)
    assert [(c.id, c.revoked_at) for c in page.items] == [("cred-1", None)]
    assert compute.credentials.revoke("cred-1").revoked_at == datetime(2030, 1, 2, tzinfo=UTC)
    assert [(r.method, r.url.path, r.url.query) for r in server.requests] == [
        ("GET", "/v1/credentials", b"limit=5"),
        ("POST", "/v1/credentials/cred-1/revoke", b""),
    ]


def test_atoms_list_repeats_attr_filters() -> None:
    server = FakeServer({("GET", "/v1/atoms"): {"items": [{"id": "a"}], "nextCursor": None}})
    page = compute_for(server).atoms.list(
        pool="mig-a", cls="gpu.mig", attrs={"migProfile": "3g.40gb", "numaNode": "1"}
    )
    assert page.items == [{"id": "a"}]
    assert server.requests[0].url.params.multi_items() == [
        ("pool", "mig-a"),
        ("class", "gpu.mig"),
        ("attr", "migProfile=3g.40gb"),
        ("attr", "numaNode=1"),
    ]


def test_no_authorization_header_without_a_token() -> None:
    server = FakeServer({("GET", "/v1/clusters"): {"items": [], "nextCursor": None}})
    compute_for(server, token=None).clusters.list()
    assert "authorization" not in server.requests[0].headers


@pytest.mark.parametrize(
    ("code", "status", "error_class"),
    [
        pytest.param("INVALID_INPUT", 400, InvalidInputError, id="INVALID_INPUT raises InvalidInputError"),
        pytest.param(
            "UNAUTHENTICATED", 401, UnauthenticatedError, id="UNAUTHENTICATED raises UnauthenticatedError"
        ),
        pytest.param("FORBIDDEN", 403, ForbiddenError, id="FORBIDDEN raises ForbiddenError"),
        pytest.param("NOT_FOUND", 404, NotFoundError, id="NOT_FOUND raises NotFoundError"),
        pytest.param("INVALID_STATE", 409, InvalidStateError, id="INVALID_STATE raises InvalidStateError"),
        pytest.param("CONFLICT", 409, ConflictError, id="CONFLICT raises ConflictError"),
        pytest.param(
            "QUOTA_EXCEEDED", 409, QuotaExceededError, id="QUOTA_EXCEEDED raises QuotaExceededError"
        ),
        pytest.param(
            "INSUFFICIENT_CAPACITY",
            409,
            InsufficientCapacityError,
            id="INSUFFICIENT_CAPACITY raises InsufficientCapacityError",
        ),
        pytest.param(
            "METHOD_NOT_ALLOWED",
            405,
            MethodNotAllowedError,
            id="METHOD_NOT_ALLOWED raises MethodNotAllowedError",
        ),
        pytest.param("INTERNAL", 500, InternalError, id="INTERNAL raises InternalError"),
    ],
)
def test_each_error_code_raises_its_exception(code, status, error_class) -> None:
    server = FakeServer({("GET", "/v1/reservations/rsv-1"): (status, error_json(code, "nope", atomId="a-1"))})
    with pytest.raises(error_class) as caught:
        compute_for(server).reservations.get("rsv-1")
    error = caught.value
    assert isinstance(error, ComputeError)
    assert (error.code, error.message, error.details, error.status_code) == (
        code,
        "nope",
        {"atomId": "a-1"},
        status,
    )
    assert error.to_dict() == error_json(code, "nope", atomId="a-1")


def test_unknown_code_and_bodiless_errors_fall_back_to_compute_error() -> None:
    server = FakeServer(
        {
            ("GET", "/v1/pools"): (418, error_json("TEAPOT", "short and stout")),
            ("GET", "/v1/quotas"): lambda r: httpx.Response(502, text="bad gateway"),
            ("GET", "/v1/policies"): (422, {"detail": [{"loc": ["query", "limit"]}]}),
        }
    )
    compute = compute_for(server)
    with pytest.raises(ComputeError) as teapot:
        compute.pools.list()
    assert type(teapot.value) is ComputeError
    assert teapot.value.code == "TEAPOT"
    with pytest.raises(ComputeError) as gateway:
        compute.quotas.list()
    assert gateway.value.code == "HTTP_502"
    assert gateway.value.details == {"body": "bad gateway"}
    with pytest.raises(InvalidInputError):
        compute.policies.list()


def test_an_answer_that_does_not_match_the_model_is_reported() -> None:
    server = FakeServer({("GET", "/v1/reservations/rsv-1"): {"id": "rsv-1"}})
    with pytest.raises(ComputeError) as caught:
        compute_for(server).reservations.get("rsv-1")
    assert caught.value.code == "UNEXPECTED_RESPONSE"


def test_safe_calls_are_retried_on_connection_errors() -> None:
    server = FakeServer({("GET", "/v1/reservations/rsv-1"): reservation_json()}, fail_first=2)
    assert compute_for(server).reservations.get("rsv-1").id == "rsv-1"
    assert len(server.requests) == 3


def test_put_is_retried() -> None:
    server = FakeServer(
        {("PUT", "/v1/quotas"): {"tenantId": "a", "poolId": "p", "class": "gpu", "limit": 1}}, fail_first=1
    )
    compute_for(server).quotas.set(tenant_id="a", pool_id="p", cls="gpu", limit=1)
    assert len(server.requests) == 2


def test_retries_give_up_with_a_transport_error() -> None:
    server = FakeServer({}, fail_first=100)
    with pytest.raises(TransportError) as caught:
        compute_for(server, retries=2).tenants.list()
    assert len(server.requests) == 3
    assert caught.value.code == "TRANSPORT"
    assert caught.value.status_code is None
    assert caught.value.details["attempts"] == 3


@pytest.mark.parametrize(
    "invoke",
    [
        pytest.param(
            lambda c: c.pools.create(name="p", cluster_id="c", mode="exclusive", owner_tenant_id="acme"),
            id="pools.create",
        ),
        pytest.param(lambda c: c.reservations.cancel("rsv-1"), id="reservations.cancel"),
        pytest.param(lambda c: c.pools.update("p", nodes=["n1"]), id="pools.update"),
        pytest.param(
            lambda c: c.call("tenants.create", {"id": "acme", "name": "Acme"}),
            id="tenants.create through call",
        ),
    ],
)
def test_unsafe_calls_are_sent_once(invoke) -> None:
    server = FakeServer({}, fail_first=1)
    with pytest.raises(TransportError):
        invoke(compute_for(server))
    assert len(server.requests) == 1


def test_reservation_create_gets_one_idempotency_key_reused_across_retries() -> None:
    server = FakeServer({("POST", "/v1/reservations"): reservation_json()}, fail_first=2)
    compute_for(server).reservations.create(
        pool_id="h100-a", devices=[{"class": "gpu", "count": 1}], duration="1h"
    )
    keys = [body["idempotencyKey"] for body in server.bodies()]
    assert len(keys) == 3
    assert len(set(keys)) == 1
    assert keys[0]


def test_generated_keys_differ_between_calls_and_a_given_key_is_kept() -> None:
    server = FakeServer({("POST", "/v1/reservations"): reservation_json()})
    compute = compute_for(server)
    for _ in range(2):
        compute.reservations.create(pool_id="p", devices=[{"class": "gpu", "count": 1}], duration="1h")
    compute.call(
        "reservations.create",
        {
            "poolId": "p",
            "devices": [{"class": "gpu", "count": 1}],
            "duration": "1h",
            "idempotencyKey": "mine",
        },
    )
    keys = [body["idempotencyKey"] for body in server.bodies()]
    assert keys[0] != keys[1]
    assert keys[2] == "mine"


def test_raw_call_with_a_generated_key_is_retried() -> None:
    server = FakeServer({("POST", "/v1/reservations"): reservation_json()}, fail_first=1)
    raw = compute_for(server).call(
        "reservations.create", {"poolId": "p", "devices": [{"class": "gpu", "count": 1}], "duration": "1h"}
    )
    assert raw["id"] == "rsv-1"
    assert len(server.requests) == 2


def test_raw_call_returns_json_and_checks_the_method() -> None:
    server = FakeServer({("GET", "/v1/pools/p/1"): {"anything": True}})
    compute = compute_for(server)
    assert compute.call("pools.get", {"id": "p/1"}) == {"anything": True}
    assert server.requests[0].url.raw_path == b"/v1/pools/p%2F1"
    with pytest.raises(KeyError, match=r"reservations\.create"):
        compute.call("reservations.book", {})
    with pytest.raises(ValueError, match="'id'"):
        compute.call("reservations.get", {})


def test_client_closes_as_a_context_manager() -> None:
    server = FakeServer({})
    with compute_for(server) as compute:
        assert compute.base_url == "http://bc.test"


def pool_json(**overrides: object) -> dict[str, object]:
    body: dict[str, object] = {
        "id": "pool-1",
        "name": "mig-a",
        "clusterId": "c1",
        "mode": "mig",
        "policy": {"migLayout": "all-1g.10gb"},
        "ownerTenantId": "acme",
        "nodes": ["n1"],
        "meter": "gpu.h100.hours",
        "generation": 1,
        "createdAt": "2030-01-01T00:00:00Z",
    }
    body.update(overrides)
    return body


def test_admin_methods_send_camel_case_bodies() -> None:
    server = FakeServer(
        {
            ("POST", "/v1/tenants"): {"id": "acme", "name": "Acme", "createdAt": "2030-01-01T00:00:00Z"},
            ("POST", "/v1/pools"): pool_json(),
            ("PATCH", "/v1/pools/pool-1"): pool_json(generation=2),
            ("POST", "/v1/policies"): {
                "id": "pol-1",
                "name": "no-whole-gpus",
                "tenantId": "acme",
                "poolId": None,
                "limits": {"gpuCount": 0},
                "createdAt": "2030-01-01T00:00:00Z",
            },
        }
    )
    compute = compute_for(server)
    assert compute.tenants.create(id="acme", name="Acme").name == "Acme"
    pool = compute.pools.create(
        name="mig-a",
        cluster_id="c1",
        mode="mig",
        owner_tenant_id="acme",
        nodes=["n1"],
        policy={"migLayout": "all-1g.10gb"},
        owner_quota={"gpu": 8, "gpu.mig": 56},
    )
    assert pool.policy.mig_layout == "all-1g.10gb"
    assert compute.pools.update("pool-1", policy={"mig_layout": "all-3g.40gb"}, generation=1).generation == 2
    assert (
        compute.policies.create(name="no-whole-gpus", tenant_id="acme", limits={"gpuCount": 0}).id == "pol-1"
    )
    assert server.bodies() == [
        {"id": "acme", "name": "Acme"},
        {
            "name": "mig-a",
            "clusterId": "c1",
            "mode": "mig",
            "ownerTenantId": "acme",
            "nodes": ["n1"],
            "policy": {"migLayout": "all-1g.10gb"},
            "ownerQuota": {"gpu": 8, "gpu.mig": 56},
        },
        {"id": "pool-1", "policy": {"migLayout": "all-3g.40gb"}, "generation": 1},
        {"name": "no-whole-gpus", "tenantId": "acme", "limits": {"gpuCount": 0}},
    ]


def test_a_newer_server_that_adds_fields_does_not_break_the_client() -> None:
    """A field the client does not know, at any depth, is ignored (it was UNEXPECTED_RESPONSE)."""
    newer = reservation_json(
        region="eu-west",
        devices=[
            {
                "class": "gpu",
                "count": 2,
                "priority": "high",
                "selector": {
                    "matchExpressions": [{"key": "numaNode", "op": "In", "values": [0], "weight": 1}],
                    "matchFields": [],
                },
            }
        ],
        atoms=[
            {"id": "atom-1", "class": "gpu", "gpuId": "GPU-1", "node": "n1", "attributes": {}, "rack": "r7"}
        ],
    )
    pool = {
        "id": "p1",
        "name": "p1",
        "clusterId": "c1",
        "mode": "mig",
        "policy": {"migLayout": "all-1g.10gb", "gate": "open"},
        "ownerTenantId": "platform",
        "nodes": ["n"],
        "meter": "mig",
        "generation": 3,
        "createdAt": "2030-01-01T00:00:00Z",
        "labels": {"team": "ml"},
    }
    server = FakeServer(
        {
            ("GET", "/v1/reservations/rsv-1"): newer,
            ("GET", "/v1/reservations"): {"items": [newer], "nextCursor": None, "total": 1},
            ("GET", "/v1/pools/p1"): pool,
        }
    )
    compute = compute_for(server)
    booked = compute.reservations.get("rsv-1")
    assert (booked.id, booked.gpu_count, booked.atoms[0].gpu_id) == ("rsv-1", 2, "GPU-1")
    assert booked.devices[0].selector is not None
    assert booked.devices[0].selector.match_expressions[0].values == [0]
    assert "region" not in booked.model_dump(by_alias=True)
    assert [r.id for r in compute.reservations.list().items] == ["rsv-1"]
    assert compute.pools.get("p1").policy.mig_layout == "all-1g.10gb"


def test_a_refusal_says_which_one_of_its_code_it_is() -> None:
    stale = error_json(
        "CONFLICT", "pool p1 is at generation 3, not 2", generation=3, reason="generation_mismatch"
    )
    server = FakeServer(
        {("PATCH", "/v1/pools/p1"): (409, stale), ("GET", "/v1/pools/p1"): (404, error_json("NOT_FOUND"))}
    )
    compute = compute_for(server)
    with pytest.raises(ConflictError) as caught:
        compute.pools.update("p1", generation=2)
    assert caught.value.reason == "generation_mismatch"
    with pytest.raises(NotFoundError) as missing:
        compute.pools.get("p1")
    assert missing.value.reason is None


@pytest.mark.parametrize(
    ("call", "field"),
    [
        pytest.param(
            lambda c: c.reservations.create(
                pool_id="p",
                devices=[{"class": "gpu", "count": 1}, {"class": "gpu", "count": "two"}],
                duration="1h",
            ),
            "devices[1].count",
            id="a device count that is a word",
        ),
        pytest.param(
            lambda c: c.reservations.create(pool_id="p", devices=[{"count": 1}], duration="1h"),
            "devices[0]",  # neither class nor capability
            id="a device without a class",
        ),
        pytest.param(
            lambda c: c.reservations.create(
                pool_id="p", devices=[{"class": "tpu", "count": 1}], duration="1h"
            ),
            "devices[0].class",
            id="a class that is no atom class",
        ),
        pytest.param(lambda c: c.pools.list(limit=0), "limit", id="a limit of zero"),
    ],
)
def test_the_client_raises_its_own_invalid_input_for_malformed_arguments(call: Any, field: str) -> None:
    """Issue 11, defect 16: a malformed device dict raised pydantic's ValidationError."""
    server = FakeServer({})
    with pytest.raises(InvalidInputError) as caught:
        call(compute_for(server))
    assert caught.value.code == "INVALID_INPUT"
    assert caught.value.details["field"] == field
    assert f": {field}: " in caught.value.message
    assert server.requests == []  # refused before anything was sent


def event_json(id: int, type_: str = "ledger.booked") -> dict[str, Any]:
    return {"id": id, "type": type_, "subject": "rsv-1", "time": "2030-01-01T10:00:00Z", "payload": {"x": 1}}


def test_events_list_sends_its_filters_and_iter_resumes_after_the_last_id() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.params.get("after") == "2":
            return httpx.Response(200, json={"items": [event_json(3)], "nextCursor": None})
        return httpx.Response(200, json={"items": [event_json(1), event_json(2)], "nextCursor": "2"})

    server = FakeServer({("GET", "/v1/events"): answer})
    compute = compute_for(server)
    page = compute.events.list(type="ledger.booked", subject="rsv-1", after=7, limit=2)
    assert [e.id for e in page.items] == [1, 2] and page.next_cursor == "2"
    assert page.items[0].payload == {"x": 1} and page.items[0].time == datetime(2030, 1, 1, 10, tzinfo=UTC)
    assert dict(server.requests[0].url.params) == {
        "type": "ledger.booked",
        "subject": "rsv-1",
        "after": "7",
        "limit": "2",
    }
    assert [e.id for e in compute.events.iter(page_size=2)] == [1, 2, 3]
    with pytest.raises(InvalidInputError):
        compute.events.list(limit=0)


def test_clusters_get_and_update_and_nodes_update_are_typed() -> None:
    cluster = {"id": "c1", "name": "c1", "region": "r1", "residency": [], "phase": "draining"}
    cluster["createdAt"] = "2026-12-01T09:00:00Z"
    node = {"id": "n1", "name": "n1", "clusterId": "c1", "cordoned": True, "specGeneration": 1}
    node["observedGeneration"] = 1
    server = FakeServer(
        {
            ("GET", "/v1/clusters/c1"): cluster,
            ("PATCH", "/v1/clusters/c1"): cluster,
            ("PATCH", "/v1/nodes/n1"): node,
        }
    )
    compute = compute_for(server)
    assert compute.clusters.get("c1").phase == "draining"
    assert compute.clusters.update("c1", phase="draining").region == "r1"
    assert compute.nodes.update("n1", cordoned=True).cordoned is True
    assert [(r.method, r.url.path) for r in server.requests] == [
        ("GET", "/v1/clusters/c1"),
        ("PATCH", "/v1/clusters/c1"),
        ("PATCH", "/v1/nodes/n1"),
    ]
    assert server.bodies()[1:] == [{"id": "c1", "phase": "draining"}, {"node": "n1", "cordoned": True}]
    with pytest.raises(InvalidInputError):
        compute.nodes.update("n1", cordoned="yes")  # type: ignore[arg-type]


def test_partitions_book_and_release() -> None:
    booking = "partition:GPU-1:2030-01-01T10:00:00Z"
    server = FakeServer(
        {
            ("POST", "/v1/partitions"): (
                201,
                {
                    "status": "booked",
                    "gpuId": "GPU-1",
                    "bookingId": booking,
                    "start": "2030-01-01T10:00:00Z",
                    "end": "2030-01-01T14:00:00Z",
                    "atoms": ["GPU-1", "GPU-1/mig-0"],
                    "freeFrom": None,
                },
            ),
            ("DELETE", f"/v1/partitions/{booking}"): {
                "status": "released",
                "bookingId": booking,
                "gpuId": "GPU-1",
                "ended": 2,
            },
        }
    )
    compute = compute_for(server)
    booked = compute.partitions.book("GPU-1", start=datetime(2030, 1, 1, 10, tzinfo=UTC), duration="4h")
    assert (booked.status, booked.booking_id, booked.atoms) == ("booked", booking, ["GPU-1", "GPU-1/mig-0"])
    assert compute.partitions.release(booking).ended == 2
    assert server.bodies() == [
        {"gpuId": "GPU-1", "start": "2030-01-01T10:00:00Z", "duration": "4h"},
        None,  # a DELETE carries no body: the booking id is in its path
    ]
    assert (
        server.requests[1].url.raw_path.decode()
        == "/v1/partitions/partition%3AGPU-1%3A2030-01-01T10%3A00%3A00Z"
    )


def test_a_partition_conflict_is_an_answer_not_an_error() -> None:
    server = FakeServer(
        {
            ("POST", "/v1/partitions"): {
                "status": "conflict",
                "gpuId": "GPU-1",
                "start": "2030-01-01T10:00:00Z",
                "end": "2030-01-01T11:00:00Z",
                "freeFrom": None,
            }
        }
    )
    clash = compute_for(server).partitions.book("GPU-1", end=datetime(2030, 1, 1, 11, tzinfo=UTC))
    assert (clash.status, clash.booking_id, clash.free_from, clash.atoms) == ("conflict", None, None, [])


def test_a_replayed_key_whose_reservation_was_released_is_not_a_new_booking() -> None:
    replay = reservation_json(status="released", end="2030-01-01T10:30:00Z", replayed=True)
    server = FakeServer({("POST", "/v1/reservations"): (200, replay)})

    booked = compute_for(server).reservations.create(
        pool_id="h100-a", devices=[{"class": "gpu", "count": 2}], duration="4h", idempotency_key="k-1"
    )

    assert booked.replayed is True
    assert booked.status == "released"
    assert booked.end == datetime(2030, 1, 1, 10, 30, tzinfo=UTC)


def test_a_fresh_booking_is_not_replayed() -> None:
    server = FakeServer({("POST", "/v1/reservations"): (201, reservation_json(replayed=False))})

    booked = compute_for(server).reservations.create(
        pool_id="h100-a", devices=[{"class": "gpu", "count": 2}], duration="4h"
    )

    assert booked.replayed is False
