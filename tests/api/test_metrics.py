"""`GET /metrics` through the real app, on SQLite and PostgreSQL: each series of docs/metrics.md
with the value the fleet's story gives it."""

from __future__ import annotations

import os
import shutil
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from better_compute import __version__
from better_compute.domain.tenancy.records import Tenant
from better_compute.storage.store import Store
from tests.api.test_reservations import World, error
from tests.builders import T0, admin_token, api_client, bearer, tenant_token

GPUS = [{"class": "gpu", "count": 2}]
FLEET_METERS = ("gpu.a100.hours", "gpu.h100.hours", "gpu.l40s.hours")


@pytest.fixture
def world(store: Store) -> World:
    return World(store)


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(world: World, **headers: str) -> Samples:
    """Every sample of /metrics by (name, sorted labels)."""
    r = world.http.get("/metrics", headers=headers)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }


def value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def test_reservations_created_and_refused_are_counted_by_code(world: World) -> None:
    world.offer("a100", "acme", gpu=2)
    assert world.reserve(world.acme, "a100", GPUS).status_code == 201
    over = world.reserve(world.acme, "a100", GPUS)
    assert error(over)["code"] == "QUOTA_EXCEEDED"
    assert error(world.reserve(world.acme, "a100", [{"class": "gpu", "count": 0}]))["code"] == "INVALID_INPUT"
    assert error(world.reserve(world.acme, "nope", GPUS))["code"] == "NOT_FOUND"
    assert world.http.post("/v1/reservations", json={}).status_code == 401
    keyed = world.reserve(world.platform, "a100", GPUS, idempotencyKey="k1")
    assert keyed.status_code == 201
    assert world.reserve(world.platform, "a100", GPUS, idempotencyKey="k1").status_code == 200  # a replay

    samples = scrape(world)
    assert value(samples, "better_compute_reservations_created_total") == 2
    refused = {
        dict(labels)["code"]: n
        for (name, labels), n in samples.items()
        if name == "better_compute_reservations_refused_total"
    }
    assert {code: n for code, n in refused.items() if n} == {
        "QUOTA_EXCEEDED": 1,
        "INVALID_INPUT": 1,
        "NOT_FOUND": 1,
        "UNAUTHENTICATED": 1,
    }
    assert refused["INSUFFICIENT_CAPACITY"] == 0  # every code's series is there from the start
    assert value(samples, "better_compute_admission_seconds_count") == 7
    assert value(samples, "better_compute_admission_seconds_bucket", le="+Inf") == 7


def test_atoms_by_pool_class_and_state_follow_bookings(world: World) -> None:
    booked = world.reserve(world.platform, "a100", GPUS, duration="2h")
    assert booked.status_code == 201
    later = world.reserve(world.platform, "a100", GPUS, start="2026-12-01T12:00:00Z", duration="1h")
    assert later.status_code == 201

    samples = scrape(world)
    a100 = {
        state: value(samples, "better_compute_atoms", pool="a100", **{"class": "gpu"}, state=state)
        for state in ("free", "booked", "changing", "parent", "unavailable")
    }
    assert a100 == {"free": 2, "booked": 2, "changing": 0, "parent": 0, "unavailable": 0}
    # 2 nodes x 2 H100s, each split as 3g.40gb + 2x 2g.20gb: a parent and 3 instances per GPU.
    assert value(samples, "better_compute_atoms", pool="h100", **{"class": "gpu"}, state="parent") == 4
    assert value(samples, "better_compute_atoms", pool="h100", **{"class": "gpu.mig"}, state="free") == 12
    # timeslice: a parent and 4 slots per L40S.
    assert value(samples, "better_compute_atoms", pool="l40s", **{"class": "gpu.slot"}, state="free") == 8

    world.clock.now = T0 + timedelta(hours=2, minutes=30)  # the first has ended, the second is ahead
    samples = scrape(world)
    assert value(samples, "better_compute_atoms", pool="a100", **{"class": "gpu"}, state="booked") == 0
    world.clock.now = T0 + timedelta(hours=3, minutes=30)
    samples = scrape(world)
    assert value(samples, "better_compute_atoms", pool="a100", **{"class": "gpu"}, state="booked") == 2


def test_billable_gpu_seconds_by_meter_count_the_time_held_up_to_now(world: World) -> None:
    world.offer("h100", "acme", gpu_mig=4)
    assert world.reserve(world.platform, "a100", GPUS, duration="2h").status_code == 201
    released = world.reserve(world.platform, "a100", [{"class": "gpu", "count": 1}], duration="4h")
    assert (
        world.reserve(world.acme, "h100", [{"class": "gpu.mig", "count": 1}], duration="1h").status_code
        == 201
    )
    cancelled = world.reserve(world.platform, "a100", GPUS, start="2026-12-01T20:00:00Z", duration="1h")
    assert released.status_code == cancelled.status_code == 201

    samples = scrape(world)
    assert {
        m: value(samples, "better_compute_billable_gpu_seconds_total", meter=m) for m in FLEET_METERS
    } == {
        "gpu.a100.hours": 0,
        "gpu.h100.hours": 0,
        "gpu.l40s.hours": 0,
    }
    world.clock.now = T0 + timedelta(hours=1)
    r = world.http.post(f"/v1/reservations/{released.json()['id']}/release", headers=world.platform)
    assert r.status_code == 200, r.text
    r = world.http.post(f"/v1/reservations/{cancelled.json()['id']}/cancel", headers=world.platform)
    assert r.status_code == 200, r.text

    world.clock.now = T0 + timedelta(hours=3)
    samples = scrape(world)
    # a100: 2 GPUs for their 2 hours, and 1 GPU for the hour before its release; the cancelled
    # reservation bills nothing. h100: one MIG instance (a 3g.40gb, 3/7 of the GPU) for its hour, as
    # the bills count it.
    billed = "better_compute_billable_gpu_seconds_total"
    assert value(samples, billed, meter="gpu.a100.hours") == pytest.approx(5 * 3600)
    assert value(samples, billed, meter="gpu.h100.hours") == pytest.approx(3 / 7 * 3600)
    assert value(samples, billed, meter="gpu.l40s.hours") == 0


def test_events_by_type_are_counted_once_each_across_scrapes(world: World) -> None:
    first = scrape(world)
    assert value(first, "better_compute_events_total", type="fleet.registered") == 1
    assert ("better_compute_events_total", (("type", "reservation.created"),)) not in first
    assert world.reserve(world.platform, "a100", GPUS).status_code == 201

    samples = scrape(world)
    assert value(samples, "better_compute_events_total", type="reservation.created") == 1
    assert value(samples, "better_compute_events_total", type="ledger.booked") == 2  # one per booking
    assert value(samples, "better_compute_events_total", type="fleet.registered") == 1
    again = scrape(world)
    assert value(again, "better_compute_events_total", type="ledger.booked") == 2


def test_a_ledger_conflict_is_counted(world: World) -> None:
    first = world.reserve(world.platform, "a100", [{"class": "gpu", "count": 4}], duration="4h")
    nxt = world.reserve(
        world.platform, "a100", [{"class": "gpu", "count": 4}], start="2026-12-01T13:00:00Z", duration="4h"
    )
    assert first.status_code == nxt.status_code == 201
    rid = first.json()["id"]
    r = world.http.post(
        f"/v1/reservations/{rid}/extend", json={"id": rid, "duration": "1h"}, headers=world.platform
    )
    assert error(r)["code"] == "CONFLICT"
    assert value(scrape(world), "better_compute_ledger_conflicts_total") == 1


TENANT_SERIES = (
    "better_compute_quota_used",
    "better_compute_quota_limit",
    "better_compute_unplaced_replicas",
)
"""The only series that name a tenant (besides the opt-in better_compute_allocation_info)."""


def test_metrics_are_per_app_and_name_a_tenant_only_in_the_quota_and_unplaced_series(store: Store) -> None:
    one, two = World(store), api_client(store)
    one.offer("a100", "acme", gpu=2)
    assert one.reserve(one.acme, "a100", GPUS).status_code == 201
    text = two.get("/metrics").text
    assert "better_compute_reservations_created_total 0.0" in text  # the other app's counter
    naming = {
        family.name
        for family in text_string_to_metric_families(one.http.get("/metrics").text)
        for s in family.samples
        if "acme" in s.labels.values() or "globex" in s.labels.values()
    }
    assert naming and naming <= set(TENANT_SERIES)


def test_metrics_may_require_a_fleet_admin_token(store: Store) -> None:
    http = api_client(store, metrics_auth="admin")
    missing = http.get("/metrics")
    assert missing.status_code == 401 and missing.json()["error"]["code"] == "UNAUTHENTICATED"
    with store.begin() as tx:
        tx.tenants.put([Tenant("acme", "Acme", T0)])
    tenant = http.get("/metrics", headers=bearer(tenant_token(store, "acme")))
    assert tenant.status_code == 403 and tenant.json()["error"]["code"] == "FORBIDDEN"
    admin = http.get("/metrics", headers=bearer(admin_token(store)))
    assert admin.status_code == 200 and "better_compute_atoms" in admin.text


def test_openmetrics_is_served_to_a_scraper_that_asks_for_it(world: World) -> None:
    r = world.http.get("/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/openmetrics-text")
    assert r.text.rstrip().endswith("# EOF")


def test_promtool_check_metrics_passes(world: World) -> None:
    """Prometheus's own linter takes the whole answer: names, units, types and help texts. It must
    run in CI (`.ci/run` installs promtool); elsewhere it runs where promtool is installed."""
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("CI"):
            pytest.fail("CI is set but promtool is not installed (.ci/run installs it)")
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus)")
    world.offer("h100", "acme", gpu_mig=4)
    assert world.reserve(world.platform, "a100", GPUS).status_code == 201
    assert world.reserve(world.acme, "h100", [{"class": "gpu.mig", "count": 1}]).status_code == 201
    assert world.http.get("/v1/reservations/nope", headers=world.platform).status_code == 404
    text = world.http.get("/metrics").text
    checked = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "better_compute_billable_gpu_seconds_total" in text and "process_cpu_seconds_total" in text


def _http(samples: Samples, method: str, route: str, status: int) -> float:
    return samples.get(
        (
            "better_compute_http_requests_total",
            (("method", method), ("route", route), ("status", str(status))),
        ),
        0,
    )


def test_http_requests_are_counted_by_route_template_and_status_never_by_raw_path(world: World) -> None:
    for rid in ("r-1", "r-2", "r-3"):
        assert world.http.get(f"/v1/reservations/{rid}", headers=world.platform).status_code == 404
    assert world.reserve(world.platform, "a100", GPUS).status_code == 201
    assert world.http.get("/no/such/thing").status_code == 404
    assert world.http.request("BREW", "/v1/reservations").status_code == 405

    samples = scrape(world)
    assert _http(samples, "GET", "/v1/reservations/{id}", 404) == 3
    assert _http(samples, "POST", "/v1/reservations", 201) == 1
    assert _http(samples, "GET", "unmatched", 404) == 1
    assert _http(samples, "other", "/v1/reservations", 405) == 1
    routes = {dict(labels)["route"] for name, labels in samples if name.startswith("better_compute_http_")}
    assert not any("r-1" in r or "no/such" in r for r in routes)
    duration = "better_compute_http_request_duration_seconds_count"
    key = (("method", "GET"), ("route", "/v1/reservations/{id}"), ("status", "404"))
    assert samples[(duration, key)] == 3


def test_build_info_and_the_process_figures_are_answered(world: World) -> None:
    samples = scrape(world)
    info = [dict(labels) for name, labels in samples if name == "better_compute_build_info"]
    assert len(info) == 1 and info[0]["version"] == __version__
    assert value(samples, "process_cpu_seconds_total") > 0
    assert value(samples, "process_resident_memory_bytes") > 0
    assert value(samples, "process_open_fds") > 0


@pytest.mark.both_stores
def test_nodes_by_state_and_the_age_of_their_last_contact(world: World, store: Store) -> None:
    with store.begin() as tx:  # mig-1 reported a minute ago, ex-1 four minutes ago; the rest never
        assert tx.nodes.accept_sequences([("mig-1", 1, T0 - timedelta(minutes=1))])
        assert tx.nodes.accept_sequences([("ex-1", 1, T0 - timedelta(minutes=4))])
    cordon = world.http.patch("/v1/nodes/ex-2", json={"cordoned": True}, headers=world.admin)
    assert cordon.status_code == 200, cordon.text

    samples = scrape(world)
    nodes = {
        (dict(labels)["state"], dict(labels)["cordoned"]): n
        for (name, labels), n in samples.items()
        if name == "better_compute_nodes"
    }
    assert {k: n for k, n in nodes.items() if n} == {
        ("live", "false"): 1,
        ("silent", "false"): 1,
        ("unjoined", "false"): 2,
        ("unjoined", "true"): 1,
    }
    assert nodes[("live", "true")] == 0  # every state's series is there, 0 included
    age = "better_compute_node_last_contact_age_seconds"
    assert value(samples, age, node="mig-1") == 60
    assert value(samples, age, node="ex-1") == 240
    assert (age, (("node", "ts"),)) not in samples  # never heard from: no age to give

    world.clock.now = T0 + timedelta(minutes=2)  # 3 minutes since mig-1's report: past the 150 s lease
    samples = scrape(world)
    assert value(samples, "better_compute_nodes", cluster="c1", state="silent", cordoned="false") == 2
    assert value(samples, age, node="mig-1") == 180


def test_quota_used_and_limit_per_tenant_pool_and_class(world: World) -> None:
    world.offer("a100", "acme", gpu=2)
    world.offer("h100", "acme", gpu_mig=4)
    assert world.reserve(world.acme, "a100", [{"class": "gpu", "count": 1}], duration="1h").status_code == 201
    assert world.reserve(world.acme, "h100", [{"class": "gpu.mig", "count": 2}]).status_code == 201

    samples = scrape(world)
    used = "better_compute_quota_used"
    assert value(samples, used, tenant="acme", pool="a100", **{"class": "gpu"}) == 1
    assert value(samples, used, tenant="acme", pool="h100", **{"class": "gpu.mig"}) == 2
    assert (
        value(samples, "better_compute_quota_limit", tenant="acme", pool="h100", **{"class": "gpu.mig"}) == 4
    )

    world.clock.now = T0 + timedelta(hours=2)  # the a100 booking has ended
    samples = scrape(world)
    assert value(samples, used, tenant="acme", pool="a100", **{"class": "gpu"}) == 0  # its row stays, at 0
    assert value(samples, used, tenant="acme", pool="h100", **{"class": "gpu.mig"}) == 2


@pytest.mark.both_stores
def test_pool_fragmentation_against_the_sizes_its_bookings_held(world: World) -> None:
    """better_compute_pool_fragmentation_ratio, worked out by hand (docs/metrics.md#fragmentation)."""
    ratio = "better_compute_pool_fragmentation_ratio"
    samples = scrape(world)
    # No history: each pool against the sizes its own atoms come in, which use every free atom of
    # a100 and l40s. h100's GPUs are cut mixed:3g.40gb+2x2g.20gb (429 + 286 + 286 milli free each)
    # and its sizes are a 3g and a 2g task, equally likely: the 3g task cannot use the two 2g
    # instances (a task takes one instance whole), so half the time 572 of each GPU's 1001 is
    # stranded: 286 / 1001 = 2/7.
    fragmented = {pool: value(samples, ratio, pool=pool) for pool in ("a100", "h100", "l40s")}
    assert fragmented == {"a100": 0.0, "h100": pytest.approx(2 / 7), "l40s": 0.0}
    world.offer("l40s", "platform", gpu_slot=8)
    slots = [{"class": "gpu.slot", "count": 3}]
    assert world.reserve(world.platform, "l40s", slots).status_code == 201
    assert world.reserve(world.platform, "l40s", slots).status_code == 201
    # One slot (250 milli) free on each L40S; the only size held is 3 slots (750): all 500 is stranded.
    assert value(scrape(world), ratio, pool="l40s") == 1.0

    world.clock.now = T0 + timedelta(hours=5)  # both have ended; what they held is still the record
    assert value(scrape(world), ratio, pool="l40s") == 0.0  # two free GPUs: 750 fits either
    two = world.reserve(world.platform, "l40s", [{"class": "gpu.slot", "count": 2, "sameGpu": True}])
    assert two.status_code == 201, two.text
    # Free: 500 + 1000. Held: 3 slots twice, 2 slots once. A 3-slot task cannot use the 500 (weight
    # 2/3), a 2-slot one can: 2/3 x 500 / 1500.
    assert value(scrape(world), ratio, pool="l40s") == pytest.approx(2 / 9)
    assert value(scrape(world), ratio, pool="a100") == 0.0

    world.clock.now = T0 + timedelta(days=31)  # the first two are past the 30 days
    samples = scrape(world)
    assert value(samples, ratio, pool="l40s") == 0.0  # only 2 slots held: every free GPU takes it


@pytest.mark.both_stores
def test_pool_fragmentation_counts_what_workload_replicas_hold(store: Store) -> None:
    from tests.api.test_workloads import World as Workloads
    from tests.api.test_workloads import shape

    world = Workloads(store)
    world.quota(scope="fleet", guaranteed_devices=8)
    ratio = "better_compute_pool_fragmentation_ratio"

    def sjc() -> float:
        r = world.http.get("/metrics")
        found = {
            s.labels["pool"]: s.value
            for family in text_string_to_metric_families(r.text)
            for s in family.samples
            if s.name == ratio
        }
        return found["p-sjc-1"]

    # sjc-1 is one node of 8 H100s. One replica of 3 GPUs: 5 wholly free, and 3 fit in them.
    world.create({"name": "a", "shape": shape(3), "replicas": 1, "cluster": "sjc-1"})
    assert sjc() == 0.0
    # Another: 2 free, and the only size held (3 GPUs, twice) cannot use them: all stranded.
    world.create({"name": "b", "shape": shape(3), "replicas": 1, "cluster": "sjc-1"})
    assert sjc() == 1.0


@pytest.mark.both_stores
def test_unplaced_replicas_are_counted_per_tenant(store: Store) -> None:
    from tests.api.test_workloads import World as Workloads
    from tests.api.test_workloads import shape

    world = Workloads(store)
    world.quota(scope="fleet", guaranteed_devices=8)
    made = world.create({"name": "big", "shape": shape(), "replicas": 3})
    assert made["unplacedReplicas"] == 2
    r = world.http.get("/metrics")
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }
    assert value(samples, "better_compute_unplaced_replicas", tenant="acme") == 2


@pytest.mark.both_stores
def test_allocation_info_joins_allocations_to_dcgm_labels_only_when_enabled(store: Store) -> None:
    world = World(store)
    world.offer("h100", "acme", gpu_mig=4)
    mig = world.reserve(world.acme, "h100", [{"class": "gpu.mig", "count": 1}])
    whole = world.reserve(world.platform, "a100", [{"class": "gpu", "count": 1}])
    assert mig.status_code == whole.status_code == 201
    assert "better_compute_allocation_info" not in world.http.get("/metrics").text  # opt-in

    http = api_client(store, metrics_allocations=True)
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(http.get("/metrics").text)
        for s in family.samples
        if s.name == "better_compute_allocation_info"
    }
    rows = [(dict(labels), n) for (_, labels), n in samples.items()]
    held = {r["tenant"]: r for r, _ in rows}
    assert len(rows) == 2 and set(held) == {"acme", "platform"} and all(n == 1 for _, n in rows)
    with store.read() as tx:
        got = {g.id: g for g in tx.gpus.page(None, None, None)}
    mig_row, whole_row = held["acme"], held["platform"]
    assert mig_row["allocation"] == mig.json()["id"]
    gpu = got[mig_row["UUID"]]
    assert gpu.node_id == mig_row["Hostname"] and gpu.mig_mode_current
    assert mig_row["GPU_I_ID"] in {str(i.gi_id) for i in gpu.mig_instances}
    assert whole_row["GPU_I_ID"] == "" and got[whole_row["UUID"]].node_id == whole_row["Hostname"]


def test_every_series_answered_is_in_docs_metrics_md(store: Store) -> None:
    world = World(store)
    world.offer("h100", "acme", gpu_mig=4)
    assert world.reserve(world.acme, "h100", [{"class": "gpu.mig", "count": 1}]).status_code == 201
    http = api_client(store, metrics_allocations=True)
    families = {f.name for f in text_string_to_metric_families(http.get("/metrics").text)}
    documented = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text(encoding="utf-8")
    # The text parser names a counter without `_total`; `_created` samples are described once, in general.
    missing = {
        name
        for name in families
        if f"`{name}`" not in documented
        and f"`{name}_total`" not in documented
        and not name.endswith("_created")
    }
    assert not missing
    assert "better_compute_allocation_info" in families and "process_open_fds" in families
