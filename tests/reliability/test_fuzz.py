"""Property-based fuzzing of the whole HTTP API with schemathesis: no request may answer 5xx.

Every operation of the app's OpenAPI document (`openapi.json` is the same document) is called in-process
(ASGI, no sockets) with generated requests, valid and invalid: schemathesis' coverage cases (boundary
values, wrong types, missing fields) and `BC_FUZZ_EXAMPLES` random ones per operation. Each operation
runs once with a fleet-admin token and once with a tenant's (`acme`, offered quota in `h100-mig`), each
over its own copy of a seeded SQLite database (examples/demo-fleet.yaml). The stateful run follows the
document's links (`better_compute.api.links`): a new reservation's id to get, cancel and release it, a
new tenant to a credential, a quota and a policy, a pool to an offer and a reservation, and so on.

`make test` runs the short version (5 examples per operation, 5 stateful scenarios per token);
`make fuzz` sets BC_FUZZ_EXAMPLES (and BC_FUZZ_SCENARIOS, BC_FUZZ_STEPS) for a long one. Generation is
derandomized and Hypothesis' example database is off, so a run with the same counts repeats exactly.

A 500 fails the test with the request that caused it (shrunk) and the last frames of the exception the
app raised. A 500 that is one of KNOWN_DEFECTS, being fixed elsewhere, is reported as an xfailed subtest
instead, and fuzzing goes on: remove its entry once the fix lands.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hypothesis
import pytest
import schemathesis
from hypothesis import HealthCheck
from schemathesis.checks import not_a_server_error
from schemathesis.core import NotSet
from schemathesis.core.transport import Response

from better_compute.domain.tenancy.credentials import Principal
from better_compute.entrypoints.fleet import load_fleet, read_fleet
from better_compute.service.fleet import pools
from better_compute.service.ledger import reservations
from better_compute.service.ledger.booking_index import BookingIndex
from better_compute.storage.store import Store
from tests import openapi_document
from tests.builders import T0, admin_token, real_app, tenant_token

REPO = Path(__file__).resolve().parents[2]
DEMO_FLEET = REPO / "examples" / "demo-fleet.yaml"


def _count(name: str, default: int) -> int:
    value = int(os.environ.get(name, default))
    assert value >= 1, f"{name} must be a positive integer"
    return value


EXAMPLES = _count("BC_FUZZ_EXAMPLES", 5)
"""Random requests per operation and token (schemathesis' coverage cases come on top)."""
SCENARIOS = _count("BC_FUZZ_SCENARIOS", 5)
"""Stateful scenarios per token."""
STEPS = _count("BC_FUZZ_STEPS", 6)
"""Calls per stateful scenario, at most."""

ROLES = ("admin", "tenant")
TENANT = "acme"

# Values drawn for these fields four times in five. Random strings almost never name a pool, tenant or
# node, so requests would stop at NOT_FOUND before reaching admission; and random values seldom sit on
# the edges where 500s hide: digit runs, the year 9999, 64-bit limits, characters that change how text
# is shown. Each dictionary holds both kinds.
SPOOFING = ["\u202eevil", "a\u200bb", "\ufeffacme", "x\u0301", "\u2066rtl\u2069", "\x7f", "a\u0085b"]
DICTIONARIES: dict[str, list[str | int | float]] = {
    "pools": ["h100-mig", "h100-timeslice", "l40s-timeslice", "a100-exclusive", "h100-mig\u202e", "p" * 300],
    "tenants": ["platform", "acme", "acme\u200b", "t" * 300],
    "clusters": ["eu-west", "us-east", "eu-west\u2066"],
    "nodes": ["euw-h100-a-1", "euw-h100-a-2", "euw-h100-b", "euw-l40s-1", "use-a100-1", "use-a100-2"],
    "names": ["Globex", "notebooks", *SPOOFING, "n" * 5000],
    "durations": [
        *["30m", "4h", "2d", "1h30m", "PT2H"],
        *["9" * 30 + "h", "1" * 5000 + "m", "99999999999d", "P9999Y", "PT" + "9" * 40 + "S", "1h" * 40],
    ],
    "starts": [
        *["2026-12-01T09:00:00Z", "2026-12-01T13:00:00+02:00", "2027-01-01T00:00:00Z"],
        *["9999-12-31T23:59:59Z", "9999-12-31T20:00:00-05:00", "0001-01-01T00:00:00Z", "2026-12-01T09:00:00"],
    ],
    "layouts": ["all-1g.10gb", "all-7g.80gb", "mixed:3g.40gb+2x2g.20gb", "mixed:" + "1g.10gb+" * 500],
    "attributes": ["migProfile", "model", "memoryMiB", "numaNode", "node", "k" * 300],
    "values": ["1g.10gb", "3g.40gb", 40960, 2**63 - 1, -(2**63), 2**64, 10**1000, 1e308, -1e-308, "9" * 400],
    "counts": [1, 2, 8, 64, 65536, 2**31, 2**63, 10**20],
    "periods": [
        *["2026-12-01", "2027-01-01", "2026-12-01T09:00:00Z", "2026-12-01T13:00:00+02:00"],
        *["9999-12-31", "0001-01-01", "2026-02-30", "9999-12-31T23:59:59-23:59", "2026-12-01T09:00:00"],
    ],
    "meters": ["gpu.h100.hours", "gpu.a100.hours", "gpu.l40s.hours", "m\u202e", "m" * 300],
    "prices": ["2.50", "0", "0.000000001", "-1", "1e3", "NaN", "9" * 40, "1.2.3"],
    "currencies": ["USD", "eur", "JPY", "BHD", "US", "\u20ac", "usd\x00"],
}
BINDINGS: dict[str, str] = {
    "body.poolId": "pools",
    "path.poolId": "pools",
    "path.id": "pools",
    "query.poolId": "pools",
    "query.pool": "pools",
    "body.tenantId": "tenants",
    "body.ownerTenantId": "tenants",
    "query.tenantId": "tenants",
    "query.ownerTenantId": "tenants",
    "body.id": "tenants",
    "body.clusterId": "clusters",
    "query.clusterId": "clusters",
    "query.cluster": "clusters",
    "query.node": "nodes",
    "body.nodes.[*]": "nodes",
    "body.name": "names",
    "body.idempotencyKey": "names",
    "body.duration": "durations",
    "body.start": "starts",
    "body.policy.migLayout": "layouts",
    "body.devices.[*].selector.matchExpressions.[*].key": "attributes",
    "body.devices.[*].selector.matchExpressions.[*].values.[*]": "values",
    "body.devices.[*].count": "counts",
    "body.limit": "counts",
    "body.generation": "counts",
    "body.limits.gpuCount": "counts",
    "body.limits.gpuSlices": "counts",
    "path.tenantId": "tenants",
    "query.from": "periods",
    "query.to": "periods",
    "body.meter": "meters",
    "body.perHour": "prices",
    "body.currency": "currencies",
}

CONFIG = schemathesis.Config.from_dict(
    {
        # Security parameters are left out of generation: every request carries the role's real token
        # (the tests in tests/api cover missing and garbled ones).
        "generation": {
            "mode": "all",
            "deterministic": True,
            "database": "none",
            "with-security-parameters": False,
        },
        # No 5xx, and every answer is one the document describes: its status and its body's schema
        # (refusals included, `400` and `default` as `ErrorBody`).
        "checks": {
            "enabled": False,
            "not_a_server_error": {"enabled": True},
            "status_code_conformance": {"enabled": True},
            "response_schema_conformance": {"enabled": True},
        },
        "dictionaries": {name: {"values": values} for name, values in DICTIONARIES.items()},
        "parameters": {key: {"dictionary": name, "probability": 0.8} for key, name in BINDINGS.items()},
        "phases": {"stateful": {"max-steps": STEPS}},
        # Schemathesis' own notices (e.g. that no auth is configured: the tests send the token) would be
        # raised as errors under `-W error`; this run does not need them.
        "warnings": False,
    }
)
SCHEMA = schemathesis.openapi.from_dict(openapi_document.document(), config=CONFIG)

SETTINGS = hypothesis.settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[
        # The app fixture is built once per operation and token, on purpose: state accumulates over the
        # examples as it would on a server.
        HealthCheck.function_scoped_fixture,
        # Requests are slow to make compared with Hypothesis' expectations of a strategy; irrelevant here.
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
        HealthCheck.filter_too_much,
    ],
)


# --- Known defects -------------------------------------------------------------------------------


@dataclass(frozen=True)
class KnownDefect:
    """A 500 that is known and being fixed elsewhere: recognised by the exception the app raised."""

    name: str
    exception: str
    """The exception's class name."""
    frame: str
    """A regular expression one of the traceback's frames (`file.py:function`) matches."""

    def matches(self, exc: BaseException) -> bool:
        frames = [f"{Path(f.filename).name}:{f.name}" for f in traceback.extract_tb(exc.__traceback__)]
        return type(exc).__name__ == self.exception and any(re.search(self.frame, f) for f in frames)


KNOWN_DEFECTS: tuple[KnownDefect, ...] = ()
"""Known, unfixed 500s, as expected failures. Remove an entry once its fix lands; a fuzz run that no
longer meets it does not complain, so check with `make fuzz`."""


# --- The app under test ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Seeded:
    """A migrated SQLite file holding the demo fleet, and a bearer token per role."""

    database: Path
    tokens: dict[str, str]


@pytest.fixture(scope="session")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Seeded:
    folder = tmp_path_factory.mktemp("fuzz-seed")
    store = Store.open(f"sqlite:///{folder / 'bc.db'}")
    try:
        load_fleet(store, read_fleet(DEMO_FLEET), T0)
        tokens = {"admin": admin_token(store), "tenant": tenant_token(store, TENANT)}
        root = Principal(tenant_id=None, is_admin=True, credential_id="fuzz-seed")
        pools.offer(store, root, "h100-mig", TENANT, {"gpu.mig": 8}, T0)
        # A reservation of each tenant's, so that lists have items for the stateful run to follow.
        index, ids = BookingIndex(), iter(["rsv-seed-acme", "rsv-seed-platform"])
        for tenant, pool, cls in ((TENANT, "h100-mig", "gpu.mig"), ("platform", "a100-exclusive", "gpu")):
            wanted = {
                "tenantId": tenant,
                "poolId": pool,
                "duration": "4h",
                "devices": [{"class": cls, "count": 1}],
            }
            reservations.create(store, index, root, wanted, T0, lambda: next(ids))
    finally:
        store.close()
    return Seeded(folder / "bc.db", tokens)


@dataclass
class Target:
    """The app over a fresh copy of the seeded database, called with one role's token."""

    app: Any = field(repr=False)
    role: str
    headers: dict[str, str] = field(repr=False)
    known: set[str]
    """Known defects already reported for this app."""


@pytest.fixture(params=ROLES)
def target(request: pytest.FixtureRequest, seeded: Seeded, tmp_path: Path) -> Iterator[Target]:
    shutil.copyfile(seeded.database, tmp_path / "bc.db")
    store = Store.open(f"sqlite:///{tmp_path / 'bc.db'}", migrate_schema=False)
    try:
        app = real_app(store)
        headers = {"Authorization": f"Bearer {seeded.tokens[request.param]}"}
        yield Target(app, request.param, headers, set())
    finally:
        store.close()


def describe(case: schemathesis.Case) -> str:
    """The request a case makes, without the token: enough to make it again with curl or the client."""
    query = "&".join(f"{k}={v}" for k, v in (case.query or {}).items())
    line = f"{case.method.upper()} {case.formatted_path}" + (f"?{query}" if query else "")
    headers = {k: v for k, v in (case.headers or {}).items() if k.lower() != "authorization"}
    if headers:
        line += f"\nheaders: {headers}"
    if not isinstance(case.body, NotSet):
        try:
            body = json.dumps(case.body, ensure_ascii=True)
        except (TypeError, ValueError):
            body = repr(case.body)
        line += f"\nbody ({case.media_type}): {body[:4000]}" + (" ..." if len(body) > 4000 else "")
    return line


def last_frames(exc: BaseException, count: int = 6) -> str:
    """The app's own frames nearest the exception, and the exception."""
    every = traceback.extract_tb(exc.__traceback__)
    frames = [f for f in every[:-1] if "better_compute" in f.filename] + every[-1:]
    lines = [f"  {Path(f.filename).name}:{f.lineno} in {f.name}: {f.line}" for f in frames[-count:]]
    return "\n".join([*lines, f"{type(exc).__name__}: {exc}"[:2000]])


def call(target: Target, case: schemathesis.Case, subtests: pytest.Subtests) -> Response | None:
    """Make the case's request; a 500 fails (or, for a known defect, xfails a subtest).

    On a 500 the app's catch-all handler answers `INTERNAL` and Starlette re-raises the exception to the
    server (here, to the in-process client): that exception is what tells one 500 from another."""
    try:
        # A copy: the transport adds its own headers to the dict it is given.
        return case.call(app=target.app, headers=dict(target.headers))
    except Exception as exc:
        known = next((d for d in KNOWN_DEFECTS if d.matches(exc)), None)
        report = f"{case.operation.label} as {target.role} answered 500\n{describe(case)}\n{last_frames(exc)}"
        if known is None:
            raise AssertionError(report) from exc
        if known.name not in target.known:
            target.known.add(known.name)
            with subtests.test(msg=f"known defect: {known.name}"):
                pytest.xfail(f"known defect ({known.name}): {report}")
        return None


@SCHEMA.parametrize()
@SETTINGS
def test_no_request_answers_5xx(case: schemathesis.Case, target: Target, subtests: pytest.Subtests) -> None:
    response = call(target, case, subtests)
    if response is not None:
        case.validate_response(response, checks=[not_a_server_error])


def test_stateful_runs_along_the_links_answer_no_5xx(target: Target, subtests: pytest.Subtests) -> None:
    """Scenarios of linked calls (create a reservation, then get, cancel or release it; create a tenant,
    then its credential, quota or policy; ...), each checked for 500s like a single call."""
    assert SCHEMA.statistic.transitions.total > 0, "the OpenAPI document has no links to follow"

    class Links(SCHEMA.as_state_machine()):  # type: ignore[misc]
        def call(self, case: schemathesis.Case, **kwargs: Any) -> Response:
            response = call(target, case, subtests)
            # A known defect answered 500: this scenario cannot go on from it.
            hypothesis.assume(response is not None)
            assert response is not None
            return response

        def validate_response(self, response: Response, case: schemathesis.Case, **kwargs: Any) -> None:
            case.validate_response(response, checks=[not_a_server_error])

    Links.run(settings=hypothesis.settings(SETTINGS, max_examples=SCENARIOS, stateful_step_count=STEPS))


def _raise_overflow() -> None:
    raise OverflowError("date value out of range")


def test_a_known_defect_is_told_by_its_exception_and_a_frame() -> None:
    defect = KnownDefect("year 9999", "OverflowError", r"test_fuzz\.py:_raise_overflow$")
    try:
        _raise_overflow()
    except OverflowError as exc:
        assert defect.matches(exc)
        assert not KnownDefect("other", "ValueError", r"_raise_overflow").matches(exc)
        assert not KnownDefect("other", "OverflowError", r"elsewhere").matches(exc)
