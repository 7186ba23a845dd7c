"""The fleet file parser: what it refuses, and that each refusal names the node or pool at fault."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from better_compute.domain.kernel.errors import DomainError
from better_compute.domain.ops.fleet import parse_fleet

FLEET: dict[str, Any] = {
    "tenants": [{"id": "platform"}],
    "clusters": [
        {
            "name": "c1",
            "region": "r1",
            "nodes": [{"name": "h", "replicas": 2, "gpus": {"model": "H100-80GB", "count": 2}}],
        }
    ],
    "pools": [
        {
            "name": "p",
            "cluster": "c1",
            "mode": "mig",
            "owner": "platform",
            "policy": {"migLayout": "all-1g.10gb"},
            "nodes": ["h-1"],
        }
    ],
}


def node(fleet: dict[str, Any]) -> dict[str, Any]:
    return dict(fleet["clusters"][0]["nodes"][0])


def changed(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    fleet = copy.deepcopy(FLEET)
    change(fleet)
    return fleet


def test_the_example_fleet_parses() -> None:
    spec = parse_fleet(FLEET)
    assert [n.name for n in spec.nodes] == ["h-1", "h-2"]
    assert spec.pools[0].settings.layout == "all-1g.10gb"


@pytest.mark.parametrize(
    ("change", "message", "field"),
    [
        pytest.param(
            lambda f: f["clusters"][0]["nodes"][0].update(numaNode=2),
            "node h: clusters[0].nodes[0]: unknown key 'numaNode' "
            "(a node takes carriesPoolLayout, gpus, host, name, numaNodes, nvlink, replicas)",
            "clusters[0].nodes[0].numaNode",
            id="a misspelt node key",
        ),
        pytest.param(
            lambda f: f["clusters"][0]["nodes"][0]["gpus"].update(migLayot="all-1g.10gb"),
            "node h: clusters[0].nodes[0].gpus: unknown key 'migLayot' "
            "(a gpus takes count, migLayout, model)",
            "clusters[0].nodes[0].gpus.migLayot",
            id="a misspelt gpus key",
        ),
        pytest.param(
            lambda f: f["pools"][0].update(ownerquota={"gpu": 1}),
            "pool p: pools[0]: unknown key 'ownerquota' "
            "(a pool takes cluster, meter, mode, name, nodes, owner, ownerQuota, policy)",
            "pools[0].ownerquota",
            id="a misspelt pool key",
        ),
        pytest.param(
            lambda f: f["clusters"][0].update(region2="x"),
            "clusters[0]: unknown key 'region2' (a cluster takes kind, name, nodes, region, residency, slurm)",
            "clusters[0].region2",
            id="a misspelt cluster key",
        ),
        pytest.param(
            lambda f: f["tenants"][0].update(nmae="x"),
            "tenants[0]: unknown key 'nmae' (a tenant takes id, name)",
            "tenants[0].nmae",
            id="a misspelt tenant key",
        ),
        pytest.param(
            lambda f: f.update(pool=[]),
            "the fleet file: unknown key 'pool' (a fleet takes clusters, deviceClasses, gpuModels, pools, tenants)",
            "pool",
            id="a misspelt top-level key",
        ),
    ],
)
def test_fleet_file_unknown_keys_are_refused_naming_the_node_or_pool(
    change: Callable[[dict[str, Any]], None], message: str, field: str
) -> None:
    """Issue 11, defect 16: unknown keys were ignored."""
    with pytest.raises(DomainError) as refused:
        parse_fleet(changed(change))
    assert refused.value.code == "INVALID_INPUT"
    assert refused.value.message == message
    assert refused.value.details["field"] == field


@pytest.mark.parametrize("value", [True, "3", 2.0, 0, -1, None])
@pytest.mark.parametrize(("key", "place"), [("replicas", "node"), ("numaNodes", "node"), ("count", "gpus")])
def test_fleet_file_replicas_and_counts_are_integers_only(value: Any, key: str, place: str) -> None:
    """Issue 11, defect 16: `replicas: true` read as 1 and `"3"` as 3."""

    def change(f: dict[str, Any]) -> None:
        target = f["clusters"][0]["nodes"][0]
        (target if place == "node" else target["gpus"])[key] = value

    with pytest.raises(DomainError) as refused:
        parse_fleet(changed(change))
    assert refused.value.code == "INVALID_INPUT"
    assert refused.value.message.startswith("node h: clusters[0].nodes[0]")
    assert f"{key} must be an integer of at least 1, not {value!r}" in refused.value.message


def test_fleet_file_host_declares_cpu_cores_and_memory_within_limits() -> None:
    spec = parse_fleet(
        changed(lambda f: f["clusters"][0]["nodes"][0].update(host={"cpuCores": 96, "memoryGiB": 1024}))
    )
    assert (spec.nodes[0].host_cpu_cores, spec.nodes[0].host_memory_mib) == (96, 1024 * 1024)
    assert parse_fleet(FLEET).nodes[0].host_cpu_cores is None  # not declared: not checked
    with pytest.raises(DomainError, match="cpuCores is at most 4096"):
        parse_fleet(changed(lambda f: f["clusters"][0]["nodes"][0].update(host={"cpuCores": 5000})))
    with pytest.raises(DomainError, match="unknown key 'cores'"):
        parse_fleet(changed(lambda f: f["clusters"][0]["nodes"][0].update(host={"cores": 8})))
    with pytest.raises(DomainError, match="memoryGiB must be an integer of at least 1"):
        parse_fleet(changed(lambda f: f["clusters"][0]["nodes"][0].update(host={"memoryGiB": 0})))


def test_fleet_file_nvlink_is_a_boolean() -> None:
    with pytest.raises(DomainError, match="nvlink must be true or false, not 'yes'"):
        parse_fleet(changed(lambda f: f["clusters"][0]["nodes"][0].update(nvlink="yes")))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param(
            lambda f: f["clusters"][0]["nodes"][0]["gpus"].update(model="H900"),
            "node h (clusters[0].nodes[0]): unknown GPU model 'H900'",
            id="an unknown model",
        ),
        pytest.param(
            lambda f: f["clusters"][0]["nodes"][0]["gpus"].update(migLayout="all-7g.141gb"),
            "node h (clusters[0].nodes[0]): layout all-7g.141gb is refused on H100-80GB",
            id="a node layout its model cannot take",
        ),
        pytest.param(
            lambda f: f["pools"][0].update(policy={"migLayout": "all-7g.141gb"}),
            "pool p (pools[0]): node h-1 (H100-80GB): layout all-7g.141gb is refused on H100-80GB",
            id="a pool layout a member cannot take",
        ),
        pytest.param(
            lambda f: f["pools"][0].update(policy={"replicas": 2}),
            "pool p: pools[0]: policy field 'replicas' does not apply to mig pools",
            id="a policy field of another mode",
        ),
        pytest.param(
            lambda f: f["pools"][0].update(nodes=["nope"]),
            "pool p: pools[0]: unknown node 'nope'",
            id="an unknown member",
        ),
    ],
)
def test_fleet_file_errors_name_the_node_or_pool_at_fault(
    change: Callable[[dict[str, Any]], None], message: str
) -> None:
    """Issue 11, defect 16: errors said `clusters[0].nodes[0]` or nothing, not which node."""
    with pytest.raises(DomainError) as refused:
        parse_fleet(changed(change))
    assert refused.value.message.startswith(message), refused.value.message


@pytest.mark.parametrize("layout", ["mixed:9x9g.99gb", "mixed:8x1g.10gb", "all-5g.99gb"])
def test_a_mig_pool_without_nodes_refuses_a_layout_no_catalog_model_could_take(layout: str) -> None:
    """Issue 11, defect 16: a mig pool with no nodes took any well-formed layout."""
    with pytest.raises(DomainError) as refused:
        parse_fleet(changed(lambda f: f["pools"][0].update(nodes=[], policy={"migLayout": layout})))
    assert refused.value.message == (
        f"pool p: pools[0]: policy.migLayout {layout} fits no GPU model in the catalog "
        "(`better-compute gpus` lists each model's profiles)"
    )
    assert refused.value.details["field"] == "pools[0].policy.migLayout"
    # One that some model takes (an A30's) is kept for nodes yet to come.
    spec = parse_fleet(changed(lambda f: f["pools"][0].update(nodes=[], policy={"migLayout": "all-1g.6gb"})))
    assert spec.pools[0].settings.layout == "all-1g.6gb"


GENERIC: dict[str, Any] = {
    "tenants": [{"id": "t"}],
    "gpuModels": [{"name": "T4", "memoryGiB": 16}, {"name": "G2"}],
    "clusters": [
        {
            "name": "c1",
            "region": "r1",
            "nodes": [
                {"name": "a", "gpus": {"model": "T4", "count": 2}},
                {"name": "b", "gpus": {"model": "G2", "count": 8}},
            ],
        }
    ],
    "pools": [
        {
            "name": "p",
            "cluster": "c1",
            "mode": "timeslice",
            "owner": "t",
            "policy": {"replicas": 20},
            "nodes": ["a", "b"],
        }
    ],
}


def test_a_fleet_file_names_a_declared_generic_model_as_a_whole_gpu_without_mig() -> None:
    spec = parse_fleet(GENERIC)
    assert [(n.name, n.gpu_model, n.gpu_count) for n in spec.nodes] == [("a", "T4", 2), ("b", "G2", 8)]
    t4 = spec.gpu_model_of("T4")
    assert (t4.memory_gib, t4.mig_capable, t4.profiles) == (16.0, False, ())
    assert spec.gpu_model_of("G2").memory_gib == 16.0  # undeclared memory: 16 GiB
    assert spec.gpu_model_of("H100-80GB").mig_capable  # the catalog's, as before


def test_a_fleet_file_still_refuses_a_model_neither_the_catalog_knows_nor_it_declares() -> None:
    undeclared = copy.deepcopy(GENERIC)
    undeclared["gpuModels"] = [{"name": "T4"}]
    with pytest.raises(DomainError, match="unknown GPU model 'G2'"):
        parse_fleet(undeclared)
    with pytest.raises(DomainError, match="unknown GPU model 'T4'"):
        parse_fleet({k: v for k, v in GENERIC.items() if k != "gpuModels"})


def test_a_generic_model_cannot_be_cut_into_mig_nor_shadow_a_catalog_model() -> None:
    mig = copy.deepcopy(GENERIC)
    mig["pools"][0] = {**mig["pools"][0], "mode": "mig", "policy": {"migLayout": "all-1g.10gb"}}
    with pytest.raises(DomainError, match="T4 does not support MIG"):
        parse_fleet(mig)
    layout = copy.deepcopy(GENERIC)
    layout["clusters"][0]["nodes"][0]["gpus"]["migLayout"] = "all-1g.10gb"
    with pytest.raises(DomainError, match="T4 does not support MIG"):
        parse_fleet(layout)
    shadow = copy.deepcopy(GENERIC)
    shadow["gpuModels"].append({"name": "h100-80gb", "memoryGiB": 1})
    with pytest.raises(DomainError, match="gpuModels\\[2\\]: h100-80gb is a catalog model"):
        parse_fleet(shadow)
    twice = copy.deepcopy(GENERIC)
    twice["gpuModels"].append({"name": "t4"})
    with pytest.raises(DomainError, match="GPU model t4 is declared twice"):
        parse_fleet(twice)
    misspelt = copy.deepcopy(GENERIC)
    misspelt["gpuModels"][0] = {"name": "T4", "memoryGib": 16}
    with pytest.raises(DomainError, match="memoryGib"):
        parse_fleet(misspelt)


@pytest.mark.parametrize(
    ("key", "place", "value", "limit"),
    [
        ("replicas", "node", 1_000_000_000, "100,000"),
        ("count", "gpus", 33, "32"),
        ("numaNodes", "node", 65, "64"),
    ],
)
def test_a_fleet_files_replicas_and_counts_are_refused_past_their_limit_before_any_node_is_made(
    key: str, place: str, value: int, limit: str
) -> None:
    """A `replicas` of a billion (a replay's fleet file is sent by a client) is refused as read,
    not after a billion nodes were made."""

    def change(f: dict[str, Any]) -> None:
        target = f["clusters"][0]["nodes"][0]
        (target if place == "node" else target["gpus"])[key] = value

    with pytest.raises(DomainError) as refused:
        parse_fleet(changed(change))
    assert refused.value.code == "INVALID_INPUT"
    assert f"{key} must be at most {limit}, not {value:,}" in refused.value.message


def test_a_fleet_file_describes_at_most_100000_nodes_counted_across_its_entries() -> None:
    def many(f: dict[str, Any]) -> None:
        entry = f["clusters"][0]["nodes"][0]
        f["clusters"][0]["nodes"] = [
            {**entry, "name": "a", "replicas": 60_000},
            {**entry, "name": "b", "replicas": 40_001},
        ]
        f["pools"][0]["nodes"] = ["a-1"]

    with pytest.raises(DomainError) as refused:
        parse_fleet(changed(many))
    assert refused.value.message.endswith("a fleet file describes at most 100,000 nodes (replicas counted)")
