"""Cost ceilings (docs/scheduling.md#cost-ceilings): what a replica costs per hour in a cluster, and the
verdict of a cluster whose price would take the workload over its policies' ceiling."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction

from better_compute.domain.metering.billing import Price
from better_compute.domain.placement.costs import Cost, money, replica_cost
from better_compute.domain.placement.topology import Room
from better_compute.domain.placement.verdicts import Ask, ClusterFigures, plan_placement

T = datetime(2026, 12, 1, tzinfo=UTC)


def price(per_hour: str) -> Price:
    return Price("m", per_hour, "USD", T)


def test_a_replica_costs_its_devices_times_their_share_times_the_price_in_the_dearest_pool() -> None:
    whole = replica_cost(Decimal(100), 8, [("gpu.h100.hours", Fraction(1), price("2.50"))])
    assert (whole.per_replica, whole.currency) == (Decimal("20.00"), "USD")
    # a 3g.40gb of an H100 bills 3/7 of the GPU: 7.00 an hour for the GPU is 3.00 for the slice
    mig = replica_cost(Decimal(100), 2, [("mig", Fraction(3, 7), price("7.00"))])
    assert mig.per_replica == Decimal(6)
    dearest = replica_cost(
        Decimal(100), 1, [("cheap", Fraction(1), price("1.00")), ("dear", Fraction(1), price("3.00"))]
    )
    assert dearest.per_replica == Decimal("3.00")
    # a pool with no device of the class takes no replica: its missing price does not count
    assert replica_cost(Decimal(1), 1, [("none", Fraction(0), None)]).per_replica == Decimal(0)
    unknown = replica_cost(Decimal(100), 1, [("a", Fraction(1), price("1")), ("b", Fraction(1), None)])
    assert (unknown.per_replica, unknown.unpriced) == (None, "b")
    assert [money(Decimal(x)) for x in ("12.5", "1E+2", "0.125", "3")] == ["12.50", "100.00", "0.125", "3.00"]


def figures(cluster: str, per_replica: str | None, ceiling: str = "40", **kw: object) -> ClusterFigures:
    cost = Cost(Decimal(ceiling), None if per_replica is None else Decimal(per_replica), "USD", "m")
    return ClusterFigures(cluster, Room(64, 8, 8), None, cost=cost, **kw)  # type: ignore[arg-type]


def test_a_cluster_whose_price_would_exceed_the_cost_ceiling_is_refused_with_the_figure() -> None:
    got = plan_placement(
        Ask(device_count=8, replicas=2),
        [figures("cheap", "20.00"), figures("dear", "20.01"), figures("unpriced", None)],
    )
    by = {v.cluster_id: v for v in got.verdicts}
    assert got.shares == {"cheap": 2}  # exactly at the ceiling passes
    assert (by["cheap"].reason, by["cheap"].cost_per_hour) == (None, "40.00")
    assert by["dear"].reason == "cost_ceiling_exceeded"
    assert by["dear"].cost_per_hour == "40.02"
    assert by["dear"].message == (
        "2 replica(s) in cluster dear would cost 40.02 USD per hour; the cost ceiling is 40.00"
    )
    assert (by["dear"].room, by["dear"].admitted) == (0, False)
    assert by["unpriced"].reason == "cost_ceiling_exceeded"
    assert by["unpriced"].message == (
        "cluster unpriced's meter m has no price, so the cost ceiling of 40.00 per hour cannot be checked"
    )


def test_a_policy_denial_comes_before_the_cost_and_no_ceiling_means_no_check() -> None:
    denied = plan_placement(Ask(device_count=1, replicas=1), [figures("c", "99", denial="policy p denies c")])
    assert denied.verdicts[0].reason == "policy_denied"
    free = plan_placement(Ask(device_count=1, replicas=1), [ClusterFigures("c", Room(8, 8, 8), None)])
    assert (free.shares, free.verdicts[0].cost_per_hour) == ({"c": 1}, None)
