"""Scheduling policy as scenarios (docs/scheduling.md): floors held against a burst, borrowing and reclaim,
fair sharing by weight, no preemption loop between equal projects, the minimal victim set that opens a
whole hole, non-preemptible work never touched. Pure: no database."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from better_compute.domain.placement.fairness import (
    Entitlement,
    Rules,
    dominant_share,
    fair_shares,
    reserved_for_others,
    usable,
)
from better_compute.domain.placement.preemption import Candidate, Eviction, plan_preemption
from better_compute.domain.placement.topology import FreeDevice

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def dev(node: str, n: int, nvlink: str | None = None) -> FreeDevice:
    return FreeDevice(f"{node}-a{n}", node, f"{node}-g{n}", 0, nvlink)


def replica(
    name: str,
    devices: Sequence[FreeDevice],
    *,
    priority: int = 0,
    preemptible: bool = True,
    tenant: str = "b",
    minutes: int = 0,
) -> Candidate:
    return Candidate(
        allocation_id=name,
        workload_id=f"wkl-{name}",
        tenant_id=tenant,
        devices=tuple(devices),
        priority=priority,
        preemptible=preemptible,
        started=T0 + timedelta(minutes=minutes),
    )


def by_priority(priority: int, tenant: str = "a", devices: int = 1) -> Rules:
    return Rules(tenant, priority, {}, devices=devices, fair=False)


def victims(e: Eviction) -> list[str]:
    return sorted(e.allocation_ids)


# -- priority preemption: which victims --------------------------------------------------------------


@dataclass
class Case:
    name: str
    free: list[FreeDevice]
    candidates: list[Candidate]
    device_count: int
    replicas: int
    expected: list[str]
    opened: int
    priority: int = 10
    kind: str | None = None
    why: set[str] = field(default_factory=lambda: {"priority"})


N1 = [dev("n1", i) for i in range(4)]
N2 = [dev("n2", i) for i in range(4)]

CASES = [
    Case(
        "one victim of the right size beats two smaller ones",
        [],
        [replica("small1", N1[:1]), replica("small2", N1[1:2]), replica("big", N2[:2])],
        2,
        1,
        ["big"],
        1,
    ),
    Case(
        "two scattered single-device victims on two nodes do not open a two-device hole",
        [],
        [replica("x", N1[:1]), replica("y", N2[:1])],
        2,
        1,
        [],
        0,
    ),
    Case(
        "a free device beside one victim is enough: one eviction, not two",
        [N1[1]],
        [replica("p", N1[:1]), replica("q", N2[:1]), replica("r", N2[1:2])],
        2,
        1,
        ["p"],
        1,
    ),
    Case(
        "lowest priority first among equal counts",
        [],
        [replica("hi", N1[:1], priority=5), replica("lo", N2[:1], priority=1)],
        1,
        1,
        ["lo"],
        1,
    ),
    Case(
        "newest first among equal priorities",
        [],
        [replica("old", N1[:1], minutes=0), replica("new", N2[:1], minutes=30)],
        1,
        1,
        ["new"],
        1,
    ),
    Case(
        "a non-preemptible replica is never touched, even when it alone would open the hole",
        [],
        [replica("keep", N1[:2], preemptible=False), replica("a1", N2[:1]), replica("a2", N2[1:2])],
        2,
        1,
        ["a1", "a2"],
        1,
    ),
    Case(
        "equal or higher priority is never evicted by priority",
        [],
        [replica("same", N1[:1], priority=10), replica("higher", N2[:1], priority=20)],
        1,
        1,
        [],
        0,
    ),
    Case(
        "nothing is evicted where free devices already hold the replica",
        [N1[0]],
        [replica("x", N2[:1])],
        1,
        1,
        [],
        1,
    ),
    Case(
        "two replicas: each takes its own cheapest hole, and victims are not counted twice",
        [],
        [replica("v1", N1[:2]), replica("v2", N2[:2]), replica("v3", N2[2:4], priority=3)],
        2,
        2,
        ["v1", "v2"],
        2,
    ),
    Case(
        "inside one NVLink domain: victims across two domains of one node do not count",
        [],
        [
            replica("d1", [dev("n1", 0, "nvA")]),
            replica("d2", [dev("n1", 1, "nvB")]),
            replica("d3", [dev("n2", 0, "nvC"), dev("n2", 1, "nvC")], priority=5),
        ],
        2,
        1,
        ["d3"],
        1,
        kind="nvlink",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_priority_preemption_picks_the_minimal_victim_set_that_opens_a_whole_hole(case: Case) -> None:
    plan = plan_preemption(
        case.free,
        case.candidates,
        case.device_count,
        case.replicas,
        case.kind,  # type: ignore[arg-type]
        by_priority(case.priority),
    )
    assert victims(plan) == sorted(case.expected)
    assert plan.replicas == case.opened
    assert {v.why for v in plan.victims} <= case.why


def test_a_three_g_hole_needs_its_slices_on_one_gpu_not_scattered_one_g_evictions() -> None:
    # A 3g.40gb replica needs devices of its class: 1g replicas hold none of them, so they are no
    # candidates at all; only the 3g instance's holder opens the hole.
    three_g = FreeDevice("gpu0-3g", "n1", "gpu0", 0, None)
    holders = [replica("holder-3g", [three_g], priority=1)]
    plan = plan_preemption([], holders, 1, 1, None, by_priority(10))
    assert victims(plan) == ["holder-3g"]
    assert plan_preemption([], [], 1, 1, None, by_priority(10)).replicas == 0


# -- floors: held against a burst, borrowed, reclaimed -------------------------------------------------


def test_floors_are_held_against_a_burst_from_another_project() -> None:
    rows = {"a": Entitlement(floor=4), "b": Entitlement()}
    held = {"a": 0, "b": 0}
    reserved = reserved_for_others("b", rows, held)
    assert reserved == 4
    # b's non-preemptible burst on 8 free devices takes 4; a's floor stays free for a
    assert usable(8, reserved, preemptible=False) == 4
    # a itself sees no reservation of its own
    assert usable(8, reserved_for_others("a", rows, held), preemptible=False) == 8
    # as a uses its floor, less is kept from b
    assert reserved_for_others("b", rows, {"a": 3}) == 1


def test_preemptible_work_borrows_an_unused_floor_and_the_owner_reclaims_it() -> None:
    rows = {"a": Entitlement(floor=4)}
    # b borrows: its preemptible work may use all 8 free devices
    assert usable(8, reserved_for_others("b", rows, {}), preemptible=True) == 8
    borrowed = [replica(f"b{i}", [dev(f"n{i}", 0)], tenant="b", minutes=i) for i in range(8)]
    held = {"a": 0, "b": 8}
    # a, at the same priority, reclaims its floor: evictions newest first, reason floor ...
    rules = Rules("a", 0, dict(held), rows, capacity=8)
    plan = plan_preemption([], borrowed, 1, 8, None, rules)
    whys = [(v.candidate.allocation_id, v.why) for v in plan.victims]
    assert whys[:4] == [("b7", "floor"), ("b6", "floor"), ("b5", "floor"), ("b4", "floor")]
    # ... then the 4 devices above the floors are shared by weight (1:1): two more, and no further
    assert whys[4:] == [("b3", "fair_share"), ("b2", "fair_share")]
    assert plan.replicas == 6


def test_no_eviction_takes_another_project_below_its_floor() -> None:
    rows = {"a": Entitlement(floor=2), "b": Entitlement(floor=2)}
    theirs = [replica(f"b{i}", [dev(f"n{i}", 0)], tenant="b", priority=0) for i in range(2)]
    # even by priority: b holds exactly its floor
    rules = Rules("a", 100, {"a": 0, "b": 2}, rows, capacity=2)
    assert plan_preemption([], theirs, 1, 1, None, rules).replicas == 0
    # a project's own lower-priority work is its own to evict, floor or not
    mine = [replica("a-low", [dev("n9", 0)], tenant="a", priority=0)]
    assert victims(plan_preemption([], mine, 1, 1, None, Rules("a", 5, {"a": 1}, rows, capacity=2))) == [
        "a-low"
    ]


def test_a_non_preemptible_replica_is_never_a_victim_under_any_rule() -> None:
    rows = {"a": Entitlement(floor=4)}
    kept = [replica("k", [dev("n1", 0)], tenant="b", preemptible=False, priority=-5)]
    rules = Rules("a", 100, {"a": 0, "b": 1}, rows, capacity=1)
    assert plan_preemption([], kept, 1, 1, None, rules).replicas == 0


# -- fair sharing by weight ---------------------------------------------------------------------------


def test_no_preemption_loop_between_two_equal_projects() -> None:
    # kueue#3779: two equal projects one device apart would evict each other for ever
    rows = {"a": Entitlement(), "b": Entitlement()}
    b_work = [replica(f"b{i}", [dev(f"n{i}", 0)], tenant="b") for i in range(3)]
    a_rules = Rules("a", 0, {"a": 2, "b": 3}, rows, capacity=5)
    assert plan_preemption([], b_work, 1, 1, None, a_rules).replicas == 0
    # and the other way round
    a_work = [replica(f"a{i}", [dev(f"m{i}", 0)], tenant="a") for i in range(2)]
    b_rules = Rules("b", 0, {"a": 2, "b": 3}, rows, capacity=5)
    assert plan_preemption([], a_work, 1, 1, None, b_rules).replicas == 0
    # three apart: one eviction evens them out, and then it stops
    rules = Rules("a", 0, {"a": 1, "b": 4}, rows, capacity=5)
    b_four = [replica(f"b{i}", [dev(f"n{i}", 0)], tenant="b") for i in range(4)]
    plan = plan_preemption([], b_four, 1, 3, None, rules)
    assert plan.replicas == 1
    assert {v.why for v in plan.victims} == {"fair_share"}


def test_fair_sharing_never_evicts_from_a_project_below_the_preemptor() -> None:
    rows = {"a": Entitlement(), "b": Entitlement()}
    b_work = [replica(f"b{i}", [dev(f"n{i}", 0)], tenant="b") for i in range(2)]
    rules = Rules("a", 0, {"a": 6, "b": 2}, rows, capacity=8)
    assert plan_preemption([], b_work, 1, 1, None, rules).replicas == 0


def test_fair_sharing_spares_higher_priority_work_of_the_other_project() -> None:
    rows = {"a": Entitlement(), "b": Entitlement()}
    b_work = [replica(f"b{i}", [dev(f"n{i}", 0)], tenant="b", priority=5) for i in range(8)]
    rules = Rules("a", 0, {"a": 0, "b": 8}, rows, capacity=8)
    assert plan_preemption([], b_work, 1, 1, None, rules).replicas == 0


@pytest.mark.parametrize(("wa", "wb", "expected_a"), [(2.0, 1.0, 8), (1.0, 1.0, 6), (3.0, 1.0, 9)])
def test_weights_converge_to_their_split_of_contended_capacity(wa: float, wb: float, expected_a: int) -> None:
    """12 single-device nodes; b fills them all with preemptible work, then a asks for 12 too,
    one replica at a time. Fair-share evictions stop at the weighted split, within one device."""
    capacity = 12
    rows = {"a": Entitlement(weight=wa), "b": Entitlement(weight=wb)}
    held = {"a": 0, "b": capacity}
    running = {f"b{i}": replica(f"b{i}", [dev(f"n{i}", 0)], tenant="b", minutes=i) for i in range(capacity)}
    for _ in range(capacity):
        rules = Rules("a", 0, dict(held), rows, capacity=capacity)
        plan = plan_preemption([], running.values(), 1, 1, None, rules)
        if plan.replicas == 0:
            break
        for gone in plan.allocation_ids:
            del running[gone]
        held["a"] += 1
        held["b"] -= len(plan.victims)
    fair = fair_shares(capacity, {"a": capacity, "b": capacity}, rows)
    assert abs(held["a"] - fair["a"]) <= 1
    assert held["a"] == expected_a
    assert held["a"] + held["b"] == capacity


def test_fair_shares_give_floors_first_then_divide_by_weight_and_never_more_than_asked() -> None:
    rows = {"a": Entitlement(floor=4, weight=1), "b": Entitlement(weight=2), "c": Entitlement(weight=1)}
    shares = fair_shares(16, {"a": 20, "b": 20, "c": 2}, rows)
    # a's floor of 4, c asks for only 2, the 10 left split 1:2 between a and b
    assert shares["c"] == pytest.approx(2)
    assert shares["a"] == pytest.approx(4 + 10 / 3)
    assert shares["b"] == pytest.approx(20 / 3)
    assert sum(shares.values()) == pytest.approx(16)


def test_the_dominant_share_is_the_largest_over_device_classes_divided_by_weight() -> None:
    above = {"h100": 2, "a100-1g": 6}
    capacity = {"h100": 8, "a100-1g": 12}
    assert dominant_share(above, capacity, 1.0) == pytest.approx(0.5)
    assert dominant_share(above, capacity, 2.0) == pytest.approx(0.25)
    assert dominant_share({}, capacity, 1.0) == 0.0


def test_the_victim_set_spares_the_higher_priority_replica_not_only_the_first_preferred() -> None:
    """A regression: the set was filled greedily in preference order, so a hole of 4 took the
    lowest replica (1 device) and then the priority-9 one (3 devices), where two priority-1
    replicas of 2 devices each opened it and spared the priority-9 replica."""
    n = [dev("n1", i) for i in range(8)]
    candidates = [
        replica("low1", n[0:1], priority=0),
        replica("mid2", n[1:3], priority=1),
        replica("mid3", n[3:5], priority=1),
        replica("high", n[5:8], priority=9),
    ]
    plan = plan_preemption([], candidates, 4, 1, None, by_priority(10))
    assert victims(plan) == ["mid2", "mid3"]


def test_two_victims_of_one_project_never_take_it_below_its_floor_together() -> None:
    """A regression: the floor was checked one victim at a time, so a hole of two took two
    replicas of a project holding 3 with a floor of 2, leaving it at 1."""
    m = [dev("m", i) for i in range(3)]
    theirs = [replica(f"b{i}", [m[i]], tenant="b") for i in range(3)]
    rules = Rules("a", 10, {"b": 3}, {"b": Entitlement(floor=2)}, capacity=3, devices=2)
    assert plan_preemption([], theirs, 2, 1, None, rules).replicas == 0
    # one device is within its budget
    one = Rules("a", 10, {"b": 3}, {"b": Entitlement(floor=2)}, capacity=3, devices=1)
    assert len(plan_preemption([], theirs, 1, 2, None, one).victims) == 1


def test_a_preemptor_is_placed_again_before_its_victims_whatever_their_priorities() -> None:
    from better_compute.domain.placement.fairness import admission_order

    waiting = [("victim", 5, T0), ("preemptor", 0, T0 + timedelta(minutes=5)), ("other", 3, T0)]
    # by priority alone the victim would go first and take back the devices it was evicted from
    assert admission_order(waiting) == ["victim", "other", "preemptor"]
    assert admission_order(waiting, {"victim": "preemptor"}) == ["preemptor", "victim", "other"]
    # a preemptor that no longer waits changes nothing, and a cycle does not hang
    assert admission_order(waiting, {"victim": "gone"}) == ["victim", "other", "preemptor"]
    assert admission_order(waiting, {"victim": "preemptor", "preemptor": "victim"})[:2] == [
        "preemptor",
        "victim",
    ]
