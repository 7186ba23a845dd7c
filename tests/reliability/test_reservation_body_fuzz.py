"""Fuzzing the reservation route's own body handling: any body, any content type, never a 5xx, and
the same answer FastAPI's own handling of the route gives.

`POST /v1/reservations` reads, decodes and validates its body itself (`api.routes.reservations.
AdmissionRoute`, for speed), where every other route lets FastAPI do it; two 500s came from that
code so far. Each generated request goes to two apps over two copies of one seeded database, wired
alike (fixed clock, counting ids): the real one, and one that serves the same endpoint as every other
route is served (the API's `StrictQueryRoute`: FastAPI's handling, the body first read as
`api.bodies` reads every body, with the real error mapping and middleware). Their answers must be
equal, status and body (so a difference in what the route accepts shows too), and never 5xx.

Bodies: raw bytes; JSON truncated or spliced with garbage; arbitrary JSON values (huge and
non-finite numbers, lone surrogates, control and format characters) in UTF-8, UTF-16 and UTF-32; a
valid reservation with fields swapped for wrong types and edge values; nesting from 1 to 200,000
deep. Content types: JSON ones, spelled every way a client may, other types, garbled ones, none.

`make test` sends 50 x BC_FUZZ_EXAMPLES requests (250, a few seconds); `make fuzz` 25,000.
Derandomized, with Hypothesis' example database off, so a run with the same count repeats exactly.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hypothesis
import pytest
from fastapi import APIRouter, FastAPI
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from better_compute.api import errors, guards, metrics
from better_compute.api.auth import AUTHENTICATED
from better_compute.api.limits import BodyLimits
from better_compute.api.query import StrictQueryRoute
from better_compute.api.routes import reservations as routes
from better_compute.entrypoints.fleet import load_fleet
from better_compute.entrypoints.server import build_services
from better_compute.settings import Settings
from better_compute.storage.store import Store
from better_compute.wire.reservations import ReservationPublic
from tests.builders import T0, CountingIds, admin_token, bearer, fleet_spec, real_app, tenant_token

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

REQUESTS = 50 * int(os.environ.get("BC_FUZZ_EXAMPLES", "5"))

GOOD: dict[str, Any] = {"poolId": "p1", "devices": [{"class": "gpu.mig", "count": 1}], "duration": "1h"}


# --- What is sent ----------------------------------------------------------------------------------

EDGE_NUMBERS = [0, -1, 2**31, 2**63 - 1, 2**63, -(2**63) - 1, 2**64, 10**100, 1e308, -1e-308, 0.5]
EDGE_TEXT = ["", " ", "p1", "1h", "9" * 5000 + "h", "P9999Y", "9999-12-31T23:59:59Z", "\u202ep1", "\x00"]

characters = st.characters(exclude_categories=())  # every code point, lone surrogates included
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from(EDGE_NUMBERS),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(characters, max_size=20),
    st.sampled_from(EDGE_TEXT),
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(characters, max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)

SELECTED: dict[str, Any] = {
    **GOOD,
    "devices": [
        {
            "class": "gpu.mig",
            "count": 1,
            "selector": {"matchExpressions": [{"key": "migProfile", "op": "In", "values": ["1g.10gb"]}]},
        }
    ],
}
"""GOOD with a selector: a valid reservation with a place for every field of the wire model."""

PLACES: list[tuple[str | int, ...]] = [
    ("poolId",),
    ("tenantId",),
    ("devices",),
    ("devices", 0),
    ("devices", 0, "class"),
    ("devices", 0, "count"),
    ("devices", 0, "selector"),
    ("devices", 0, "selector", "matchExpressions"),
    ("devices", 0, "selector", "matchExpressions", 0),
    ("devices", 0, "selector", "matchExpressions", 0, "op"),
    ("devices", 0, "selector", "matchExpressions", 0, "values"),
    ("start",),
    ("duration",),
    ("idempotencyKey",),
    ("unknownField",),
]


@st.composite
def reservation_like(draw: st.DrawFn) -> Any:
    """A valid reservation with up to three of its fields set to anything (deepest first, so that
    each place is still there when it is set)."""
    body: Any = json.loads(json.dumps(SELECTED))
    places = sorted(set(draw(st.lists(st.sampled_from(PLACES), max_size=3))), key=len, reverse=True)
    for *path, last in places:
        parent = body
        for key in path:
            parent = parent[key]
        parent[last] = draw(values)
    return body


@st.composite
def encoded(draw: st.DrawFn, value: st.SearchStrategy[Any]) -> bytes:
    """JSON text of `value` (NaN and Infinity included, lone surrogates kept) in a JSON encoding."""
    text = json.dumps(draw(value), ensure_ascii=draw(st.booleans()))
    codec = draw(st.sampled_from(["utf-8", "utf-8", "utf-8", "utf-16", "utf-16-le", "utf-32-be"]))
    return text.encode(codec, "surrogatepass")


@st.composite
def garbled(draw: st.DrawFn) -> bytes:
    """Valid JSON cut short, or with bytes spliced in."""
    raw = draw(encoded(reservation_like()))
    at = draw(st.integers(0, len(raw)))
    return raw[:at] + draw(st.binary(max_size=8)) + (raw[at:] if draw(st.booleans()) else b"")


@st.composite
def nested(draw: st.DrawFn) -> bytes:
    """Arrays and objects nested far deeper than any parser is meant to follow, balanced or not; alone
    or where the route expects a value. (Depths near the parser's recursion limit are left out: there
    the outcome depends on how deep the calling stack already is.)"""
    depth = draw(st.sampled_from([1, 2, 10, 100, 500, 5_000, 50_000, 200_000]))
    opening, closing = draw(st.sampled_from([(b"[", b"]"), (b'{"a":', b"}")]))
    inner = opening * depth + b"1" + closing * (depth if draw(st.booleans()) else depth // 2)
    where = draw(st.sampled_from([b"%s", b'{"poolId": "p1", "duration": "1h", "devices": %s}']))
    return where.replace(b"%s", inner)


class Body(bytes):
    """A request body whose repr stays short (a failing example is printed; some are 1 MB)."""

    def __repr__(self) -> str:
        shown = bytes(self[:200])
        return f"Body({shown!r}{' ...' if len(self) > 200 else ''}, {len(self)} bytes)"


bodies = st.one_of(
    st.binary(max_size=200),
    garbled(),
    encoded(values),
    encoded(reservation_like()),
    encoded(reservation_like()),
    nested(),
    st.just(b""),
).map(Body)

JSON_TYPES = [
    "application/json",
    "application/json; charset=utf-8",
    "Application/JSON",
    " application/json ",
    "application/json;",
    "application/merge-patch+json",
    "application/vnd.api+json; v=1",
]
OTHER_TYPES = [
    "",
    "text/plain",
    "text/json",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
    "application",
    "application/",
    "/json",
    "application/x/+json",
    "application /json",
    "application/jsonx",
    "application/json+",
]
other_types = st.one_of(
    st.none(),
    st.sampled_from(OTHER_TYPES),
    st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=30),
)
content_types = st.integers(0, 9).flatmap(lambda n: st.sampled_from(JSON_TYPES) if n < 7 else other_types)
"""A JSON type seven times in ten: the body is then decoded, which is where the work is."""


# --- Where it is sent ------------------------------------------------------------------------------


def fastapi_own(store: Store) -> FastAPI:
    """An app over `store` wired as `real_app` is, whose one route is `POST /v1/reservations` as every
    other route of the API is served (`StrictQueryRoute`) over the real route's endpoint, with the
    real error mapping and middleware: FastAPI reads, decodes and validates the body, and solves the
    dependencies (the token, the services)."""
    app = FastAPI()
    app.state.services = build_services(store, clock=lambda: T0, ids=CountingIds())
    errors.install(app)
    metrics.install(app, app.state.services, "none")  # the route reports to the app's metrics
    router = APIRouter(prefix="/v1", dependencies=AUTHENTICATED)
    router.add_api_route(
        "/reservations",
        routes.create_reservation,
        methods=["POST"],
        response_model=ReservationPublic,
        status_code=201,
        route_class_override=StrictQueryRoute,
    )
    app.include_router(router)
    guards.install(app)
    settings = Settings()
    app.add_middleware(BodyLimits, max_bytes=settings.max_body_bytes, timeout=settings.timeout_request)
    return app


@dataclass(frozen=True)
class Pair:
    """The route as it is and as FastAPI would serve it, over equal copies of one database."""

    hot: TestClient
    plain: TestClient
    token: str

    def send(self, content_type: str | None, body: bytes) -> tuple[Any, Any]:
        headers = bearer(self.token)
        if content_type is not None:
            headers["content-type"] = content_type
        return tuple(  # type: ignore[return-value]
            client.post("/v1/reservations", content=body, headers=headers)
            for client in (self.hot, self.plain)
        )


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A SQLite file with a one-node MIG pool and a token for acme, who has quota in it."""
    path = tmp_path_factory.mktemp("body-fuzz") / "bc.db"
    store = Store.open(f"sqlite:///{path}")
    try:
        load_fleet(store, fleet_spec(nodes=1, layout="all-1g.10gb"), T0)
        token = tenant_token(store, "acme")
        admin = bearer(admin_token(store))
        offer = {"poolId": "p1", "tenantId": "acme", "quota": {"gpu.mig": 1000}}
        assert TestClient(real_app(store)).post("/v1/pools/p1/offers", headers=admin, json=offer).is_success
    finally:
        store.close()
    return path, token


@pytest.fixture
def pair(seeded: tuple[Path, str], tmp_path: Path) -> Iterator[Pair]:
    source, token = seeded
    stores = []
    for name in ("hot", "plain"):
        shutil.copyfile(source, tmp_path / f"{name}.db")
        stores.append(Store.open(f"sqlite:///{tmp_path / name}.db", migrate_schema=False))
    try:
        hot = TestClient(real_app(stores[0], ids=CountingIds()))
        plain = TestClient(fastapi_own(stores[1]))
        yield Pair(hot, plain, token)
    finally:
        for store in stores:
            store.close()


def describe(content_type: str | None, body: bytes) -> str:
    return f"content-type: {content_type!r}\nbody: {Body(body)!r}"


@given(content_type=content_types, body=bodies)
@hypothesis.settings(
    max_examples=REQUESTS,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[
        # One pair of apps for the whole run, on purpose: bookings accumulate as on a server.
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)
def test_any_body_is_answered_as_fastapi_would_and_never_5xx(
    pair: Pair, content_type: str | None, body: bytes
) -> None:
    hot, plain = pair.send(content_type, body)
    assert hot.status_code < 500, f"{hot.status_code} {hot.text}\n{describe(content_type, body)}"
    assert (hot.status_code, hot.json()) == (plain.status_code, plain.json()), describe(content_type, body)
