"""The doctor's rules (domain.ops.doctor): each finding, and the boundaries of the ones that have one."""

from __future__ import annotations

from datetime import timedelta

import pytest

from better_compute.domain.fleet.pools import PoolSettings, SharingMode
from better_compute.domain.fleet.records import Gpu, LayoutRefusal, Node, Pool
from better_compute.domain.gate.records import MigLayoutGate
from better_compute.domain.kernel.timewin import Window
from better_compute.domain.ledger.ledger import Booking, partition_allocation_id
from better_compute.domain.ops import doctor
from better_compute.domain.ops.doctor import Finding, FleetFacts, counts, diagnose
from better_compute.domain.tenancy.records import Quota
from tests.builders import T0, at

SILENT = timedelta(minutes=10)


def node(node_id: str = "n1", **kw: object) -> Node:
    return Node(id=node_id, cluster_id="c1", created_at=T0, **kw)  # type: ignore[arg-type]


def gpu(gpu_id: str = "GPU-1", node_id: str = "n1", **kw: object) -> Gpu:
    fields: dict[str, object] = {
        "index": 0,
        "product": "NVIDIA H100 80GB HBM3",
        "model": "H100-80GB",
        "memory_mib": 81559,
        "numa_node": 0,
        "nvlink_peers": (),
        "healthy": True,
        "present": True,
        "mig_mode_current": False,
        "mig_mode_pending": False,
        "mig_instances": (),
        "updated_at": T0,
        **kw,
    }
    return Gpu(id=gpu_id, node_id=node_id, **fields)  # type: ignore[arg-type]


def pool(pool_id: str, mode: SharingMode) -> Pool:
    settings = PoolSettings(mig_layout="all-1g.10gb") if mode == "mig" else PoolSettings(replicas=4)
    if mode == "exclusive":
        settings = PoolSettings()
    return Pool(
        id=pool_id,
        name=pool_id,
        cluster_id="c1",
        owner_tenant_id="platform",
        mode=mode,
        settings=settings,
        meter="gpu.h100.hours",
        generation=1,
        created_at=T0,
    )


def quota(pool_id: str, cls: str, limit: int = 4) -> Quota:
    return Quota(tenant_id="acme", pool_id=pool_id, cls=cls, limit=limit, updated_at=T0)


def gate(node_id: str = "n1", state: str = "granted", granted_at: object = T0) -> MigLayoutGate:
    return MigLayoutGate(
        node_id=node_id,
        pool_id="p1",
        frozen_layout="all-1g.10gb",
        pending_layout="all-3g.40gb",
        state=state,
        requested_at=T0 - timedelta(hours=1),
        scheduled_from=T0 if state != "pending" else None,
        granted_at=granted_at,  # type: ignore[arg-type]
        granted_generation=3 if state == "granted" else None,
    )


def booking(
    key: int, atom_id: str, span: Window, allocation_id: str = "rsv-1", gpu_id: str = "GPU-1"
) -> Booking:
    return Booking(
        id=f"bkg-{key}",
        atom_id=atom_id,
        gpu_id=gpu_id,
        allocation_id=allocation_id,
        tenant_id=None,
        span=span,
    )


def codes(findings: list[Finding]) -> list[tuple[str, str]]:
    return [(f.code, f.subject) for f in findings]


def test_a_healthy_fleet_has_no_findings() -> None:
    facts = FleetFacts(
        nodes=[node(public_key="k", joined_at=T0, last_report_at=at(1))],
        gpus=[gpu()],
        pools=[pool("p1", "mig"), pool("x1", "exclusive")],
        quotas=[quota("p1", "gpu.mig")],
    )
    assert diagnose(facts, at(1), SILENT) == []


@pytest.mark.parametrize(
    ("after", "stuck"),
    [
        (timedelta(hours=23, minutes=59), False),
        (timedelta(hours=23, minutes=59, seconds=59), False),
        (timedelta(hours=24), True),
        (timedelta(hours=30), True),
    ],
)
def test_a_granted_node_is_stuck_from_24_hours_after_its_grant(after: timedelta, stuck: bool) -> None:
    facts = FleetFacts(nodes=[node(observed_generation=3)], gates=[gate()])
    found = diagnose(facts, T0 + after, SILENT)
    assert codes(found) == ([("capacity.mig.stuck", "n1")] if stuck else [])
    if stuck:
        assert "all-3g.40gb" in found[0].detail and "p1" in found[0].detail
        assert "observed spec generation 3" in found[0].detail
        assert "bcd" in found[0].action


@pytest.mark.parametrize("state", ["pending", "scheduled"])
def test_a_change_not_yet_granted_is_never_stuck(state: str) -> None:
    facts = FleetFacts(nodes=[node()], gates=[gate(state=state, granted_at=None)])
    assert diagnose(facts, at(100), SILENT) == []


def test_a_node_that_never_joined_is_never_silent() -> None:
    assert diagnose(FleetFacts(nodes=[node()]), at(100), SILENT) == []


@pytest.mark.parametrize(("minutes", "silent"), [(9, False), (9.99, False), (10, True), (60, True)], ids=str)
def test_a_joined_node_is_silent_after_the_window_without_a_report(minutes: float, silent: bool) -> None:
    reported = node(public_key="k", joined_at=T0, last_report_at=at(1))
    found = diagnose(FleetFacts(nodes=[reported]), at(1) + timedelta(minutes=minutes), SILENT)
    assert codes(found) == ([("node.silent", "n1")] if silent else [])
    if silent:
        assert found[0].detail == "no report or spec read since 2026-12-01T10:00:00Z (10 minutes or more)"


def test_a_node_that_joined_and_never_reported_is_silent_once_the_window_has_passed() -> None:
    joined = node(public_key="k", joined_at=T0)
    assert diagnose(FleetFacts(nodes=[joined]), T0 + timedelta(minutes=5), SILENT) == []
    found = diagnose(FleetFacts(nodes=[joined]), T0 + timedelta(minutes=10), SILENT)
    assert codes(found) == [("node.silent", "n1")]
    assert found[0].detail.startswith("no report or spec read since it joined at 2026-12-01T09:00:00Z")


def test_a_node_that_joined_again_counts_its_silence_from_the_new_join() -> None:
    rejoined = node(public_key="k2", joined_at=at(5), last_report_at=at(1))
    assert diagnose(FleetFacts(nodes=[rejoined]), at(5) + timedelta(minutes=5), SILENT) == []
    found = diagnose(FleetFacts(nodes=[rejoined]), at(5) + timedelta(minutes=30), SILENT)
    assert found[0].detail.startswith("no report or spec read since it joined at 2026-12-01T14:00:00Z")


@pytest.mark.parametrize(("minutes", "silent"), [(9, False), (10, True)], ids=str)
def test_an_idle_node_that_reads_its_spec_is_not_silent(minutes: float, silent: bool) -> None:
    """An idle `bcd` reports nothing for hours but long-polls its spec: the latest read is contact."""
    idle = node(public_key="k", joined_at=T0, last_report_at=at(1), last_spec_read_at=at(5))
    found = diagnose(FleetFacts(nodes=[idle]), at(5) + timedelta(minutes=minutes), SILENT)
    assert codes(found) == ([("node.silent", "n1")] if silent else [])
    if silent:
        assert found[0].detail == "no report or spec read since 2026-12-01T14:00:00Z (10 minutes or more)"
    # A report later than the last read counts from the report.
    busy = node(public_key="k", joined_at=T0, last_report_at=at(6), last_spec_read_at=at(5))
    assert diagnose(FleetFacts(nodes=[busy]), at(6) + timedelta(minutes=9), SILENT) == []


def test_a_key_with_no_join_time_is_silent() -> None:
    found = diagnose(FleetFacts(nodes=[node(public_key="k")]), T0, timedelta(minutes=1))
    assert codes(found) == [("node.silent", "n1")]
    assert found[0].detail == "no report or spec read since it joined (1 minute or more)"


def test_an_unhealthy_gpu_that_is_present_is_a_finding_and_a_missing_one_is_not() -> None:
    facts = FleetFacts(
        gpus=[gpu("GPU-1", healthy=False), gpu("GPU-2", healthy=False, present=False), gpu("GPU-3")]
    )
    found = diagnose(facts, T0, SILENT)
    assert codes(found) == [("gpu.unhealthy", "GPU-1")]
    assert "node n1" in found[0].detail


def test_a_node_waiting_for_a_reboot_is_a_finding() -> None:
    found = diagnose(FleetFacts(nodes=[node("n1", reboot_required=True), node("n2")]), T0, SILENT)
    assert codes(found) == [("node.reboot-required", "n1")]
    assert "reboot" in found[0].action


def test_a_gpu_whose_layout_change_was_refused_is_a_finding_with_its_reason() -> None:
    refused = (
        LayoutRefusal("GPU-2", "repartition", "GPU instance 3 (1g.10gb) of GPU-2 is in use", at(1)),
        LayoutRefusal("GPU-1", "reset", "GPU client nvidia-dcgm.service did not stop: timed out", at(2)),
    )
    found = diagnose(FleetFacts(nodes=[node("n1", layout_refused=refused), node("n2")]), T0, SILENT)
    assert codes(found) == [("node.layout-refused", "n1"), ("node.layout-refused", "n1")]
    assert found[0].detail == (
        "GPU GPU-1: reset refused since 2026-12-01T11:00:00Z: GPU client nvidia-dcgm.service did not"
        " stop: timed out"
    )
    assert "is in use" in found[1].detail
    assert "--gpu-clients" in found[0].action


def test_a_node_whose_inventory_named_another_nodes_gpu_is_a_finding_naming_both() -> None:
    claimed = node("n2", owned_elsewhere=(("GPU-1", "n1"), ("MIG-7", "n3")), owned_elsewhere_at=at(1))
    found = diagnose(FleetFacts(nodes=[node("n1"), claimed]), T0, SILENT)
    assert codes(found) == [("node.gpu-owned-elsewhere", "n2")]
    assert "GPU-1 (held by node n1), MIG-7 (held by node n3)" in found[0].detail
    assert "release-gpu" in found[0].action


def test_fractional_pools_without_fractional_quota_rows() -> None:
    facts = FleetFacts(
        pools=[
            pool("mig-ok", "mig"),
            pool("mig-bare", "mig"),
            pool("mig-whole-only", "mig"),
            pool("mig-zero", "mig"),
            pool("ts-ok", "timeslice"),
            pool("mps-bare", "mps"),
            pool("ts-mig-row", "timeslice"),
            pool("whole", "exclusive"),
        ],
        quotas=[
            quota("mig-ok", "gpu.mig"),
            quota("mig-whole-only", "gpu"),
            quota("mig-zero", "gpu.mig", limit=0),
            quota("ts-ok", "gpu.slot"),
            quota("ts-mig-row", "gpu.mig"),
        ],
    )
    found = diagnose(facts, T0, SILENT)
    assert codes(found) == [
        ("pool.fractional-without-quota", "mig-bare"),
        ("pool.fractional-without-quota", "mig-whole-only"),
        ("pool.fractional-without-quota", "mig-zero"),
        ("pool.fractional-without-quota", "mps-bare"),
        ("pool.fractional-without-quota", "ts-mig-row"),
    ]
    mps = next(f for f in found if f.subject == "mps-bare")
    assert "gpu.slot" in mps.detail and "QUOTA_EXCEEDED" in mps.detail
    assert "--class gpu.slot" in mps.action


def test_overlapping_bookings_are_reported_by_atom() -> None:
    first = booking(1, "atm-1", Window(T0, at(2)), "rsv-a")
    second = booking(2, "atm-1", Window(at(1), None), "rsv-b")
    found = diagnose(FleetFacts(overlaps=[(first, second)]), T0, SILENT)
    assert codes(found) == [("ledger.overlap", "atm-1")]
    assert "bkg-1" in found[0].detail and "bkg-2" in found[0].detail and "open-ended" in found[0].detail


def test_a_partition_hold_of_a_node_without_a_gate_row_is_an_orphan() -> None:
    held = partition_allocation_id("GPU-1", T0)
    gated = partition_allocation_id("GPU-2", T0)
    lost = partition_allocation_id("GPU-gone", T0)
    facts = FleetFacts(
        gpus=[gpu("GPU-1", "n1"), gpu("GPU-2", "n2")],
        gates=[gate("n2")],
        partition_holds=[
            booking(1, "atm-1", Window(T0), held, "GPU-1"),
            booking(2, "atm-2", Window(T0), held, "GPU-1"),
            booking(3, "atm-3", Window(T0), gated, "GPU-2"),
            booking(4, "atm-4", Window(T0), lost, "GPU-gone"),
        ],
    )
    found = diagnose(facts, T0, SILENT)
    assert codes(found) == [("ledger.orphan-partition", held), ("ledger.orphan-partition", lost)]
    assert found[0].detail.startswith("holds 2 atoms of GPU GPU-1 on node n1")
    assert "a GPU no node reports" in found[1].detail


def test_bounded_maintenance_partition_is_not_an_orphan() -> None:
    """A window an operator booked with `partitions.book` ends by itself: nothing is left for the
    operator to do, so `doctor` does not call it a hold nothing will release."""
    window = partition_allocation_id("GPU-1", T0)
    facts = FleetFacts(
        gpus=[gpu("GPU-1", "n1")],
        partition_holds=[
            booking(1, "atm-1", Window(T0, at(2)), window, "GPU-1"),
            booking(2, "atm-2", Window(T0, at(2)), window, "GPU-1"),
        ],
    )
    assert codes(diagnose(facts, T0, SILENT)) == []


def test_findings_sort_by_code_then_subject_and_count_by_code() -> None:
    facts = FleetFacts(
        nodes=[node("n2", reboot_required=True), node("n1", reboot_required=True, observed_generation=1)],
        gpus=[gpu("GPU-9", "n2", healthy=False)],
        pools=[pool("p2", "mps")],
        gates=[gate("n1")],
    )
    found = diagnose(facts, at(48), SILENT)
    assert codes(found) == [
        ("capacity.mig.stuck", "n1"),
        ("gpu.unhealthy", "GPU-9"),
        ("node.reboot-required", "n1"),
        ("node.reboot-required", "n2"),
        ("pool.fractional-without-quota", "p2"),
    ]
    assert counts(found) == {
        "capacity.mig.stuck": 1,
        "gpu.unhealthy": 1,
        "node.reboot-required": 2,
        "pool.fractional-without-quota": 1,
    }
    assert sorted(doctor.CODES) == list(doctor.CODES)
    assert {f.code for f in found} <= set(doctor.CODES)


WEEK = timedelta(days=7)


def waiting_gate(
    node_id: str = "n1", state: str = "scheduled", until: timedelta | None = None
) -> MigLayoutGate:
    """A change requested at T0, scheduled `until` after it (pending: not scheduled)."""
    return MigLayoutGate(
        node_id=node_id,
        pool_id="p1",
        frozen_layout="all-1g.10gb",
        pending_layout="all-3g.40gb",
        state=state,
        requested_at=T0,
        scheduled_from=None if until is None else T0 + until,
    )


def holder(allocation_id: str, ends: timedelta | None, node_id: str = "n1") -> doctor.GateHolder:
    return doctor.GateHolder(node_id, allocation_id, "acme", None if ends is None else T0 + ends)


@pytest.mark.parametrize(
    ("until", "waits"),
    [(WEEK, False), (WEEK + timedelta(seconds=1), True), (timedelta(days=730), True)],
)
def test_a_change_scheduled_more_than_its_bound_after_its_request_is_mig_waiting(
    until: timedelta, waits: bool
) -> None:
    facts = FleetFacts(gates=[waiting_gate(until=until)], gate_holders=[holder("rsv-far", until)])
    found = diagnose(facts, T0, SILENT)
    assert codes(found) == ([("capacity.mig.waiting", "n1")] if waits else [])
    if waits:
        assert (
            "rsv-far (tenant acme, ends " in found[0].detail
            and "more than the 7 days bound" in found[0].detail
        )
        assert "cancel or release" in found[0].action and "preemptible" in found[0].action
    assert diagnose(facts, T0, SILENT, mig_waiting_after=until) == []  # the bound is the caller's


def test_a_change_held_by_a_booking_that_never_ends_waits_for_ever_from_the_start() -> None:
    facts = FleetFacts(
        gates=[waiting_gate(state="pending")],
        gate_holders=[holder("wl.r0", None), holder("rsv-1", timedelta(hours=1))],
    )
    (found,) = diagnose(facts, T0, SILENT)
    assert found.code == "capacity.mig.waiting" and "waits for ever" in found.detail
    assert found.detail.index("wl.r0 (tenant acme, never ends)") < found.detail.index("rsv-1")


def test_a_change_not_yet_scheduled_waits_only_as_long_as_its_holders() -> None:
    fresh = FleetFacts(
        gates=[waiting_gate(state="pending")], gate_holders=[holder("rsv-1", timedelta(days=2))]
    )
    assert diagnose(fresh, T0, SILENT) == []
    unheld = FleetFacts(gates=[waiting_gate(state="pending")])
    assert diagnose(unheld, T0 + timedelta(days=6), SILENT) == []
    (late,) = diagnose(unheld, T0 + timedelta(days=8), SILENT)  # no reconciler moved it for 8 days
    assert late.code == "capacity.mig.waiting" and "no booking holds it now" in late.detail


def test_mig_waiting_names_each_allocation_once_latest_first_and_counts_the_rest() -> None:
    holders = [holder(f"rsv-{n}", timedelta(days=10 + n)) for n in range(7)]
    holders.append(holder("rsv-0", timedelta(days=40)))  # another atom of rsv-0, ending later
    facts = FleetFacts(gates=[waiting_gate(until=timedelta(days=40))], gate_holders=holders)
    (found,) = diagnose(facts, T0, SILENT)
    named = [part.split(" ")[0] for part in found.detail.split("held by ")[1].split("), ")]
    assert named == ["rsv-0", "rsv-6", "rsv-5", "rsv-4", "rsv-3"]
    assert found.detail.endswith(" and 2 more")


def test_only_changes_that_may_wait_past_the_bound_need_their_holders_read() -> None:
    gates = [
        waiting_gate("a", until=timedelta(days=1)),
        waiting_gate("b", until=timedelta(days=9)),
        waiting_gate("c", state="pending"),
        gate("d"),
    ]
    assert doctor.mig_waiting_nodes(gates, T0, WEEK) == ["b", "c"]


def endpoint(
    name: str, status: str, reason: str | None = None, nodes: tuple[str, ...] = ()
) -> doctor.EndpointFacts:
    from better_compute.domain.endpoints.records import EndpointRecord

    record = EndpointRecord(name, "platform", {}, status, reason, T0, T0)
    return doctor.EndpointFacts(record, nodes)


@pytest.mark.parametrize(("minutes", "waits"), [(59, False), (60, True)])
def test_an_endpoint_waiting_an_hour_is_endpoint_waiting(minutes: int, waits: bool) -> None:
    cut = gate("n1", granted_at=T0)
    facts = FleetFacts(
        gates=[cut],
        endpoints=[
            endpoint("failed", "Failed", "variant AllTraffic asks for 2 instances"),
            endpoint("cutting", "Creating", nodes=("n1",)),
            endpoint("served", "Creating", nodes=("n2",)),  # no gate: InService
            endpoint("held", "Updating", "the relayout waits before re-cutting n3", nodes=("n3",)),
            endpoint("rolling", "Updating", nodes=("n4",)),  # its instance between cuts, no reason
        ],
    )
    found = [
        f for f in diagnose(facts, T0 + timedelta(minutes=minutes), SILENT) if f.code == "endpoint.waiting"
    ]
    assert [f.subject for f in found] == (["cutting", "failed", "held"] if waits else [])
    if waits:
        details = {f.subject: f.detail for f in found}
        assert "instance n1 has been cut since" in details["cutting"]
        assert details["failed"].startswith("Failed since") and "asks for 2 instances" in details["failed"]
        assert "the relayout waits" in details["held"]
