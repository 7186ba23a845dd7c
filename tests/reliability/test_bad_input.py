"""Bad input through the real app, on SQLite and PostgreSQL: every case is INVALID_INPUT naming what
is wrong, never a 500 and never an unbounded cost.

Each row is named after the defect it pins (an adversarial run found them: a 500 or an unbounded
cost). The rows are sent as raw JSON, so a body can carry what `json=` would refuse to encode (NaN,
a lone surrogate), exactly as a hostile client sends it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from better_compute.domain.kernel import selectors, timewin
from better_compute.domain.ledger import admission
from better_compute.entrypoints.fleet import load_fleet
from better_compute.storage.store import Store
from better_compute.wire import reservations as wire
from better_compute.wire.methods import METHODS
from tests import openapi_document
from tests.builders import T0, admin_token, api_client, bearer, fleet_spec, tenant_token

GOOD: dict[str, Any] = {
    "poolId": "p1",
    "devices": [{"class": "gpu.mig", "count": 1}],
    "duration": "1h",
}
"""A reservation acme may make: every row below changes one thing in it (or in another method's body)."""


def devices(*selectors_: list[dict[str, Any]], count: int = 1) -> list[dict[str, Any]]:
    """Device requests, one per selector given (its matchExpressions)."""
    return [
        {"class": "gpu.mig", "count": count, "selector": {"matchExpressions": exprs}} for exprs in selectors_
    ]


def not_in(n: int) -> dict[str, Any]:
    return {"key": "migProfile", "op": "NotIn", "values": [f"v{i}" for i in range(n)]}


@dataclass(frozen=True)
class Case:
    method: str
    body: dict[str, Any]
    message: str
    """A fragment of the message the user must see (the field, and for limits the limit)."""
    who: str = "acme"


def reserve(message: str, **change: Any) -> Case:
    return Case("reservations.create", {**GOOD, **change}, message)


EXPRESSION_AT = "devices[0].selector.matchExpressions[0]"

CASES = [
    # 1. Python refuses int() past 4,300 digits.
    pytest.param(
        reserve(
            "duration is 5001 characters long; a duration is at most 64 characters", duration="9" * 5000 + "s"
        ),
        id="500-on-long-digit-runs-in-duration-short-form",
    ),
    pytest.param(
        reserve(
            "duration is 5002 characters long; a duration is at most 64 characters",
            duration="P" + "9" * 5000 + "D",
        ),
        id="500-on-long-digit-runs-in-duration-iso-form",
    ),
    pytest.param(
        reserve("is too large to be a duration: a window must end by the year 9999", duration="9" * 63 + "s"),
        id="500-on-long-digit-runs-in-duration-number-too-large",
    ),
    # 2. The offset pushes the start out of the calendar once converted to UTC.
    pytest.param(
        reserve(
            "start 9999-12-31T23:59:59-23:59 is outside the years 1 to 9999 once converted to UTC",
            start="9999-12-31T23:59:59-23:59",
        ),
        id="500-on-a-start-whose-offset-pushes-it-past-year-9999",
    ),
    pytest.param(
        reserve(
            "start 0001-01-01T00:00:00+23:59 is outside the years 1 to 9999 once converted to UTC",
            start="0001-01-01T00:00:00+23:59",
        ),
        id="500-on-a-start-whose-offset-pushes-it-before-year-1",
    ),
    # 3. Display-spoofing characters in names, ids and idempotency keys.
    pytest.param(
        reserve("idempotencyKey must not contain U+202E (a format character", idempotencyKey="key-\u202e1"),
        id="display-spoofing-right-to-left-override-in-idempotency-key",
    ),
    pytest.param(
        reserve("idempotencyKey must not contain U+200B (a format character", idempotencyKey="key\u200b"),
        id="display-spoofing-zero-width-space-in-idempotency-key",
    ),
    pytest.param(
        reserve(
            "idempotencyKey must not contain U+FFFF (a Unicode non-character", idempotencyKey="key\uffff"
        ),
        id="display-spoofing-non-character-in-idempotency-key",
    ),
    pytest.param(
        reserve("poolId must not contain U+FEFF (a format character", poolId="\ufeffp1"),
        id="display-spoofing-byte-order-mark-in-pool-id",
    ),
    pytest.param(
        Case(
            "tenants.create", {"id": "gamma", "name": "Gam\u202ema"}, "name must not contain U+202E", "admin"
        ),
        id="display-spoofing-right-to-left-override-in-tenant-name",
    ),
    pytest.param(
        Case("tenants.create", {"id": "gam\u200bma", "name": "Gamma"}, "id must not contain U+200B", "admin"),
        id="display-spoofing-zero-width-space-in-tenant-id",
    ),
    pytest.param(
        Case(
            "credentials.create",
            {"tenantId": "acme", "name": "ci\ufeff"},
            "name must not contain U+FEFF (a format character",
            "admin",
        ),
        id="display-spoofing-byte-order-mark-in-credential-name",
    ),
    pytest.param(
        Case(
            "policies.create",
            {"name": "cap\ufdd0", "tenantId": "acme", "limits": {"gpuCount": 1}},
            "name must not contain U+FDD0 (a Unicode non-character",
            "admin",
        ),
        id="display-spoofing-non-character-in-policy-name",
    ),
    pytest.param(
        Case(
            "policies.create",
            {"name": "cap\u2028ped", "tenantId": "acme", "limits": {"gpuCount": 1}},
            "name must not contain U+2028 (a line separator",
            "admin",
        ),
        id="display-spoofing-line-separator-in-policy-name",
    ),
    # 4. Unbounded selectors and counts.
    pytest.param(
        reserve(
            "devices[0].selector.matchExpressions holds 33 expressions; a selector holds at most 32",
            devices=devices([{"key": "migProfile", "op": "Exists"}] * 33),
        ),
        id="unbounded-selectors-33-expressions",
    ),
    pytest.param(
        reserve(
            f"{EXPRESSION_AT}.values holds 257 values; an expression holds at most 256",
            devices=devices([not_in(257)]),
        ),
        id="unbounded-selectors-257-values",
    ),
    pytest.param(
        reserve(
            f"{EXPRESSION_AT}.values holds 50000 values; an expression holds at most 256",
            devices=devices([not_in(50_000)]),
        ),
        id="unbounded-selectors-50000-value-not-in",
    ),
    pytest.param(
        reserve(
            f"{EXPRESSION_AT}.values[1] is 257 characters long; a selector value is at most 256",
            devices=devices([{"key": "migProfile", "op": "In", "values": ["3g.40gb", "v" * 257]}]),
        ),
        id="unbounded-selectors-257-character-value",
    ),
    pytest.param(
        reserve(
            "devices[4].selector: the reservation's selectors hold 1025 values up to here;"
            " at most 1024 in all its device requests together",
            devices=devices(*[[not_in(256)]] * 4, [not_in(1)]),
        ),
        id="unbounded-selectors-1025-values-in-one-reservation",
    ),
    pytest.param(
        reserve(
            "devices[0].count must be at most 65536, the most atoms one device request may ask for",
            devices=[{"class": "gpu.mig", "count": 65_537}],
        ),
        id="unbounded-selectors-count-65537",
    ),
    pytest.param(
        reserve(
            "devices[0].count must be at most 65536, the most atoms one device request may ask for",
            devices=[{"class": "gpu.mig", "count": 2**80}],
        ),
        id="unbounded-selectors-count-2-to-the-80",
    ),
    # Nearby inputs that were 500s too.
    pytest.param(
        reserve(
            f"{EXPRESSION_AT}.values[0] must be a finite number, not nan",
            devices=devices([{"key": "migProfile", "op": "In", "values": [float("nan")]}]),
        ),
        id="500-on-a-nan-selector-value",
    ),
    pytest.param(
        reserve(
            f"{EXPRESSION_AT}.values[0] must be a finite number, not inf",
            devices=devices([{"key": "giId", "op": "NotIn", "values": [float("inf")]}]),
        ),
        id="500-on-an-infinite-selector-value",
    ),
    pytest.param(
        reserve(
            "idempotencyKey: Input should be a valid string",  # the wire model refuses it first
            idempotencyKey="key-\ud800",
        ),
        id="500-on-a-lone-surrogate-in-an-idempotency-key",
    ),
    pytest.param(
        reserve(
            f"{EXPRESSION_AT}.values[0] is 5000 characters long; a selector value is at most 256",
            devices=devices([{"key": "giId", "op": "Lt", "values": ["9" * 5000]}]),
        ),
        id="500-on-a-gt-lt-bound-of-thousands-of-digits",
    ),
    pytest.param(
        reserve(
            "the window would end after the year 9999",
            start="9999-12-31T23:59:59Z",
        ),
        id="500-on-a-window-ending-after-year-9999",
    ),
]


class App:
    """The app over a one-pool MIG fleet; acme has quota in it, so GOOD is booked."""

    def __init__(self, store: Store) -> None:
        load_fleet(store, fleet_spec(nodes=1, layout="all-1g.10gb"), T0)
        self.client = api_client(store)
        self.tokens = {"admin": admin_token(store), "acme": tenant_token(store, "acme")}
        offered = self.send(
            "admin", "pools.offer", {"poolId": "p1", "tenantId": "acme", "quota": {"gpu.mig": 4}}
        )
        assert offered.status_code in (200, 201), offered.text

    def send(self, who: str, method: str, body: dict[str, Any]) -> Any:
        """The call as the method table renders it, with the body as raw JSON (NaN, lone surrogates)."""
        http = METHODS[method].render(body)
        headers = {**bearer(self.tokens[who]), "Content-Type": "application/json"}
        return self.client.request(
            http.verb, http.path, params=http.query, content=json.dumps(http.json), headers=headers
        )


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_invalid_input_naming_the_field(store: Store, case: Case) -> None:
    app = App(store)
    response = app.send(case.who, case.method, case.body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "INVALID_INPUT", error
    assert case.message in error["message"], error
    # Nothing was booked by the refused request, and the same request without the defect is served.
    if case.method == "reservations.create":
        assert app.send("acme", "reservations.create", GOOD).status_code == 201


def test_the_openapi_document_declares_the_domains_limits() -> None:
    """The wire models repeat the domain's limits for the OpenAPI document; they must not drift."""
    assert (wire.MAX_DEVICE_REQUESTS, wire.MAX_COUNT) == (admission.MAX_DEVICE_REQUESTS, admission.MAX_COUNT)
    assert (wire.MAX_EXPRESSIONS, wire.MAX_VALUES, wire.MAX_VALUE_LENGTH) == (
        selectors.MAX_EXPRESSIONS,
        selectors.MAX_VALUES,
        selectors.MAX_VALUE_LENGTH,
    )
    assert wire.MAX_DURATION_TEXT == timewin.MAX_DURATION_TEXT
    schemas = openapi_document.document()["components"]["schemas"]
    create, device = schemas["ReservationCreate"]["properties"], schemas["DeviceRequest"]["properties"]
    values = schemas["MatchExpression"]["properties"]["values"]["anyOf"][0]
    assert create["devices"]["maxItems"] == 16 and create["duration"]["maxLength"] == 64
    assert device["count"]["maximum"] == 65536
    assert schemas["Selector"]["properties"]["matchExpressions"]["maxItems"] == 32
    assert values["maxItems"] == 256
    assert {"type": "string", "maxLength": 256} in values["items"]["anyOf"]


REQUEST_SHAPES = [
    # 6. A body over the cap is refused before it is read (413), whatever route it is sent to.
    pytest.param(
        ("POST", "/v1/reservations", b"{" + b" " * 1_048_576 + b"}", 413),
        "the request body is larger than the limit of 1048576 bytes",
        id="unbounded-memory-from-a-large-reservation-body",
    ),
    pytest.param(
        ("POST", "/v1/tenants", b"[" + b"1," * 600_000 + b"1]", 413),
        "the request body is larger than the limit of 1048576 bytes",
        id="unbounded-memory-from-a-large-body-on-another-route",
    ),
    # 10. Unknown query parameters were ignored (every atom of every pool was listed).
    pytest.param(
        ("GET", "/v1/atoms?poolId=p1", None, 400),
        "poolId: unknown query parameter",
        id="unknown-query-parameter-on-atoms",
    ),
    pytest.param(
        ("GET", "/v1/reservations?pool_id=p1", None, 400),
        "pool_id: unknown query parameter",
        id="unknown-query-parameter-on-reservations",
    ),
    pytest.param(
        ("GET", "/v1/nodes?clusterId=c1", None, 400),
        "clusterId: unknown query parameter",
        id="unknown-query-parameter-on-nodes",
    ),
]


@pytest.mark.parametrize(("request_", "message"), REQUEST_SHAPES)
def test_bad_request_shapes_are_invalid_input_naming_the_limit(
    store: Store, request_: tuple[str, str, bytes | None, int], message: str
) -> None:
    app = App(store)
    verb, path, body, status = request_
    headers = {**bearer(app.tokens["acme"]), "Content-Type": "application/json"}
    response = app.client.request(verb, path, content=body, headers=headers)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == "INVALID_INPUT", error
    assert message in error["message"], error
