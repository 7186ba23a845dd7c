"""The method table is a fixed interface: its names, verbs and paths are pinned here."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from better_compute.wire.common import Page, WireModel
from better_compute.wire.methods import METHODS, method
from better_compute.wire.reservations import ReservationPublic

FIXED = {
    "tenants.create": ("POST", "/v1/tenants"),
    "tenants.list": ("GET", "/v1/tenants"),
    "credentials.create": ("POST", "/v1/credentials"),
    "credentials.list": ("GET", "/v1/credentials"),
    "credentials.revoke": ("POST", "/v1/credentials/{id}/revoke"),
    "pools.create": ("POST", "/v1/pools"),
    "pools.list": ("GET", "/v1/pools"),
    "pools.get": ("GET", "/v1/pools/{id}"),
    "pools.update": ("PATCH", "/v1/pools/{id}"),
    "pools.offer": ("POST", "/v1/pools/{poolId}/offers"),
    "pools.previewLayout": ("POST", "/v1/pools/{id}/preview-layout"),
    "quotas.set": ("PUT", "/v1/quotas"),
    "quotas.list": ("GET", "/v1/quotas"),
    "policies.create": ("POST", "/v1/policies"),
    "policies.list": ("GET", "/v1/policies"),
    "policies.get": ("GET", "/v1/policies/{id}"),
    "policies.update": ("PATCH", "/v1/policies/{id}"),
    "reservations.create": ("POST", "/v1/reservations"),
    "reservations.get": ("GET", "/v1/reservations/{id}"),
    "reservations.list": ("GET", "/v1/reservations"),
    "reservations.cancel": ("POST", "/v1/reservations/{id}/cancel"),
    "reservations.release": ("POST", "/v1/reservations/{id}/release"),
    "clusters.list": ("GET", "/v1/clusters"),
    "nodes.list": ("GET", "/v1/nodes"),
    "gpus.list": ("GET", "/v1/gpus"),
    "atoms.list": ("GET", "/v1/atoms"),
}


def test_every_fixed_method_is_in_the_table_with_its_verb_and_path() -> None:
    for name, (verb, path) in FIXED.items():
        assert name in METHODS, name
        assert (METHODS[name].verb, METHODS[name].path) == (verb, path), name


def test_no_two_methods_share_a_route() -> None:
    routes = [(m.verb, m.path) for m in METHODS.values()]
    assert len(routes) == len(set(routes))


@pytest.mark.parametrize("name", sorted(METHODS))
def test_request_models_carry_the_path_parameters(name: str) -> None:
    spec = METHODS[name]
    assert spec.name == name
    if spec.request is None:
        assert spec.path_params == ()
        return
    assert issubclass(spec.request, WireModel)
    aliases = {field.alias or key for key, field in spec.request.model_fields.items()}
    assert set(spec.path_params) <= aliases


def test_lists_are_paged() -> None:
    for name, spec in METHODS.items():
        assert spec.paged == name.endswith(".list"), name
    assert METHODS["reservations.list"].response_type == Page[ReservationPublic]
    assert METHODS["reservations.get"].response_type is ReservationPublic


def test_only_reservation_create_generates_idempotency_keys() -> None:
    assert [name for name, spec in METHODS.items() if spec.idempotency_key] == ["reservations.create"]


def test_retry_safety() -> None:
    assert METHODS["reservations.list"].retry_safe({})
    assert METHODS["quotas.set"].retry_safe({})
    assert not METHODS["reservations.create"].retry_safe({})
    assert METHODS["reservations.create"].retry_safe({"idempotencyKey": "k"})
    assert not METHODS["tenants.create"].retry_safe({"idempotencyKey": "k"})
    assert not METHODS["pools.update"].retry_safe({"id": "p"})


def test_render_get_moves_fields_to_the_query() -> None:
    call = METHODS["reservations.list"].render(
        {"poolId": "p", "status": None, "limit": 5, "flag": True, "since": datetime(2030, 1, 1, tzinfo=UTC)}
    )
    assert (call.verb, call.path, call.json) == ("GET", "/v1/reservations", None)
    assert call.query == [
        ("poolId", "p"),
        ("limit", "5"),
        ("flag", "true"),
        ("since", "2030-01-01T00:00:00+00:00"),
    ]
    get = METHODS["reservations.get"].render({"id": "r 1"})
    assert (get.path, get.query) == ("/v1/reservations/r%201", [])


def test_render_other_verbs_send_the_whole_body() -> None:
    call = METHODS["pools.update"].render({"id": "p1", "generation": 3})
    assert (call.verb, call.path, call.query, call.json) == (
        "PATCH",
        "/v1/pools/p1",
        [],
        {"id": "p1", "generation": 3},
    )


def test_missing_path_parameter_is_refused() -> None:
    with pytest.raises(ValueError, match="poolId"):
        METHODS["pools.offer"].render({"tenantId": "t", "quota": {}})


def test_lookup_names_the_valid_methods() -> None:
    assert method("pools.get") is METHODS["pools.get"]
    with pytest.raises(KeyError, match=r"reservations\.create"):
        method("reservations.book")


def test_the_api_documentation_lists_every_method() -> None:
    text = (Path(__file__).parents[2] / "docs" / "api.md").read_text(encoding="utf-8")
    for name, spec in METHODS.items():
        assert f"| `{name}` | {spec.verb} | `{spec.path}` |" in text, name
