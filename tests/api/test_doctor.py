"""`doctor.run` (`GET /v1/doctor`) through the real app on SQLite and PostgreSQL: each finding as the
fleet's tables make it, admin only, and one `doctor.run` event per run."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError

from better_compute.domain.kernel.timewin import Window
from better_compute.domain.ledger.ledger import partition_allocation_id
from better_compute.entrypoints.fleet import load_fleet
from better_compute.service.ledger import ledger
from better_compute.storage.kernel.tables import bookings, capacity_mig_layouts, gpus, nodes
from better_compute.storage.store import Store
from tests.builders import T0, admin_token, api_client, at, bearer, fleet_spec, stored_events, tenant_token

NODE = "n"
"""The one node of `fleet_spec(nodes=1)`, in the mig pool p1."""


@pytest.fixture
def fleet(store: Store) -> Store:
    load_fleet(store, fleet_spec(nodes=1, layout="all-1g.10gb"), T0)
    return store


def doctor(store: Store, now: datetime = T0, **params: Any) -> Any:
    http = api_client(store, now=now)
    answer = http.get("/v1/doctor", params=params, headers=bearer(admin_token(store)))
    assert answer.status_code == 200, answer.text
    return answer.json()


def found(answer: Any) -> list[tuple[str, str]]:
    return [(f["code"], f["subject"]) for f in answer["findings"]]


def give_mig_quota(store: Store) -> None:
    http = api_client(store)
    body = {"tenantId": "acme", "poolId": "p1", "class": "gpu.mig", "limit": 4}
    assert http.put("/v1/quotas", json=body, headers=bearer(admin_token(store))).status_code == 200


def gpu_ids(store: Store) -> list[str]:
    with store.engine.connect() as conn:
        return [
            r[0] for r in conn.execute(select(gpus.c.id).where(gpus.c.node_id == NODE).order_by(gpus.c.id))
        ]


def grant(store: Store, granted_at: datetime) -> None:
    """The node's gate row as the gate leaves it at a grant (written here directly)."""
    row = {
        "node_id": NODE,
        "pool_id": "p1",
        "frozen_layout": "all-1g.10gb",
        "pending_layout": "all-3g.40gb",
        "state": "granted",
        "requested_at": granted_at - timedelta(hours=1),
        "scheduled_from": granted_at,
        "granted_at": granted_at,
        "granted_generation": 1,
    }
    with store.engine.begin() as conn:
        conn.execute(insert(capacity_mig_layouts).values(row))


def test_doctor_a_tenant_token_is_forbidden(fleet: Store) -> None:
    http = api_client(fleet)
    refused = http.get("/v1/doctor", headers=bearer(tenant_token(fleet, "acme")))
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "FORBIDDEN"
    assert refused.json()["error"]["details"] == {"action": "doctor.run"}
    assert stored_events(fleet, "doctor.run") == []


def test_doctor_refuses_a_silence_window_out_of_range(fleet: Store) -> None:
    http = api_client(fleet)
    for bad in ("0", "10081", "ten"):
        refused = http.get("/v1/doctor", params={"silentMinutes": bad}, headers=bearer(admin_token(fleet)))
        assert refused.status_code == 400, bad
        assert refused.json()["error"]["code"] == "INVALID_INPUT"


def test_doctor_a_mig_pool_without_mig_quota_until_a_tenant_gets_some(fleet: Store) -> None:
    answer = doctor(fleet)
    assert found(answer) == [("pool.fractional-without-quota", "p1")]
    assert answer["checkedAt"].startswith("2026-12-01T09:00:00")
    assert set(answer["findings"][0]) == {"code", "subject", "detail", "action"}
    give_mig_quota(fleet)
    assert doctor(fleet) == {"findings": [], "checkedAt": answer["checkedAt"]}


def test_doctor_a_node_that_never_converges_stays_held_and_shows_after_24_hours_not_before(
    fleet: Store,
) -> None:
    give_mig_quota(fleet)
    grant(fleet, T0)
    held = [ledger.book_partition_change(fleet, g, Window(T0), T0) for g in gpu_ids(fleet)]
    assert all(isinstance(h, ledger.PartitionChange) for h in held)
    assert doctor(fleet, T0 + timedelta(hours=23, minutes=59))["findings"] == []
    answer = doctor(fleet, at(24))
    assert found(answer) == [("capacity.mig.stuck", NODE)]
    assert "all-3g.40gb" in answer["findings"][0]["detail"]
    # The holds are still there: no timer released them, and the gate row makes them no orphans.
    with fleet.engine.connect() as conn:
        live = conn.execute(
            select(bookings.c.allocation_id).where(
                bookings.c.state == "live", bookings.c.allocation_id.startswith("partition:")
            )
        ).all()
    assert live and all(r[0].startswith("partition:") for r in live)
    with fleet.engine.connect() as conn:
        assert conn.execute(select(bookings.c.ends_at).where(bookings.c.state == "live")).all() == [
            (None,)
        ] * len(live)


def test_doctor_a_partition_hold_nothing_will_release_is_an_orphan(fleet: Store) -> None:
    give_mig_quota(fleet)
    gpu = gpu_ids(fleet)[0]
    change = ledger.book_partition_change(fleet, gpu, Window(T0), T0)  # open-ended: nothing ends it
    assert isinstance(change, ledger.PartitionChange)
    answer = doctor(fleet, at(1))
    assert found(answer) == [("ledger.orphan-partition", partition_allocation_id(gpu, T0))]
    assert f"GPU {gpu} on node {NODE}" in answer["findings"][0]["detail"]
    # Once released, it holds nothing.
    assert ledger.release_partition_change(fleet, partition_allocation_id(gpu, T0), at(2)) > 0
    assert doctor(fleet, at(3))["findings"] == []


def test_bounded_maintenance_partition_is_not_an_orphan(fleet: Store) -> None:
    """A maintenance window booked for a bounded time ends by itself: no finding."""
    give_mig_quota(fleet)
    gpu = gpu_ids(fleet)[0]
    change = ledger.book_partition_change(fleet, gpu, Window(T0, at(48)), T0)
    assert isinstance(change, ledger.PartitionChange)
    assert doctor(fleet, at(1))["findings"] == []


def test_doctor_silent_nodes_unhealthy_gpus_and_reboots(fleet: Store) -> None:
    give_mig_quota(fleet)
    gpu = gpu_ids(fleet)[0]
    with fleet.engine.begin() as conn:
        conn.execute(
            update(nodes)
            .where(nodes.c.id == NODE)
            .values(public_key="ed25519:k", joined_at=T0, last_report_at=at(1), reboot_required=True)
        )
        conn.execute(update(gpus).where(gpus.c.id == gpu).values(healthy=False))
    answer = doctor(fleet, at(1) + timedelta(minutes=30))
    assert found(answer) == [
        ("gpu.unhealthy", gpu),
        ("node.reboot-required", NODE),
        ("node.silent", NODE),
    ]
    silent = answer["findings"][2]
    assert silent["detail"] == "no report or spec read since 2026-12-01T10:00:00Z (10 minutes or more)"
    # A wider window: not silent yet.
    wider = doctor(fleet, at(1) + timedelta(minutes=30), silentMinutes=60)
    assert found(wider) == [("gpu.unhealthy", gpu), ("node.reboot-required", NODE)]


def test_doctor_logs_one_event_per_run_with_its_counts(fleet: Store) -> None:
    doctor(fleet)
    give_mig_quota(fleet)
    doctor(fleet)
    runs = stored_events(fleet, "doctor.run")
    assert [(e["subject"], e["payload"]) for e in runs] == [
        ("fleet", {"findings": 1, "counts": {"pool.fractional-without-quota": 1}}),
        ("fleet", {"findings": 0, "counts": {}}),
    ]
    http = api_client(fleet)
    admin_sees = http.get("/v1/events", params={"type": "doctor.run"}, headers=bearer(admin_token(fleet)))
    assert len(admin_sees.json()["items"]) == 2
    tenant_sees = http.get(
        "/v1/events", params={"type": "doctor.run"}, headers=bearer(tenant_token(fleet, "platform"))
    )
    assert tenant_sees.json()["items"] == []


def _overlapping_row(store: Store, atom: dict[str, Any], allocation_id: str, start: datetime) -> None:
    row = {
        "atom_id": atom["id"],
        "gpu_id": atom["gpu_id"],
        "pool_id": "p1",
        "class": atom["class"],
        "tenant_id": "acme",
        "allocation_id": allocation_id,
        "starts_at": start,
        "ends_at": start + timedelta(hours=2),
        "state": "live",
        "created_at": T0,
    }
    with store.engine.begin() as conn:
        conn.execute(insert(bookings).values(row))


@pytest.mark.both_stores
def test_doctor_ledger_overlap_found_on_sqlite_and_refused_by_postgresql(fleet: Store) -> None:
    from better_compute.storage.kernel.tables import atoms

    give_mig_quota(fleet)
    with fleet.engine.connect() as conn:
        atom = dict(conn.execute(select(atoms).where(atoms.c.bookable.is_(True)).limit(1)).one()._mapping)
    _overlapping_row(fleet, atom, "rsv-first", T0)
    if fleet.dialect == "postgresql":
        # The ledger's last fence: the database refuses the second row outright.
        with pytest.raises(IntegrityError, match="bookings_no_overlap"):
            _overlapping_row(fleet, atom, "rsv-second", at(1))
        assert doctor(fleet)["findings"] == []
        return
    # SQLite has no such constraint: a write around the repository goes in, and the doctor sees it.
    _overlapping_row(fleet, atom, "rsv-second", at(1))
    _overlapping_row(fleet, atom, "rsv-after", at(2))  # starts as the first ends: no overlap with it
    answer = doctor(fleet)
    assert found(answer) == [("ledger.overlap", atom["id"])] * 2
    details = [f["detail"] for f in answer["findings"]]
    assert any("rsv-first" in d and "rsv-second" in d for d in details)
    assert any("rsv-second" in d and "rsv-after" in d for d in details)
    assert not any("rsv-first" in d and "rsv-after" in d for d in details)


def test_doctor_with_the_gate_a_node_that_never_converges_shows_after_24_hours_not_before(
    store: Store, tmp_path: Path
) -> None:
    from better_compute.service.gate.mig_gate import Reconciler
    from tests.node_world import NodeWorld

    world = NodeWorld(store, tmp_path)
    reconciler = Reconciler(store, world.clock, "r1")
    patched = world.http.patch(
        "/v1/pools/p1", json={"id": "p1", "policy": {"migLayout": "all-3g.40gb"}}, headers=world.admin
    )
    assert patched.status_code == 200, patched.text
    reconciler.tick()  # scheduled at once: the nodes are idle
    reconciler.tick()  # granted
    with store.read() as tx:
        assert {g.state for g in tx.mig_layouts.all_rows()} == {"granted"}

    def run() -> list[tuple[str, str]]:
        answer = world.http.get("/v1/doctor", headers=world.admin)
        assert answer.status_code == 200, answer.text
        return found(answer.json())

    assert run() == []  # held by the gate: no orphans
    world.clock.now += timedelta(hours=23, minutes=59)
    reconciler.tick()
    assert run() == []
    world.clock.now += timedelta(minutes=1)
    reconciler.tick()
    assert run() == [("capacity.mig.stuck", "n-1"), ("capacity.mig.stuck", "n-2")]
    with store.engine.connect() as conn:
        held = conn.execute(
            select(bookings.c.allocation_id).where(
                bookings.c.state == "live",
                bookings.c.allocation_id.startswith("partition:"),
                bookings.c.ends_at.is_(None),
            )
        ).all()
    assert len({r[0] for r in held}) == 4  # both GPUs of both nodes, still held


def test_doctor_a_far_future_booking_holding_a_layout_change_for_years_is_capacity_mig_waiting(
    store: Store, tmp_path: Path
) -> None:
    """One booking two years ahead schedules its node's change for its end: past the bound (7 days
    unless `migWaitingDays` says), the doctor names the change, the reservation and when it ends;
    once the reservation is cancelled the change goes and the finding is gone."""
    from better_compute.service.gate.mig_gate import RECHECK, Reconciler
    from tests.node_world import NodeWorld

    world = NodeWorld(store, tmp_path)
    later = (T0 + timedelta(days=730)).isoformat()
    one = {"class": "gpu.mig", "count": 1}
    far = world.reserve([one], start=later, duration="1h")
    busy = far["atoms"][0]["node"]
    reconciler = Reconciler(store, world.clock, "r1")
    patched = world.http.patch(
        "/v1/pools/p1", json={"id": "p1", "policy": {"migLayout": "all-3g.40gb"}}, headers=world.admin
    )
    assert patched.status_code == 200, patched.text
    reconciler.tick()
    reconciler.tick()
    with store.read() as tx:
        states = {g.node_id: g.state for g in tx.mig_layouts.all_rows()}
    assert states[busy] == "scheduled"

    def run(**params: Any) -> list[dict[str, Any]]:
        answer = world.http.get("/v1/doctor", params=params, headers=world.admin)
        assert answer.status_code == 200, answer.text
        return [f for f in answer.json()["findings"] if f["code"] != "capacity.mig.stuck"]

    (waiting,) = run()
    assert (waiting["code"], waiting["subject"]) == ("capacity.mig.waiting", busy)
    assert far["id"] in waiting["detail"] and "tenant platform" in waiting["detail"]
    assert far["end"].replace("+00:00", "Z") in waiting["detail"]
    assert "more than the 7 days bound" in waiting["detail"]
    assert "reservations cancel" in waiting["action"]
    assert run(migWaitingDays=731) == []  # the bound is the caller's: two years fit in 731 days
    assert [f["code"] for f in run(migWaitingDays=730)] == ["capacity.mig.waiting"]
    cancelled = world.http.post(f"/v1/reservations/{far['id']}/cancel", headers=world.platform)
    assert cancelled.status_code == 200, cancelled.text
    world.clock.now += RECHECK * 2  # the reconciler looks at a node scheduled for later again
    reconciler.tick()
    reconciler.tick()
    assert run() == []


def test_doctor_a_booking_that_never_ends_holds_a_change_for_ever_and_is_named(
    store: Store, tmp_path: Path
) -> None:
    """A workload replica's open-ended booking keeps its node's change pending: the doctor says it
    waits for ever from the first run, naming the allocation, and says nothing of a short wait."""
    from better_compute.domain.kernel.timewin import Window as Span
    from better_compute.service.gate.mig_gate import Reconciler
    from tests.node_world import NodeWorld

    world = NodeWorld(store, tmp_path)
    short = world.reserve([{"class": "gpu.mig", "count": 1}], duration="2h")
    with store.begin() as tx:  # an open-ended tenant booking, as a workload replica holds its atoms
        taken = {a["id"] for a in short["atoms"]}
        atom = next(a for a in tx.atoms.of_nodes(["n-2"]) if a.cls == "gpu.mig" and a.id not in taken)
        tx.ledger.book([atom.id], Span(T0, None), "replica-1.r0", "platform", T0)
    reconciler = Reconciler(store, world.clock, "r1")
    patched = world.http.patch(
        "/v1/pools/p1", json={"id": "p1", "policy": {"migLayout": "all-3g.40gb"}}, headers=world.admin
    )
    assert patched.status_code == 200, patched.text
    reconciler.tick()
    answer = world.http.get("/v1/doctor", headers=world.admin).json()
    waiting = [f for f in answer["findings"] if f["code"] == "capacity.mig.waiting"]
    assert [f["subject"] for f in waiting] == ["n-2"], waiting
    assert (
        "waits for ever" in waiting[0]["detail"]
        and "replica-1.r0 (tenant platform, never ends)" in waiting[0]["detail"]
    )


def test_doctor_refuses_a_mig_waiting_bound_out_of_range(fleet: Store) -> None:
    http = api_client(fleet)
    for bad in ("0", "3651", "week"):
        refused = http.get("/v1/doctor", params={"migWaitingDays": bad}, headers=bearer(admin_token(fleet)))
        assert refused.status_code == 400, bad
        assert refused.json()["error"]["code"] == "INVALID_INPUT"


def test_doctor_an_endpoint_waiting_past_its_bound_is_endpoint_waiting(store: Store, tmp_path: Path) -> None:
    """A `Failed` endpoint (no idle node) and one whose instance's node never reports are named an
    hour after they started waiting, not before; one in service is not."""
    from better_compute.service.endpoints import endpoints
    from tests.node_world import NodeWorld
    from tests.service.endpoints.test_endpoints import PLATFORM, body

    world = NodeWorld(store, tmp_path)
    world.join("n-1")  # runs a daemon, which never converges anything
    endpoints.create(store, PLATFORM, body("cutting"), world.clock.now)
    endpoints.create(store, PLATFORM, body("short", count=2), world.clock.now)

    def waiting() -> list[dict[str, Any]]:
        answer = world.http.get("/v1/doctor", headers=world.admin).json()
        return [f for f in answer["findings"] if f["code"] == "endpoint.waiting"]

    world.clock.now += timedelta(minutes=59)
    assert waiting() == []
    world.clock.now += timedelta(minutes=1)
    cutting, short = waiting()
    assert cutting["subject"] == "cutting" and "instance n-1 has been cut since" in cutting["detail"]
    assert "bcd on node n-1" in cutting["action"]
    assert short["subject"] == "short" and short["detail"].startswith("Failed since")
    assert "asks for 2 instances" in short["detail"]


@pytest.mark.parametrize("how", ["gone", "unhealthy", "in another pool"])
def test_doctor_ledger_stranded_names_the_reservation_holding_an_atom_it_cannot_have(
    fleet: Store, how: str
) -> None:
    from dataclasses import replace

    from better_compute.bcd.fake import FakeNode
    from better_compute.service.fleet import inventory
    from better_compute.storage.kernel.tables import atoms

    give_mig_quota(fleet)
    acme = bearer(tenant_token(fleet, "acme"))
    body = {"poolId": "p1", "devices": [{"class": "gpu.mig", "count": 1}], "start": at(1).isoformat()}
    made = api_client(fleet).post("/v1/reservations", json={**body, "duration": "2h"}, headers=acme)
    assert made.status_code == 201, made.text
    rid, atom = made.json()["id"], made.json()["atoms"][0]["id"]
    assert doctor(fleet)["findings"] == []
    node = FakeNode.build(NODE, "H100-80GB", 2)
    if how == "gone":  # the node restarted whole: its instances are gone
        inventory.ingest(fleet, [node.report()], T0)
        why = "is gone"
    elif how == "unhealthy":
        node.apply_layout("all-1g.10gb")
        report = node.report()
        inventory.ingest(
            fleet, [replace(report, gpus=tuple(replace(g, healthy=False) for g in report.gpus))], T0
        )
        why = "reports unhealthy"
    else:  # moved around the pools' rules (a report naming another node's GPU, a hand-written row)
        with fleet.engine.begin() as conn:
            conn.execute(update(atoms).where(atoms.c.id == atom).values(pool_id=None))
        why = "is in no pool now, not in the booking's pool p1"
    stranded = [f for f in doctor(fleet)["findings"] if f["code"] == "ledger.stranded"]
    assert [f["subject"] for f in stranded] == [rid]
    assert f"reservation {rid} (tenant acme" in stranded[0]["detail"]
    assert atom in stranded[0]["detail"] and why in stranded[0]["detail"]
    shown = api_client(fleet).get(f"/v1/reservations/{rid}", headers=acme).json()
    assert shown["binding"] == "stranded" and why in shown["bindingDetail"]
    # Once it has ended, nothing is stranded any more.
    assert not [f for f in doctor(fleet, now=at(3))["findings"] if f["code"] == "ledger.stranded"]


@pytest.mark.both_stores
def test_doctor_a_gpu_held_whole_and_in_parts_is_an_overlap_sqlite_finds_and_postgresql_refuses(
    fleet: Store,
) -> None:
    from better_compute.storage.kernel.tables import atoms

    with fleet.engine.connect() as conn:
        part = dict(conn.execute(select(atoms).where(atoms.c["class"] == "gpu.mig").limit(1)).one()._mapping)
        parent = dict(
            conn.execute(select(atoms).where(atoms.c.gpu_id == part["gpu_id"], atoms.c["class"] == "gpu"))
            .one()
            ._mapping
        )
    _overlapping_row(fleet, parent, "rsv-whole", T0)
    if fleet.dialect == "postgresql":
        with pytest.raises(IntegrityError, match="bookings_no_family_overlap"):
            _overlapping_row(fleet, part, "rsv-part", at(1))
        return
    _overlapping_row(fleet, part, "rsv-part", at(1))
    answer = doctor(fleet)
    overlap = [f for f in answer["findings"] if f["code"] == "ledger.overlap"]
    assert [f["subject"] for f in overlap] == [part["gpu_id"]]
    assert "rsv-whole" in overlap[0]["detail"] and "rsv-part" in overlap[0]["detail"]
    assert ("ledger.stranded", "rsv-whole") in found(answer)  # its whole GPU is a split GPU's parent
