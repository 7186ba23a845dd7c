"""A GPU belongs to one node (domain.fleet.gpu_owners): which uuids of an inventory another node holds, the
first of a batch to name a new one taking it, and when an admin may release a GPU."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from better_compute.domain.fleet.gpu_owners import (
    Holder,
    check_releasable,
    owned_elsewhere,
    refused_claims,
    reported_uuids,
)
from better_compute.domain.kernel.errors import InvalidState
from tests.builders import T0, h100, mig

SPLIT = h100(
    "GPU-a", mig_mode_current=True, mig_mode_pending=True, mig_instances=(mig("3g.40gb", 1, 0, 4, "MIG-1"),)
)


def test_a_gpu_is_known_by_its_uuid_and_its_mig_instances_uuids() -> None:
    assert reported_uuids([SPLIT, h100("GPU-b")]) == ["GPU-a", "MIG-1", "GPU-b"]


def test_a_node_may_report_what_it_holds_and_what_nobody_holds() -> None:
    held = {"GPU-a": Holder("GPU-a", "GPU-a", "n1"), "MIG-1": Holder("MIG-1", "GPU-a", "n1")}
    assert refused_claims([("n1", [SPLIT, h100("GPU-new")])], held) == {}


def test_a_node_naming_another_nodes_gpu_or_mig_instance_is_refused_with_its_holders() -> None:
    held = {"GPU-a": Holder("GPU-a", "GPU-a", "n1"), "MIG-1": Holder("MIG-1", "GPU-a", "n1")}
    assert refused_claims([("n2", [SPLIT])], held) == {"n2": (held["GPU-a"], held["MIG-1"])}
    # Only the MIG uuid, on a GPU of its own:
    own = h100("GPU-z", mig_mode_current=True, mig_instances=(mig("3g.40gb", 1, 0, 4, "MIG-1"),))
    assert refused_claims([("n2", [own])], held) == {"n2": (held["MIG-1"],)}


def test_a_gpu_reported_gone_but_still_booked_stays_its_nodes() -> None:
    held = {"GPU-a": Holder("GPU-a", "GPU-a", "n1", booked=True)}
    assert refused_claims([("n2", [h100("GPU-a")])], held) == {"n2": (held["GPU-a"],)}


def test_the_first_report_of_a_batch_to_name_a_new_gpu_takes_it() -> None:
    reports = [("n1", [h100("GPU-new")]), ("n2", [h100("GPU-new")]), ("n3", [h100("GPU-c")])]
    assert refused_claims(reports, {}) == {"n2": (Holder("GPU-new", "GPU-new", "n1"),)}


def test_a_refused_report_takes_nothing_it_names() -> None:
    held = {"GPU-a": Holder("GPU-a", "GPU-a", "n1")}
    reports = [("n2", [h100("GPU-a"), h100("GPU-new")]), ("n3", [h100("GPU-new")])]
    assert refused_claims(reports, held) == {"n2": (held["GPU-a"],)}


@given(
    st.lists(st.tuples(st.sampled_from(["n1", "n2", "n3"]), st.sampled_from(["A", "B", "C"])), max_size=12)
)
def test_no_uuid_is_taken_by_two_nodes(claims: list[tuple[str, str]]) -> None:
    by_node: dict[str, list[str]] = {}
    for node, gpu in claims:
        by_node.setdefault(node, []).append(gpu)
    reports = [
        (n, [h100(f"GPU-{g}", index=i) for i, g in enumerate(dict.fromkeys(gs))]) for n, gs in by_node.items()
    ]
    refused = refused_claims(reports, {})
    taken: dict[str, str] = {}
    for node, gpus in reports:
        if node not in refused:
            for uuid in reported_uuids(gpus):
                assert taken.setdefault(uuid, node) == node
    # Whatever a refused report named, someone took before it.
    assert all(h.uuid in taken for hs in refused.values() for h in hs)


def test_a_refusal_names_a_gpu_not_each_of_its_instances_and_the_holders_only_for_an_admin() -> None:
    holders = [Holder("GPU-a", "GPU-a", "n1"), Holder("MIG-1", "GPU-a", "n1"), Holder("MIG-9", "GPU-q", "n4")]
    to_node = owned_elsewhere("n2", holders)
    assert to_node.code == "CONFLICT" and to_node.details == {
        "node": "n2",
        "uuids": ["GPU-a", "MIG-9"],
        "reason": "GpuOwnedElsewhere",
    }
    assert "n1" not in to_node.message and to_node.owners == {"GPU-a": "n1", "MIG-9": "n4"}
    to_admin = owned_elsewhere("n2", holders, name_holders=True)
    assert "(GPU-a on node n1, MIG-9 on node n4)" in to_admin.message


def test_a_gpu_is_released_only_free_of_tenants_bookings() -> None:
    check_releasable("GPU-a", "n1", {})
    with pytest.raises(InvalidState) as refused:
        check_releasable("GPU-a", "n1", {"rsv-1": T0 + timedelta(hours=2), "rsv-2": T0})
    assert refused.value.details == {
        "gpuId": "GPU-a",
        "node": "n1",
        "allocationIds": ["rsv-1", "rsv-2"],
        "freeFrom": "2026-12-01T11:00:00Z",
    }
    with pytest.raises(InvalidState) as open_ended:
        check_releasable("GPU-a", "n1", {"wl-1.r0": None})
    assert open_ended.value.details["freeFrom"] is None and "with no end" in open_ended.value.message
