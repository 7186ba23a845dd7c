"""The `node` selector key: a device line pinned to nodes (`In`) or kept off them (`NotIn`)."""

from __future__ import annotations

from better_compute.domain.fleet.atoms import selects
from better_compute.domain.kernel.selectors import parse_selector
from better_compute.domain.ledger.choose import Chosen, NoFit, choose, matching
from better_compute.domain.placement.device_classes import DeviceClass, belongs_to
from tests.builders import T0, atom, device_request

ATOMS = [
    atom("g1", node="gpu-a-1", attributes={"gpuModel": "H100-80GB"}),
    atom("g2", node="gpu-a-2", attributes={"gpuModel": "H100-80GB"}),
    atom("g3", node="gpu-b-1", attributes={"gpuModel": "L40S-48GB"}),
]


def test_node_in_matches_only_the_named_nodes() -> None:
    pinned = device_request("gpu", 1, node=["gpu-a-2", "gpu-b-1"])
    assert [a.gpu_id for a in matching(pinned, ATOMS)] == ["g2", "g3"]
    result = choose([device_request("gpu", 1, node=["gpu-a-2"])], ATOMS, {})
    assert isinstance(result, Chosen)
    assert result.atom_ids == (ATOMS[1].id,)


def test_node_not_in_keeps_a_line_off_the_named_nodes() -> None:
    kept_off = parse_selector({"matchExpressions": [{"key": "node", "op": "NotIn", "values": ["gpu-a-1"]}]})
    assert [a.gpu_id for a in ATOMS if selects(kept_off, a)] == ["g2", "g3"]


def test_node_and_attribute_expressions_must_all_hold() -> None:
    both = parse_selector(
        {
            "matchExpressions": [
                {"key": "node", "op": "In", "values": ["gpu-a-1", "gpu-b-1"]},
                {"key": "gpuModel", "op": "In", "values": ["L40S-48GB"]},
            ]
        }
    )
    assert [a.gpu_id for a in ATOMS if selects(both, a)] == ["g3"]


def test_a_named_node_with_no_free_atom_is_no_fit() -> None:
    busy_elsewhere = [a for a in ATOMS if a.node != "gpu-a-1"]
    result = choose([device_request("gpu", 1, node=["gpu-a-1"])], busy_elsewhere, {})
    assert isinstance(result, NoFit)
    assert (result.wanted, result.available) == (1, 0)


def test_node_is_read_from_the_atom_not_its_attributes() -> None:
    """An attribute that happens to be called `node` does not stand in for where the atom is."""
    odd = atom("g9", node="gpu-a-1", attributes={"node": "gpu-z-9"})
    only_z = parse_selector({"matchExpressions": [{"key": "node", "op": "In", "values": ["gpu-z-9"]}]})
    assert not selects(only_z, odd)


def test_a_device_class_may_name_nodes_too() -> None:
    sel = parse_selector({"matchLabels": {"node": "gpu-b-1"}})
    cls = DeviceClass("b-nodes", "gpu", sel, T0)
    assert [a.gpu_id for a in ATOMS if belongs_to(a, cls)] == ["g3"]
