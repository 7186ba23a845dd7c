"""Every row of the atom table in docs/concepts.md#atoms, and the attributes selectors match on."""

from __future__ import annotations

import pytest

from better_compute.bcd.fake import FakeNode
from better_compute.domain.fleet.atoms import (
    atom_id_for,
    attribute_filters,
    derive_gpu_atoms,
    derive_node_atoms,
    mig_atom_key,
    mig_key,
    nvlink_domains,
)
from better_compute.domain.fleet.inventory import GpuReport, MigInstance, NodeReport
from better_compute.domain.fleet.pools import PoolSharing, SharingMode, mps_units
from better_compute.domain.kernel.atom_classes import check_atom_class
from better_compute.domain.kernel.errors import InvalidInput
from tests.builders import h100, mig

EXCLUSIVE = PoolSharing("p", "exclusive")


def test_exclusive_gpu_not_in_mig_mode_is_one_bookable_gpu_atom() -> None:
    atoms = derive_gpu_atoms(h100(numa_node=1), "n1", EXCLUSIVE, "H100-80GB", "nvl-x")
    assert [(a.cls, a.bookable) for a in atoms] == [("gpu", True)]
    assert atoms[0].attributes == {
        "gpuProduct": "NVIDIA H100 80GB HBM3",
        "gpuModel": "H100-80GB",
        "numaNode": 1,
        "vramGiB": 80,
        "nvlinkDomain": "nvl-x",
    }


@pytest.mark.parametrize(
    "mode",
    [
        pytest.param("exclusive", id="in an exclusive pool"),
        pytest.param("mig", id="in a mig pool"),
        pytest.param("timeslice", id="in a timeslice pool"),
        pytest.param("mps", id="in an mps pool"),
    ],
)
def test_mig_mode_gpu_is_unbookable_parent_plus_one_atom_per_instance(mode: str) -> None:
    gpu = h100(
        mig_mode_current=True,
        mig_mode_pending=True,
        numa_node=0,
        mig_instances=(mig("3g.40gb", 1, 4, 4, "MIG-a"), mig("2g.20gb", 2, 0, 2), mig("2g.20gb", 3, 2, 2)),
    )
    atoms = derive_gpu_atoms(gpu, "n1", PoolSharing("p", mode, 4), "H100-80GB")  # type: ignore[arg-type]
    assert [(a.cls, a.bookable) for a in atoms] == [
        ("gpu", False),
        ("gpu.mig", True),
        ("gpu.mig", True),
        ("gpu.mig", True),
    ]
    first = atoms[1]
    assert first.attributes == {
        "gpuProduct": "NVIDIA H100 80GB HBM3",
        "gpuModel": "H100-80GB",
        "numaNode": 0,
        "migProfile": "3g.40gb",
        "giId": 1,
        "ciId": 0,
        "migUuid": "MIG-a",
    }


@pytest.mark.parametrize("mode", ["timeslice", "mps"])
@pytest.mark.parametrize(
    "replicas",
    [
        pytest.param(1, id="one slot, the fewest"),
        pytest.param(4, id="four slots"),
        pytest.param(48, id="48 slots, the most"),
    ],
)
def test_shared_pools_split_a_gpu_into_replicas_slots(mode: str, replicas: int) -> None:
    atoms = derive_gpu_atoms(h100(numa_node=0), "n1", PoolSharing("p", mode, replicas), "H100-80GB")  # type: ignore[arg-type]
    parent, slots = atoms[0], atoms[1:]
    assert (parent.cls, parent.bookable) == ("gpu", False)
    assert len(slots) == replicas
    assert all(a.cls == "gpu.slot" and a.bookable for a in slots)
    assert [a.attributes["slot"] for a in slots] == list(range(replicas))
    attrs = slots[0].attributes
    assert attrs["sharing"] == mode and attrs["slots"] == replicas and attrs["vramGiB"] == 80
    assert ("mpsUnits" in attrs) == (mode == "mps")
    if mode == "mps":
        assert attrs["mpsUnits"] == 100 // replicas


def test_mps_units_for_three_replicas_is_33() -> None:
    atoms = derive_gpu_atoms(h100(), "n1", PoolSharing("p", "mps", 3), "H100-80GB")
    assert {a.attributes["mpsUnits"] for a in atoms[1:]} == {33}
    assert mps_units(3) == 33


@pytest.mark.parametrize(
    "replicas",
    [
        pytest.param(0, id="no slots"),
        pytest.param(49, id="one past the most"),
        pytest.param(-1, id="a negative count"),
    ],
)
def test_replicas_out_of_range_is_invalid_input(replicas: int) -> None:
    with pytest.raises(InvalidInput) as err:
        derive_gpu_atoms(h100(), "n1", PoolSharing("p", "timeslice", replicas), "H100-80GB")
    assert err.value.code == "INVALID_INPUT"
    assert "between 1 and 48" in err.value.message


@pytest.mark.parametrize(("current", "pending"), [(False, True), (True, False)])
def test_mig_mode_changing_makes_every_atom_unbookable_and_partition_pending(
    current: bool, pending: bool
) -> None:
    gpu = h100(
        mig_mode_current=current,
        mig_mode_pending=pending,
        mig_instances=(mig("7g.80gb", 1, 0, 8),) if current else (),
    )
    for mode in ("exclusive", "mig", "timeslice"):
        atoms = derive_gpu_atoms(gpu, "n1", PoolSharing("p", mode, 2), "H100-80GB")  # type: ignore[arg-type]
        assert atoms and all(not a.bookable and a.partition_pending for a in atoms)


def test_unhealthy_gpu_has_no_bookable_atom() -> None:
    atoms = derive_gpu_atoms(h100(healthy=False), "n1", PoolSharing("p", "mps", 2), "H100-80GB")
    assert len(atoms) == 3 and not any(a.bookable for a in atoms)


def test_atom_ids_follow_physical_identity() -> None:
    a = derive_gpu_atoms(
        h100(mig_mode_current=True, mig_mode_pending=True, mig_instances=(mig("1g.10gb", 9, 0, 1),)),
        "n",
        None,
        None,
    )
    b = derive_gpu_atoms(
        h100(mig_mode_current=True, mig_mode_pending=True, mig_instances=(mig("1g.10gb", 9, 0, 1),)),
        "n",
        None,
        None,
    )
    c = derive_gpu_atoms(h100("GPU-other"), "n", None, None)
    assert [x.id for x in a] == [x.id for x in b]
    assert a[0].id != c[0].id
    assert len({x.id for x in a}) == len(a)


def test_unknown_product_has_no_gpu_model_attribute() -> None:
    atoms = derive_gpu_atoms(h100(product="NVIDIA Mystery 9000"), "n", None, None)
    assert "gpuModel" not in atoms[0].attributes
    assert atoms[0].attributes["gpuProduct"] == "NVIDIA Mystery 9000"


def test_nvlink_domains_are_connected_components() -> None:
    gpus = [
        h100("GPU-1", nvlink_peers=("GPU-2",)),
        h100("GPU-2", nvlink_peers=("GPU-1",)),
        h100("GPU-3", nvlink_peers=("GPU-4",)),
        h100("GPU-4"),
        h100("GPU-5"),
    ]
    domains = nvlink_domains(gpus)
    assert domains["GPU-1"] == domains["GPU-2"] == "nvl-GPU-1"
    assert domains["GPU-3"] == domains["GPU-4"] == "nvl-GPU-3"
    assert domains["GPU-5"] is None
    by_gpu = derive_node_atoms(NodeReport("n", tuple(gpus)), lambda _g: None, lambda _p: "H100-80GB")
    assert by_gpu["GPU-2"][0].attributes["nvlinkDomain"] == "nvl-GPU-1"


def test_an_atom_class_is_named_exactly_or_refused_with_its_field() -> None:
    assert check_atom_class("gpu.mig", "devices[0].class") == "gpu.mig"
    for bad in ("GPU", "mig", None, 3):
        with pytest.raises(InvalidInput) as refused:
            check_atom_class(bad, "quota.x")
        assert refused.value.details == {"field": "quota.x"}
        assert str(refused.value) == f"quota.x must be one of gpu, gpu.mig, gpu.slot, not {bad!r}"


def test_attribute_filters_are_key_value_pairs() -> None:
    assert attribute_filters(["migProfile=3g.40gb", "note=a=b"]) == {"migProfile": "3g.40gb", "note": "a=b"}
    assert attribute_filters([]) == {}
    for bad in ("novalue", "=x"):
        with pytest.raises(InvalidInput, match="attr must be key=value"):
            attribute_filters([bad])


def test_a_known_atom_id_is_unchanged() -> None:
    assert atom_id_for("GPU-0000", "mig:1.0") == "atm-63d67dedbacb588da80cc9a6"


def _fake_gpu(layout: str | None, model: str = "H100-80GB") -> GpuReport:
    node = FakeNode.build("n1", model, 1)
    if layout is not None:
        node.apply_layout(layout)
    return node.report().gpus[0]


MIG_POOL = PoolSharing("p", "mig")


def test_a_gpu_reporting_a_layout_other_than_the_one_it_is_told_is_partition_pending_and_unbookable() -> None:
    # A node that joined, was re-imaged or restarted whole, in a mig pool told all-1g.10gb: its whole
    # GPU is not for booking (it is about to be split), nor are instances of another layout.
    for reported in (None, "all-3g.40gb"):
        atoms = derive_gpu_atoms(_fake_gpu(reported), "n1", MIG_POOL, "H100-80GB", layout="all-1g.10gb")
        assert atoms and all(a.partition_pending and not a.bookable for a in atoms), reported
    # At its layout it takes work again; told none (its node keeps its own layout), it always does.
    at_layout = derive_gpu_atoms(_fake_gpu("all-1g.10gb"), "n1", MIG_POOL, "H100-80GB", layout="all-1g.10gb")
    assert [a.cls for a in at_layout if a.bookable] == ["gpu.mig"] * 7
    assert not any(a.partition_pending for a in at_layout)
    whole = derive_gpu_atoms(_fake_gpu(None), "n1", MIG_POOL, "H100-80GB", layout=None)
    assert [(a.cls, a.bookable, a.partition_pending) for a in whole] == [("gpu", True, False)]


@pytest.mark.parametrize("mode", ["exclusive", "timeslice", "mps"])
def test_a_split_gpu_in_a_pool_that_tells_mig_disabled_is_partition_pending(mode: SharingMode) -> None:
    pool = PoolSharing("p", mode, 2)
    atoms = derive_gpu_atoms(_fake_gpu("all-1g.10gb"), "n1", pool, "H100-80GB", layout="all-disabled")
    assert atoms and all(a.partition_pending and not a.bookable for a in atoms)
    whole = derive_gpu_atoms(_fake_gpu(None), "n1", pool, "H100-80GB", layout="all-disabled")
    assert any(a.bookable for a in whole) and not any(a.partition_pending for a in whole)


def test_a_gpu_without_mig_told_a_mig_layout_is_whole_and_schedulable() -> None:
    l40s = _fake_gpu(None, "L40S-48GB")
    atoms = derive_gpu_atoms(l40s, "n1", MIG_POOL, "L40S-48GB", layout="all-1g.10gb")
    assert [(a.cls, a.bookable, a.partition_pending) for a in atoms] == [("gpu", True, False)]


def _mig_atom_ids(*instances: MigInstance) -> dict[str, str]:
    """{MIG uuid: atom id} of an H100 in MIG mode with these instances."""
    gpu = h100(mig_mode_current=True, mig_mode_pending=True, mig_instances=instances)
    atoms = derive_gpu_atoms(gpu, "n1", PoolSharing("p", "mig"), "H100-80GB")
    return {str(a.attributes["migUuid"]): a.id for a in atoms if a.cls == "gpu.mig"}


def test_mig_slice_restored_under_other_gi_ids_is_the_same_atom() -> None:
    """NVML's GPU-instance ids are the driver's: after a reboot the same slice may come back under
    other ids, and is still the atom a booking names."""
    before = _mig_atom_ids(mig("1g.10gb", 2, 1, 1, "MIG-before"))
    after = _mig_atom_ids(mig("1g.10gb", 6, 1, 1, "MIG-after"))
    assert before["MIG-before"] == after["MIG-after"]


def test_mig_instance_of_another_profile_at_same_ids_is_not_the_booked_atom() -> None:
    booked = _mig_atom_ids(mig("1g.10gb", 1, 0, 1, "MIG-1g"))
    there_now = _mig_atom_ids(mig("3g.40gb", 1, 0, 4, "MIG-3g"))
    assert booked["MIG-1g"] != there_now["MIG-3g"]


def test_mig_instance_of_the_same_profile_at_another_placement_is_not_the_booked_atom() -> None:
    booked = _mig_atom_ids(mig("1g.10gb", 2, 1, 1, "MIG-at-1"))
    there_now = _mig_atom_ids(mig("1g.10gb", 2, 4, 1, "MIG-at-4"))
    assert booked["MIG-at-1"] != there_now["MIG-at-4"]


def test_mig_atom_keys_name_the_slice_and_a_narrower_compute_instance() -> None:
    assert mig_key("3g.40gb", 4) == "mig:3g.40gb@4"
    assert mig_key("MIG-1g.10gb+me", 6, ci_id=0) == "mig:1g.10gb+me@6"
    assert mig_key("1c.3g.40gb", 4, ci_id=2) == "mig:1c.3g.40gb@4.2"
    assert mig_atom_key(mig("2g.20gb", 9, 2, 2)) == "mig:2g.20gb@2"
