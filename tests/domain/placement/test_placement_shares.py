"""Dividing replicas between clusters: pack, spread, floors, max_clusters, scaling down."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from better_compute.domain.placement.shares import divide, shrink
from better_compute.domain.placement.topology import FreeDevice, Room, room_for
from better_compute.domain.placement.verdicts import Ask, ClusterFigures, plan_placement


def test_pack_fills_the_roomiest_cluster_before_opening_another() -> None:
    got = divide(10, {"a": 4, "b": 8, "c": 8}, {})
    assert got.shares == {"b": 8, "c": 2}
    assert got.unplaced == 0


def test_pack_fills_a_cluster_already_used_first() -> None:
    got = divide(6, {"a": 4, "b": 8}, {"a": 2})
    assert got.shares == {"a": 4, "b": 2}


def test_spread_distributes_replicas_evenly() -> None:
    got = divide(9, {"a": 10, "b": 10, "c": 10}, {}, strategy="spread")
    assert got.shares == {"a": 3, "b": 3, "c": 3}


def test_spread_respects_room() -> None:
    got = divide(9, {"a": 1, "b": 10, "c": 10}, {}, strategy="spread")
    assert sorted(got.shares.items()) == [("a", 1), ("b", 4), ("c", 4)]


def test_cluster_floors_come_first() -> None:
    got = divide(6, {"a": 10, "b": 10}, {}, floors={"a": 2})
    assert got.shares == {"a": 6} or got.shares["a"] >= 2
    spread = divide(6, {"a": 10, "b": 10, "c": 10}, {}, strategy="pack", floors={"c": 2})
    assert spread.shares["c"] == 2 and sum(spread.shares.values()) == 6


def test_max_clusters_caps_fan_out() -> None:
    got = divide(9, {"a": 3, "b": 3, "c": 3}, {}, strategy="spread", max_clusters=2)
    assert len(got.shares) == 2
    assert got.unplaced == 3


def test_what_no_cluster_has_room_for_is_unplaced() -> None:
    got = divide(10, {"a": 3}, {})
    assert got.shares == {"a": 3}
    assert got.unplaced == 7


def test_shrink_is_proportional_and_floors_hold() -> None:
    assert shrink(6, {"a": 8, "b": 4}) == {"a": 4, "b": 2}
    assert shrink(3, {"a": 8, "b": 4}, {"b": 3}) == {"b": 3}
    assert sum(shrink(5, {"a": 3, "b": 3, "c": 3}).values()) == 5


@given(
    st.integers(0, 60),
    st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 20), max_size=6),
    st.sampled_from(["pack", "spread"]),
    st.none() | st.integers(1, 6),
)
def test_divide_never_exceeds_room_nor_total(
    total: int, room: dict[str, int], strategy: str, cap: int | None
) -> None:
    got = divide(total, room, {}, strategy=strategy, max_clusters=cap)  # type: ignore[arg-type]
    assert got.placed + got.unplaced == total
    assert all(got.shares[c] <= room[c] for c in got.shares)
    if cap is not None:
        assert len(got.shares) <= cap
    if cap is None:
        assert got.unplaced == max(0, total - sum(room.values()))


@given(st.dictionaries(st.sampled_from("abcd"), st.integers(1, 30), min_size=1), st.data())
def test_shrink_gives_exactly_the_total(current: dict[str, int], data: st.DataObject) -> None:
    total = data.draw(st.integers(0, sum(current.values())))
    got = shrink(total, current)
    assert sum(got.values()) == total
    assert all(got[c] <= current[c] for c in got)


def _free(node: str, gpu: str, numa: int, nv: str | None) -> FreeDevice:
    return FreeDevice(f"{node}-{gpu}", node, f"{node}-{gpu}", numa, nv)


def test_a_replica_sits_on_one_node_and_in_one_domain_when_required() -> None:
    devices = [_free("n1", f"g{i}", i // 4, "nv1" if i < 2 else None) for i in range(8)]
    devices += [_free("n2", f"g{i}", 0, None) for i in range(3)]
    assert room_for(devices, 4, None).replicas == 2  # n1 holds 2 of 4; n2's 3 hold none
    assert room_for(devices, 4, "numa").replicas == 2  # n1's two NUMA nodes hold 4 each
    assert room_for(devices, 2, "nvlink").replicas == 1  # only nv1 has 2 NV-connected GPUs
    assert room_for(devices, 2, "nvlink").largest_group == 2


def _figures(
    cluster: str, free: int, replicas: int, quota: int | None = None, **kw: object
) -> ClusterFigures:
    return ClusterFigures(cluster, Room(free, replicas, free), quota, **kw)  # type: ignore[arg-type]


def test_a_verdict_per_rejected_cluster() -> None:
    got = plan_placement(
        Ask(device_count=8, replicas=1),
        [
            _figures("iad-1", 16, 2, quota=0),
            _figures("fra-1", 4, 0),
            _figures("sjc-1", 16, 2, denial="policy us-only allows regions us-east"),
            _figures("ord-1", 16, 2),
        ],
    )
    reasons = {v.cluster_id: v.reason for v in got.verdicts}
    assert reasons == {
        "iad-1": "insufficient_quota",
        "fra-1": "insufficient_capacity",
        "sjc-1": "policy_denied",
        "ord-1": None,
    }
    assert got.shares == {"ord-1": 1}


def test_topology_constraint_not_met_when_devices_are_scattered() -> None:
    got = plan_placement(
        Ask(device_count=8, replicas=1, single_domain=True), [ClusterFigures("a", Room(16, 0, 4), None)]
    )
    assert got.verdicts[0].reason == "topology_constraint_not_met"
    assert got.shares == {}
    assert got.unplaced == 1


def test_pinned_takes_every_replica_and_reports_its_shortfall() -> None:
    got = plan_placement(Ask(device_count=1, replicas=5, pinned="a"), [_figures("a", 2, 2)])
    assert got.shares == {"a": 5}
    assert got.verdicts[0].shortfall == 3
    assert got.unplaced == 3


def test_a_salt_orders_equally_good_clusters_its_own_way_and_never_a_worse_one_first() -> None:
    """Two server processes placing at once each see the same figures; with id order both would
    pick the same cluster (then node, then atoms) and refuse each other at the ledger."""
    tied = {f"c{n:03d}": 10 for n in range(100)}
    firsts = {next(iter(divide(1, tied, {}, salt=salt).shares)) for salt in range(1, 33)}
    assert len(firsts) > 20  # processes spread over the tied clusters
    assert divide(1, tied, {}).shares == {"c000": 1}  # no salt: id order
    assert divide(1, tied, {}, salt=7) == divide(1, tied, {}, salt=7)  # a salt decides alike
    # each salt's order is a shuffle, not a rotation: two salts that pick alike once part after it
    a, b = (list(divide(100, tied, {}, strategy="spread", salt=s).shares) for s in (3, 4))
    assert sum(x == y for x, y in zip(a, b, strict=True)) < 10
    roomier = {**tied, "c050": 11}
    for salt in range(1, 33):
        assert divide(1, roomier, {}, salt=salt).shares == {"c050": 1}  # quality first
        assert divide(1, tied, {"c042": 1}, salt=salt).shares == {"c042": 1}  # used first
