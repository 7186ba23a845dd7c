"""Fleet changes laid over a replayed fleet (docs/replay.md#fleet-changes): nodes added and
removed, pools changed and added, clusters added; every refusal INVALID_INPUT naming its entry."""

from __future__ import annotations

from typing import Any

import pytest

from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.ops.fleet import FleetSpec, parse_fleet
from better_compute.domain.ops.fleet_changes import apply_fleet_changes, parse_fleet_changes
from better_compute.domain.ops.replay import MAX_CHANGES, MAX_FLEET_NODES

H100 = {"model": "H100-80GB", "count": 4}


def fleet() -> FleetSpec:
    """c1: n-1 and n-2 (4 H100s each) in acme's exclusive p1; n-3 (4 H100s) in acme's mig pool m1
    cut into 1g.10gb instances, carrying the pool's layout."""
    return parse_fleet(
        {
            "tenants": [{"id": "acme"}],
            "clusters": [
                {
                    "name": "c1",
                    "region": "r1",
                    "nodes": [
                        {"name": "n", "replicas": 2, "gpus": H100},
                        {"name": "n-3", "gpus": {**H100, "migLayout": "all-1g.10gb"}},
                    ],
                }
            ],
            "pools": [
                {
                    "name": "p1",
                    "cluster": "c1",
                    "mode": "exclusive",
                    "owner": "acme",
                    "nodes": ["n-1", "n-2"],
                },
                {
                    "name": "m1",
                    "cluster": "c1",
                    "mode": "mig",
                    "owner": "acme",
                    "policy": {"migLayout": "all-1g.10gb"},
                    "nodes": ["n-3"],
                    "meter": "gpu.h100.hours",
                },
            ],
        }
    )


def changed(raw: dict[str, Any]) -> FleetSpec:
    return apply_fleet_changes(fleet(), parse_fleet_changes(raw))


def refusal(raw: object) -> InvalidInput:
    with pytest.raises(InvalidInput) as refused:
        apply_fleet_changes(fleet(), parse_fleet_changes(raw))
    return refused.value


def test_no_changes_leave_the_fleet_as_it_is() -> None:
    spec = fleet()
    assert apply_fleet_changes(spec, parse_fleet_changes(None)) is spec
    assert apply_fleet_changes(spec, parse_fleet_changes({})) is spec


def test_a_removed_node_leaves_the_fleet_and_its_pool() -> None:
    spec = changed({"removeNodes": ["n-2"]})
    assert [n.name for n in spec.nodes] == ["n-1", "n-3"]
    assert {p.name: p.nodes for p in spec.pools} == {"p1": ("n-1",), "m1": ("n-3",)}


def test_added_nodes_take_replicas_and_join_the_pool_they_name() -> None:
    spec = changed({"addNodes": [{"name": "x", "cluster": "c1", "replicas": 2, "pool": "p1", "gpus": H100}]})
    assert [n.name for n in spec.nodes] == ["n-1", "n-2", "n-3", "x-1", "x-2"]
    assert spec.pool_of_node("x-2") is not None
    assert {p.name: p.nodes for p in spec.pools}["p1"] == ("n-1", "n-2", "x-1", "x-2")
    added = spec.nodes[-1]
    assert (added.cluster, added.gpu_model, added.gpu_count, added.numa_nodes) == ("c1", "H100-80GB", 4, 2)


def test_a_pools_layout_change_is_where_its_carrying_nodes_start_and_other_settings_stay() -> None:
    spec = changed({"pools": [{"name": "m1", "policy": {"migLayout": "all-3g.40gb"}}]})
    m1 = {p.name: p for p in spec.pools}["m1"]
    assert (m1.settings.layout, m1.meter, m1.owner, m1.nodes) == (
        "all-3g.40gb",
        "gpu.h100.hours",
        "acme",
        ("n-3",),
    )
    (n3,) = [n for n in spec.nodes if n.name == "n-3"]
    assert spec.layout_of_node(n3) == "all-3g.40gb"


def test_a_pools_mode_change_drops_the_settings_of_the_old_mode() -> None:
    spec = changed({"pools": [{"name": "p1", "mode": "timeslice", "policy": {"replicas": 4}}]})
    p1 = {p.name: p for p in spec.pools}["p1"]
    assert (p1.mode, p1.settings.replicas, p1.nodes) == ("timeslice", 4, ("n-1", "n-2"))
    to_exclusive = changed({"pools": [{"name": "m1", "mode": "exclusive"}]})
    m1 = {p.name: p for p in to_exclusive.pools}["m1"]
    assert (m1.mode, m1.settings.mig_layout) == ("exclusive", None)
    (n3,) = [n for n in to_exclusive.nodes if n.name == "n-3"]
    assert to_exclusive.layout_of_node(n3) == "all-disabled"


def test_a_new_pool_takes_a_removed_pools_node_and_an_added_cluster_its_nodes() -> None:
    spec = changed(
        {
            "clusters": [{"name": "c2", "region": "r2", "nodes": [{"name": "m", "gpus": H100}]}],
            "removeNodes": ["n-2"],
            "addNodes": [{"name": "n-2", "cluster": "c2", "gpus": H100, "pool": "p2"}],
            "pools": [
                {
                    "name": "p2",
                    "cluster": "c2",
                    "mode": "timeslice",
                    "owner": "acme",
                    "policy": {"replicas": 2},
                    "nodes": ["m"],
                }
            ],
        }
    )
    assert [c.name for c in spec.clusters] == ["c1", "c2"]
    assert {p.name: p.nodes for p in spec.pools} == {"p1": ("n-1",), "m1": ("n-3",), "p2": ("m", "n-2")}
    assert {n.name: n.cluster for n in spec.nodes}["n-2"] == "c2"


@pytest.mark.parametrize(
    ("raw", "message", "field"),
    [
        (
            {"removeNodes": ["n-1", "n-2", "n-9"]},
            "fleetChanges.removeNodes[2]: node n-9 is not in the replayed fleet",
            "fleetChanges.removeNodes[2]",
        ),
        (
            {"removeNodes": ["n-1", "n-1"]},
            "fleetChanges.removeNodes[1]: node n-1 is named twice",
            "fleetChanges.removeNodes[1]",
        ),
        (
            {"addNodes": [{"name": "n-1", "cluster": "c1", "gpus": H100}]},
            "fleetChanges.addNodes[0]: node n-1 is already in the replayed fleet (node names are unique)",
            "fleetChanges.addNodes[0]",
        ),
        (
            {"addNodes": [{"name": "x", "cluster": "c9", "gpus": H100}]},
            "fleetChanges.addNodes[0]: cluster c9 is not in the replayed fleet",
            "fleetChanges.addNodes[0].cluster",
        ),
        (
            {"addNodes": [{"name": "x", "cluster": "c1", "gpus": H100, "pool": "p9"}]},
            "fleetChanges.addNodes[0]: pool p9 is not in the replayed fleet nor added by fleetChanges.pools",
            "fleetChanges.addNodes[0].pool",
        ),
        (
            {"addNodes": [{"name": "x", "cluster": "c1", "gpus": {"model": "T4", "count": 1}}]},
            "fleetChanges.addNodes[0]: unknown GPU model 'T4'",
            "fleetChanges.addNodes[0]",
        ),
        (
            {"addNodes": [{"name": "x", "cluster": "c1", "gpu": H100}]},
            "fleetChanges.addNodes[0]: unknown key 'gpu'",
            "fleetChanges.addNodes[0].gpu",
        ),
        (
            {"pools": [{"name": "m1", "policy": {"migLayout": "all-9g.99gb"}}]},
            "fleetChanges.pools[0]",
            "fleetChanges.pools[0]",
        ),
        (
            {"pools": [{"name": "p1", "nodes": ["n-1", "n-3"]}]},
            "fleetChanges.pools[0]: node 'n-3' already belongs to another pool",
            "fleetChanges.pools[0]",
        ),
        (
            {"pools": [{"name": "p2", "cluster": "c9", "mode": "exclusive", "owner": "acme"}]},
            "fleetChanges.pools[0]: cluster c9 is not in the replayed fleet",
            "fleetChanges.pools[0].cluster",
        ),
        (
            {"pools": [{"name": "p2", "cluster": "c1", "mode": "exclusive", "owner": "initech"}]},
            "fleetChanges.pools[0]: owner initech is not a tenant of the replayed fleet",
            "fleetChanges.pools[0].owner",
        ),
        (
            {"pools": [{"name": "p1", "mode": "timeslice"}, {"name": "p1", "mode": "mps"}]},
            "fleetChanges.pools[1]: pool p1 is changed twice (in fleetChanges.pools[0])",
            "fleetChanges.pools[1]",
        ),
        (
            {"clusters": [{"name": "c1", "region": "r1"}]},
            "fleetChanges.clusters[0]: cluster c1 is already in the replayed fleet",
            "fleetChanges.clusters[0]",
        ),
        ({"nodes": []}, "fleetChanges: unknown key 'nodes'", "fleetChanges.nodes"),
        ({"removeNodes": "n-1"}, "fleetChanges.removeNodes must be a list", "fleetChanges.removeNodes"),
        ([], "fleetChanges must be an object", "fleetChanges"),
    ],
)
def test_a_change_the_fleet_cannot_take_is_refused_naming_its_entry(
    raw: object, message: str, field: str
) -> None:
    refused = refusal(raw)
    assert refused.message.startswith(message), refused.message
    assert refused.details["field"] == field


def test_an_added_node_whose_gpus_cannot_take_its_pools_layout_is_refused() -> None:
    """An L40S has no MIG: it cannot join m1, cut into 1g.10gb instances."""
    refused = refusal(
        {
            "addNodes": [
                {"name": "l", "cluster": "c1", "gpus": {"model": "L40S-48GB", "count": 4}, "pool": "m1"}
            ]
        }
    )
    assert refused.message.startswith("fleetChanges.addNodes[0]: node l (L40S-48GB)"), refused.message


def test_the_entries_and_the_nodes_a_change_adds_have_limits() -> None:
    many = refusal({"removeNodes": ["n-1"] * (MAX_CHANGES + 1)})
    assert (
        many.message
        == f"fleetChanges holds {MAX_CHANGES + 1} entries; a fleet's changes are at most {MAX_CHANGES}"
    )
    huge = refusal({"addNodes": [{"name": "x", "cluster": "c1", "gpus": H100, "replicas": 10**9}]})
    assert huge.message == f"fleetChanges adds {10**9} nodes; a replayed fleet has at most {MAX_FLEET_NODES}"
