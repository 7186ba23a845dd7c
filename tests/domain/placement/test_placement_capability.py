"""Capability requests (docs/scheduling.md#capability-requests), pure: parsing, what kinds of device give, the
cheapest fit and why cheaper kinds are refused, and the implicit device class a resolution becomes."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from fractions import Fraction

import pytest

from better_compute.domain.kernel.errors import InvalidInput, NotFound
from better_compute.domain.placement.capability import (
    Capability,
    Kind,
    Offer,
    implicit_class,
    named_by_class,
    others_floors,
    parse_capability,
    resolve,
)
from better_compute.domain.placement.class_quotas import ClassQuota, Scope
from tests.builders import T0


def offer(kind: Kind, memory: float, slices: int, price: str | None, free: int = 4) -> Offer:
    return Offer(
        kind,
        memory,
        slices,
        Fraction(1),
        None if price is None else Decimal(price),
        "USD",
        free,
        None if price else "m",
    )


ONE_G = Kind("gpu.mig", "H100-80GB", mig_profile="1g.10gb")
TWO_G = Kind("gpu.mig", "H100-80GB", mig_profile="2g.20gb")
THREE_G = Kind("gpu.mig", "H100-80GB", mig_profile="3g.40gb")
SLOT = Kind("gpu.slot", "H100-80GB", sharing="timeslice", slots=4)
A100 = Kind("gpu", "A100-40GB")
H100_NV = Kind("gpu", "H100-80GB", nvlink=True)
OFFERS = [
    offer(ONE_G, 9.75, 1, "1.00"),
    offer(TWO_G, 19.62, 2, "2.00"),
    offer(THREE_G, 39.5, 3, "3.00"),
    offer(SLOT, 20, 0, "1.75"),
    offer(A100, 40, 7, "3.00"),
    offer(H100_NV, 80, 7, "7.00"),
]


@pytest.mark.parametrize(
    ("asked", "chosen", "refused"),
    [
        (Capability(memory_gib=16, compute_slices=2), TWO_G, [ONE_G, SLOT]),
        (Capability(memory_gib=18), SLOT, [ONE_G]),
        (Capability(compute_slices=3), THREE_G, [ONE_G, SLOT, TWO_G]),
        # equally cheap (3.00): the one that strands less memory beyond the ask
        (Capability(memory_gib=30), THREE_G, [ONE_G, SLOT, TWO_G]),
        (Capability(memory_gib=30, compute_slices=4), A100, [ONE_G, SLOT, TWO_G, THREE_G]),
        (Capability(nvlink_peer=True), H100_NV, [ONE_G, SLOT, TWO_G, THREE_G, A100]),
        (Capability(memory_gib=100), None, [ONE_G, SLOT, TWO_G, THREE_G, A100, H100_NV]),
    ],
)
def test_capability_requests_resolve_to_the_cheapest_fit_and_say_why_cheaper_kinds_were_not(
    asked: Capability, chosen: Kind | None, refused: list[Kind]
) -> None:
    got = resolve(asked, OFFERS, 1)
    assert (got.chosen.kind if got.chosen else None) == chosen
    assert [r.offer.kind for r in got.refused] == refused
    assert all(r.reason for r in got.refused)


def test_the_reasons_name_what_falls_short() -> None:
    got = resolve(Capability(memory_gib=16, compute_slices=2, nvlink_peer=True), OFFERS, 1)
    reasons = {r.offer.kind: r.reason for r in got.refused}
    assert reasons[ONE_G] == "9.75 GiB of memory, under the 16 asked"
    assert reasons[SLOT] == "0 compute slice(s), under the 2 asked"
    assert reasons[TWO_G] == "no NVLink peer"


def test_an_unpriced_kind_comes_after_every_priced_one_and_free_devices_break_ties() -> None:
    unpriced = offer(Kind("gpu", "L40S-48GB"), 48, 4, None)
    assert (
        resolve(Capability(memory_gib=40), [unpriced, offer(H100_NV, 80, 7, "7.00")], 1).chosen.kind
        == H100_NV
    )  # type: ignore[union-attr]
    busy = offer(Kind("gpu.mig", "A100-80GB", mig_profile="2g.20gb"), 19.62, 2, "2.00", free=0)
    assert resolve(Capability(memory_gib=16), [busy, offer(TWO_G, 19.62, 2, "2.00")], 1).chosen.kind == TWO_G  # type: ignore[union-attr]


def test_a_resolution_becomes_an_implicit_class_that_matches_exactly_its_kind() -> None:
    mig = implicit_class(TWO_G.class_name)
    assert mig.cls == "gpu.mig" and mig.name == "capability/gpu.mig/H100-80GB/mig=2g.20gb"
    assert mig.selector.matches({"gpuModel": "H100-80GB", "migProfile": "2g.20gb"})
    assert not mig.selector.matches({"gpuModel": "H100-80GB", "migProfile": "1g.10gb"})
    slot = implicit_class(SLOT.class_name)
    assert slot.selector.matches({"gpuModel": "H100-80GB", "sharing": "timeslice", "slots": 4})
    assert not slot.selector.matches({"gpuModel": "H100-80GB", "sharing": "mps", "slots": 4})
    nv = implicit_class(H100_NV.class_name)
    assert nv.selector.matches({"gpuModel": "H100-80GB", "nvlinkDomain": "x"})
    assert not nv.selector.matches({"gpuModel": "H100-80GB"})
    with pytest.raises(NotFound):
        implicit_class("capability/tpu/x")
    with pytest.raises(NotFound):
        implicit_class("h100-80gb-sxm")


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({}, "shape.capability"),
        ("20GiB", "shape.capability"),
        ({"memoryGiB": 20}, "shape.capability.memoryGiB"),
        ({"memoryGiB": {"min": 0}}, "shape.capability.memoryGiB.min"),
        ({"memoryGiB": {"min": True}}, "shape.capability.memoryGiB.min"),
        ({"computeSlices": {"min": 2.5}}, "shape.capability.computeSlices.min"),
        ({"computeSlices": {"min": 1, "max": 2}}, "shape.capability.computeSlices"),
        ({"nvlinkPeer": "yes"}, "shape.capability.nvlinkPeer"),
        ({"tensorCores": {"min": 1}}, "shape.capability.tensorCores"),
    ],
)
def test_a_bad_capability_is_refused_naming_its_field(raw: object, field: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_capability(raw)
    assert refused.value.details["field"] == field


def test_a_capability_reads_both_spellings_and_documents_itself() -> None:
    asked = parse_capability({"memory_gib": {"min": 20}, "computeSlices": {"min": 2}, "nvlink_peer": True})
    assert asked == Capability(20.0, 2, True)
    assert parse_capability(asked.document()) == asked


def _row(tenant: str, cluster: str | None, floor: int = 8) -> ClassQuota:
    scope: Scope = "cluster" if cluster else "fleet"
    return ClassQuota(tenant, "h100", scope, cluster, 8, floor, 1.0, T0)


def test_another_projects_floor_refuses_a_kind_only_where_it_holds_every_cluster_of_the_kind() -> None:
    held = replace(offer(H100_NV, 80, 7, "2"), covers=("h100",), clusters=("c1", "c2"))
    one = named_by_class("acme", [_row("globex", "c1")], [])
    assert one(held) is None  # c2 is free of floors: placement keeps the kind out of c1 only
    assert others_floors("acme", [_row("globex", "c1")], held.covers) == {"c1": "h100"}
    both = named_by_class("acme", [_row("globex", "c1"), _row("globex", "c2")], [])
    fleet = named_by_class("acme", [_row("globex", None)], [])
    said = "device class h100, which it is, carries other projects' floors: ask for h100 by name"
    assert both(held) == said and fleet(held) == said
    assert named_by_class("acme", [_row("acme", "c1", 0)], [])(held) is not None  # its own row: quota
    assert named_by_class("acme", [_row("globex", "c1", 0)], [])(held) is None  # no floor: nothing held
