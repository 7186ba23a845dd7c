"""Endpoints on MIG partitions (seed 003, docs/endpoints.md): every rule the seed states, as the pure core
decides it."""

from __future__ import annotations

from collections import Counter
from decimal import Decimal
from typing import Any

import pytest

from better_compute.domain.catalog import get_model
from better_compute.domain.endpoints.commands import parse_component, parse_endpoint
from better_compute.domain.endpoints.endpoints import (
    ComponentSpec,
    HostRoom,
    Partition,
    check_component_type,
    check_type_unchanged,
    check_variant_layout,
    partitions_per_instance,
    place_copies,
    plan_relayout,
)
from better_compute.domain.kernel.errors import InvalidInput, InvalidState

SEED_TYPES = ["mig-4g.20gb", "mig-2g.10gb", "mig-1g.5gb"]


def endpoint(types: list[str], **variant: Any) -> dict[str, Any]:
    return {
        "name": "multi-model-partitioned",
        "tenantId": "acme",
        "variants": [
            {
                "name": "AllTraffic",
                "poolId": "a100-mig",
                "instanceCount": 1,
                "acceleratorPartitionLayouts": [{"acceleratorPartitionTypes": types}],
                **variant,
            }
        ],
    }


def component(**over: Any) -> dict[str, Any]:
    return {
        "name": "summarizer",
        "endpointName": "multi-model-partitioned",
        "variantName": "AllTraffic",
        "model": "summarizer-model",
        "partitionType": "mig-4g.20gb",
        "devicesRequired": 1,
        "cpuCores": 1,
        "memoryMiB": 2048,
        "copies": 1,
        **over,
    }


def variant_of(types: list[str]) -> Any:
    return parse_endpoint(endpoint(types)).variants[0]


def test_the_seeds_a100_example_gives_24_partitions_eight_of_each_type() -> None:
    spec = parse_endpoint(endpoint(SEED_TYPES, pricePerInstanceHour="25.251286"))
    variant = spec.variants[0]
    assert variant.price_per_instance_hour == Decimal("25.251286")
    placed = check_variant_layout(variant, "A100-40GB")
    assert sorted(i.profile for i in placed.instances) == ["1g.5gb", "2g.10gb", "4g.20gb"]
    per_instance = partitions_per_instance(variant, gpus_per_instance=8)
    assert per_instance == {"mig-1g.5gb": 8, "mig-2g.10gb": 8, "mig-4g.20gb": 8}
    assert sum(per_instance.values()) == 24


def test_the_3g_profile_takes_three_sevenths_of_compute_and_half_the_memory_so_two_fill_an_h100() -> None:
    h100 = get_model("H100-80GB")
    three = h100.profile("3g.40gb")
    assert (three.compute_slices, three.memory_slices) == (3, 4)
    assert (h100.compute_slices, h100.memory_slices) == (7, 8)
    check_variant_layout(variant_of(["mig-3g.40gb", "mig-3g.40gb"]), h100)
    with pytest.raises(InvalidInput) as refused:  # one compute slice is left, but no memory
        check_variant_layout(variant_of(["mig-3g.40gb", "mig-3g.40gb", "mig-1g.10gb"]), h100)
    assert refused.value.details["reason"] in ("memory_slices_exceeded", "no_start_position")


def test_4g_and_3g_fill_an_h100_and_one_more_partition_beside_them_is_refused_naming_it() -> None:
    """4 + 3 compute and 4 + 4 memory units are exactly the GPU's 7 and 8: the seed's rule accepts
    it, and so does the hardware (NVIDIA lists 4g+3g from R510); nothing fits beside them."""
    check_variant_layout(variant_of(["mig-4g.40gb", "mig-3g.40gb"]), "H100-80GB")
    with pytest.raises(InvalidInput) as refused:
        check_variant_layout(variant_of(["mig-4g.40gb", "mig-3g.40gb", "mig-1g.10gb"]), "H100-80GB")
    assert refused.value.details["partitionType"] == "mig-1g.10gb"
    assert refused.value.details["reason"] == "compute_slices_exceeded"
    assert "do not fit on one H100-80GB" in refused.value.message
    assert "no fallback to a whole GPU" in refused.value.message


def test_a_layout_over_the_units_is_refused() -> None:
    with pytest.raises(InvalidInput) as refused:
        check_variant_layout(variant_of(["mig-4g.20gb", "mig-4g.20gb"]), "A100-40GB")
    assert refused.value.details["reason"] in ("compute_slices_exceeded", "too_many_instances")


def test_a_type_the_gpu_lacks_is_refused_and_an_h100_layout_given_to_an_a100_pool_is_refused() -> None:
    with pytest.raises(InvalidInput) as lacking:
        check_variant_layout(variant_of(["mig-4g.20gb"]), "H100-80GB")  # an A100 40GB's name
    assert lacking.value.details == {
        "variant": "AllTraffic",
        "partitionType": "mig-4g.20gb",
        "model": "H100-80GB",
        "reason": "unknown_profile",
    }
    assert "mig-4g.40gb" in lacking.value.message  # it says what the GPU offers instead
    with pytest.raises(InvalidInput) as crossed:
        check_variant_layout(variant_of(["mig-3g.40gb", "mig-3g.40gb"]), "A100-40GB")
    assert crossed.value.details["partitionType"] == "mig-3g.40gb"


@pytest.mark.parametrize(
    "types",
    [
        ["mig-1g.24gb"] * 4,
        ["mig-1g.24gb", "mig-1g.24gb", "mig-2g.48gb"],
        ["mig-2g.48gb", "mig-2g.48gb"],
        ["mig-4g.96gb"],
    ],
)
def test_the_g7e_rtx_pro_6000_layouts_the_seed_lists_fit(types: list[str]) -> None:
    placed = check_variant_layout(variant_of(types), "RTX-PRO-6000")
    assert sorted(f"mig-{i.profile}" for i in placed.instances) == sorted(types)


def test_an_rtx_pro_6000_split_past_its_quarters_is_refused() -> None:
    with pytest.raises(InvalidInput):
        check_variant_layout(variant_of(["mig-2g.48gb", "mig-2g.48gb", "mig-1g.24gb"]), "RTX-PRO-6000")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"acceleratorPartitionLayouts": []}, "variants[0].acceleratorPartitionLayouts"),
        (
            {"acceleratorPartitionLayouts": [{"acceleratorPartitionTypes": ["4g.20gb"]}]},
            "variants[0].acceleratorPartitionLayouts[0].acceleratorPartitionTypes[0]",
        ),
        (
            {"acceleratorPartitionLayouts": [{"acceleratorPartitionTypes": ["mig-1g.5gb"] * 8}]},
            "variants[0].acceleratorPartitionLayouts[0].acceleratorPartitionTypes",
        ),
        ({"instanceCount": 0}, "variants[0].instanceCount"),
        ({"pricePerInstanceHour": -1}, "variants[0].pricePerInstanceHour"),
        ({"pricePerInstanceHour": "NaN"}, "variants[0].pricePerInstanceHour"),
        ({"gpuType": "H100"}, "variants[0].gpuType"),
    ],
)
def test_a_malformed_variant_is_refused_naming_the_field(change: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_endpoint(endpoint(SEED_TYPES, **change))
    assert refused.value.details["field"] == field


def test_two_layout_entries_are_refused_the_one_entry_splits_every_accelerator() -> None:
    raw = endpoint(SEED_TYPES)
    entry = {"acceleratorPartitionTypes": SEED_TYPES}
    raw["variants"][0]["acceleratorPartitionLayouts"] = [entry, entry]
    with pytest.raises(InvalidInput, match="not positional"):
        parse_endpoint(raw)


def test_a_component_type_the_endpoint_did_not_declare_is_refused_with_no_fallback() -> None:
    spec = parse_endpoint(endpoint(SEED_TYPES))
    assert check_component_type(parse_component(component()), spec).name == "AllTraffic"
    with pytest.raises(InvalidInput) as refused:
        check_component_type(parse_component(component(partitionType="mig-3g.20gb")), spec)
    assert "does not declare" in refused.value.message and "no fallback" in refused.value.message
    assert refused.value.details["declared"] == sorted(SEED_TYPES)
    with pytest.raises(InvalidInput, match="has no variant"):
        check_component_type(parse_component(component(variantName="Canary")), spec)


def test_devices_required_other_than_one_with_a_partition_type_is_refused() -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_component(component(devicesRequired=2))
    assert refused.value.details["field"] == "devicesRequired"


def test_a_components_partition_type_is_fixed_for_its_life() -> None:
    made = parse_component(component())
    check_type_unchanged(made, "MIG-4g.20gb")  # the same type, spelled otherwise
    check_type_unchanged(made, None)
    with pytest.raises(InvalidState, match="create a new component"):
        check_type_unchanged(made, "mig-2g.10gb")


def test_min_copies_defaults_to_one_less_than_copies_and_at_least_one() -> None:
    assert parse_component(component(copies=4)).min_copies == 3
    assert parse_component(component(copies=1)).min_copies == 1
    assert parse_component(component(copies=4, minCopies=4)).min_copies == 4
    with pytest.raises(InvalidInput):
        parse_component(component(copies=2, minCopies=3))


def partitions(nodes: int, gpus: int, types: list[str]) -> list[Partition]:
    return [
        Partition(f"n{n}:g{g}:{k}", f"n{n}", f"n{n}:g{g}", t)
        for n in range(nodes)
        for g in range(gpus)
        for k, t in enumerate(types)
    ]


def room(nodes: int, cores: int = 64, mib: int = 1 << 20) -> dict[str, HostRoom]:
    return {f"n{n}": HostRoom(Decimal(cores), mib) for n in range(nodes)}


def test_copies_beyond_the_free_partitions_of_their_type_are_pending_with_the_shortfall() -> None:
    spec = parse_component(component(copies=10))
    plan = place_copies(spec, 10, partitions(1, 8, SEED_TYPES), set(), room(1))
    assert len(plan.placed) == 8 and plan.pending == 2
    assert {p.partition_type for p in plan.placed} == {"mig-4g.20gb"}
    assert plan.reason == "2 copies wait: no free mig-4g.20gb partition"


def test_copies_spread_over_instances_and_respect_host_cpu_and_memory() -> None:
    spec = parse_component(component(copies=4, cpuCores=8, memoryMiB=4096))
    plan = place_copies(spec, 4, partitions(2, 8, SEED_TYPES), set(), room(2))
    assert sorted(p.node for p in plan.placed) == ["n0", "n0", "n1", "n1"]
    tight = {"n0": HostRoom(Decimal(16), 1 << 20), "n1": HostRoom(Decimal(4), 1 << 20)}
    plan = place_copies(spec, 4, partitions(2, 8, SEED_TYPES), set(), tight)
    assert [p.node for p in plan.placed] == ["n0", "n0"] and plan.pending == 2
    assert plan.reason is not None and "host room" in plan.reason


def spec_of(name: str, partition_type: str, copies: int, min_copies: int | None = None) -> ComponentSpec:
    extra = {} if min_copies is None else {"minCopies": min_copies}
    return parse_component(component(name=name, partitionType=partition_type, copies=copies, **extra))


def test_a_live_relayout_rolls_instance_by_instance_keeping_every_component_at_min_copies() -> None:
    old = ["mig-4g.20gb", "mig-2g.10gb", "mig-1g.5gb"]
    new = ["mig-4g.20gb", "mig-1g.5gb", "mig-1g.5gb", "mig-1g.5gb"]
    a = spec_of("a", "mig-4g.20gb", 2)
    b = spec_of("b", "mig-1g.5gb", 2)
    copies = {"a": ["n0", "n1"], "b": ["n0", "n1"]}
    steps = plan_relayout(["n0", "n1"], {"n0": 1, "n1": 1}, old, new, [a, b], copies)
    assert [s.node for s in steps] == ["n0", "n1"]
    first = steps[0]
    assert dict(first.moves) == {"a": None, "b": None}  # n1's partitions of both types are taken
    assert sorted(first.returns) == ["a", "b"]


def test_a_relayout_short_of_room_leaves_waiting_the_copies_no_floor_needs() -> None:
    """Regression: moving copies off an instance into too little room went component by component in
    name order, so `small` took the room `tiny` needed for its floor and the roll was refused though
    an order that keeps both floors exists (one copy of each waits)."""
    old = ["mig-3g.40gb", "mig-2g.20gb", "mig-2g.20gb"]
    new = ["mig-3g.40gb", "mig-2g.20gb", "mig-1g.10gb", "mig-1g.10gb"]
    small = spec_of("small", "mig-2g.20gb", 6)  # minCopies 5
    tiny = spec_of("tiny", "mig-2g.20gb", 4)  # minCopies 3
    copies = {"small": ["n0"] * 3 + ["n1"] * 3, "tiny": ["n0"] * 2 + ["n1"] * 2}
    steps = plan_relayout(["n0", "n1"], {"n0": 8, "n1": 8}, old, new, [small, tiny], copies)
    second = steps[1]  # n1 holds all ten by then; n0, re-cut, has room for eight
    assert Counter(name for name, target in second.moves if target is None) == {"small": 1, "tiny": 1}
    assert sorted(second.returns) == ["small", "tiny"]


def test_a_relayout_that_would_take_a_component_below_min_copies_is_refused_up_front() -> None:
    a = spec_of("a", "mig-4g.20gb", 2, min_copies=2)
    with pytest.raises(InvalidState) as refused:
        plan_relayout(
            ["n0", "n1"],
            {"n0": 1, "n1": 1},
            SEED_TYPES,
            ["mig-4g.20gb", "mig-3g.20gb"],
            [a],
            {"a": ["n0", "n1"]},
        )
    assert refused.value.details["component"] == "a"
    assert "below its minCopies 2" in refused.value.message


def test_a_relayout_that_drops_a_type_in_use_is_refused_naming_the_component() -> None:
    b = spec_of("b", "mig-2g.10gb", 1)
    with pytest.raises(InvalidState) as refused:
        plan_relayout(["n0"], {"n0": 8}, SEED_TYPES, ["mig-4g.20gb", "mig-3g.20gb"], [b], {"b": ["n0"]})
    assert refused.value.details == {
        "component": "b",
        "partitionType": "mig-2g.10gb",
        "partitions": 0,
        "copies": 1,
    }


def test_a_relayout_with_room_elsewhere_moves_copies_first_and_never_drops_one() -> None:
    a = spec_of("a", "mig-4g.20gb", 1, min_copies=1)
    steps = plan_relayout(
        ["n0", "n1"], {"n0": 1, "n1": 1}, SEED_TYPES, ["mig-4g.20gb", "mig-3g.20gb"], [a], {"a": ["n0"]}
    )
    assert steps[0].moves == (("a", "n1"),) and steps[0].returns == ()
    assert steps[1].moves == (("a", "n0"),)  # n0 is re-cut by then: the copy moves back there


def _copy_component(**extra: Any) -> dict[str, Any]:
    return {
        "name": "llama",
        "endpointName": "chat",
        "variantName": "AllTraffic",
        "model": "llama",
        "partitionType": "mig-3g.40gb",
        "cpuCores": "0.001",
        "memoryMiB": 8,
        **extra,
    }


def test_a_components_container_takes_sagemakers_contract_and_round_trips_through_what_is_stored() -> None:
    from better_compute.domain.endpoints.endpoints import component_json
    from better_compute.domain.kernel.containers import Probe

    spec = parse_component(_copy_component(container={"image": "server:1"}))
    assert spec.container is not None and spec.invoke_path == "/invocations"
    assert spec.container.ports == (8080,)
    assert spec.container.readiness == Probe(http_path="/ping", http_port=8080)
    # below a container's least (0.01 core, 16 MiB): raised to it
    assert (spec.container.cpu, spec.container.memory_mib) == (0.01, 16)
    assert parse_component(component_json(spec)) == spec
    plain = parse_component(_copy_component())
    assert plain.container is None and "container" not in component_json(plain)
    assert parse_component(component_json(plain)) == plain
    given = parse_component(
        _copy_component(container={"image": "server:1", "ports": [9000]}, invokePath="/cgi-bin/x")
    )
    assert given.container is not None and given.container.readiness == Probe(
        http_path="/ping", http_port=9000
    )
    assert given.invoke_path == "/cgi-bin/x"
    for extra, field in [
        ({"container": "server:1"}, "container"),
        ({"container": {"image": "server:1", "env": {"NVIDIA_DRIVER_CAPABILITIES": "all"}}}, "container.env"),
        ({"invokePath": 3}, "invokePath"),
        ({"invokePath": "/a\tb"}, "invokePath"),
    ]:
        with pytest.raises(InvalidInput) as refused:
            parse_component(_copy_component(**extra))
        assert refused.value.details["field"] == field, (extra, refused.value.details)
