"""The OpenAPI document's links (`better_compute.api.links`) name real operations and parameters."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from better_compute.api.links import LINKS, Link, add_links
from tests import openapi_document


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return openapi_document.document()


def operations(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {op["operationId"]: op for ops in document["paths"].values() for op in ops.values()}


def test_every_link_is_in_the_document_and_names_a_real_operation(document: dict[str, Any]) -> None:
    by_id = operations(document)
    found = 0
    for path, ops in document["paths"].items():
        for method, op in ops.items():
            for status, answer in op["responses"].items():
                for name, link in answer.get("links", {}).items():
                    found += 1
                    target = by_id.get(link["operationId"])
                    assert target is not None, f"{method.upper()} {path} {status} {name}: no such operation"
                    names = {f"{p['in']}.{p['name']}" for p in target.get("parameters", [])}
                    for parameter in link.get("parameters", {}):
                        assert parameter in names, f"{name}: {link['operationId']} has no {parameter}"
                    if "requestBody" in link:
                        assert "requestBody" in target, f"{name}: {link['operationId']} takes no body"
    assert found == len(LINKS)


def test_a_reservation_links_to_get_cancel_and_release_it(document: dict[str, Any]) -> None:
    created = document["paths"]["/v1/reservations"]["post"]["responses"]["201"]["links"]
    assert set(created) == {"GetReservation", "CancelReservation", "ReleaseReservation"}
    assert all(link["parameters"] == {"path.id": "$response.body#/id"} for link in created.values())
    cancel = document["paths"]["/v1/reservations/{id}/cancel"]["post"]
    assert created["CancelReservation"]["operationId"] == cancel["operationId"]


def test_a_link_to_an_operation_the_app_lacks_is_an_error(document: dict[str, Any]) -> None:
    dangling = Link("Nowhere", ("POST", "/v1/tenants"), 201, ("DELETE", "/v1/clusters/{id}"))
    with pytest.raises(KeyError):
        add_links(copy.deepcopy(document), [dangling])
