"""The catalog against NVIDIA's published tables: nvidia-smi -lgip/-lgipp captures, NVIDIA's MIG user
guide and profile list, the sources docs/layouts.md#the-catalog names.

The expected tables below are transcribed by hand from those sources, not generated from the data
files, so a typo in either shows up here.
"""

from __future__ import annotations

import pytest

from better_compute.domain.catalog import (
    all_models,
    driver_at_least,
    find_model,
    get_model,
    mig_models,
    model_for_pci_device_id,
    model_for_product,
    parse_driver_version,
)
from better_compute.domain.kernel.errors import InvalidInput, NotFound, UnknownProfile

EIGHT = {
    19: ((0, 1, 2, 3, 4, 5, 6), 1),
    20: ((0, 1, 2, 3, 4, 5, 6), 1),
    15: ((0, 2, 4, 6), 2),
    14: ((0, 2, 4), 2),
    9: ((0, 4), 4),
    5: ((0,), 4),
    0: ((0,), 8),
}
A30 = {14: ((0, 1, 2, 3), 1), 21: ((0, 1, 2, 3), 1), 5: ((0, 2), 2), 6: ((0, 2), 2), 0: ((0,), 4)}
RTX6000 = {
    **dict.fromkeys((14, 21, 47, 65, 67), ((0, 3, 6, 9), 3)),
    **dict.fromkeys((5, 35, 64, 66), ((0, 6), 6)),
    **dict.fromkeys((0, 32), ((0,), 12)),
}

# name: (profile id, compute slices, memory slices, max instances, GiB)
PUBLISHED: dict[
    str, tuple[int, dict[int, tuple[tuple[int, ...], int]], dict[str, tuple[int, int, int, int, float]]]
] = {
    "A100-40GB": (
        8,
        EIGHT,
        {
            "1g.5gb": (19, 1, 1, 7, 4.75),
            "1g.5gb+me": (20, 1, 1, 1, 4.75),
            "1g.10gb": (15, 1, 2, 4, 9.62),
            "2g.10gb": (14, 2, 2, 3, 9.62),
            "3g.20gb": (9, 3, 4, 2, 19.50),
            "4g.20gb": (5, 4, 4, 1, 19.50),
            "7g.40gb": (0, 7, 8, 1, 39.25),
        },
    ),
    "A100-80GB": (
        8,
        EIGHT,
        {
            "1g.10gb": (19, 1, 1, 7, 9.62),
            "1g.10gb+me": (20, 1, 1, 1, 9.62),
            "1g.20gb": (15, 1, 2, 4, 19.50),
            "2g.20gb": (14, 2, 2, 3, 19.50),
            "3g.40gb": (9, 3, 4, 2, 39.25),
            "4g.40gb": (5, 4, 4, 1, 39.25),
            "7g.80gb": (0, 7, 8, 1, 78.50),
        },
    ),
    "H100-80GB": (
        8,
        EIGHT,
        {
            "1g.10gb": (19, 1, 1, 7, 9.75),
            "1g.10gb+me": (20, 1, 1, 1, 9.75),
            "1g.20gb": (15, 1, 2, 4, 19.62),
            "2g.20gb": (14, 2, 2, 3, 19.62),
            "3g.40gb": (9, 3, 4, 2, 39.50),
            "4g.40gb": (5, 4, 4, 1, 39.50),
            "7g.80gb": (0, 7, 8, 1, 79.25),
        },
    ),
    "H100-94GB": (
        8,
        EIGHT,
        {
            "1g.12gb": (19, 1, 1, 7, 10.75),
            "1g.12gb+me": (20, 1, 1, 1, 10.75),
            "1g.24gb": (15, 1, 2, 4, 21.62),
            "2g.24gb": (14, 2, 2, 3, 21.62),
            "3g.47gb": (9, 3, 4, 2, 46.38),
            "4g.47gb": (5, 4, 4, 1, 46.38),
            "7g.94gb": (0, 7, 8, 1, 93.12),
        },
    ),
    "H200-141GB": (
        8,
        EIGHT,
        {
            "1g.18gb": (19, 1, 1, 7, 16.00),
            "1g.18gb+me": (20, 1, 1, 1, 16.00),
            "1g.35gb": (15, 1, 2, 4, 32.50),
            "2g.35gb": (14, 2, 2, 3, 32.50),
            "3g.71gb": (9, 3, 4, 2, 69.75),
            "4g.71gb": (5, 4, 4, 1, 69.75),
            "7g.141gb": (0, 7, 8, 1, 140.00),
        },
    ),
    "B200-180GB": (
        8,
        EIGHT,
        {
            "1g.23gb": (19, 1, 1, 7, 22.00),
            "1g.23gb+me": (20, 1, 1, 1, 22.00),
            "1g.45gb": (15, 1, 2, 4, 44.25),
            "2g.45gb": (14, 2, 2, 3, 44.25),
            # Memory of the larger B200 profiles is not in any capture: checked for shape only.
            "3g.90gb": (9, 3, 4, 2, -1),
            "4g.90gb": (5, 4, 4, 1, -1),
            "7g.180gb": (0, 7, 8, 1, -1),
        },
    ),
    "GB200-186GB": (
        8,
        EIGHT,
        {
            "1g.23gb": (19, 1, 1, 7, 22.00),
            "1g.23gb+me": (20, 1, 1, 1, 22.00),
            "1g.47gb": (15, 1, 2, 4, 45.50),
            "2g.47gb": (14, 2, 2, 3, 45.50),
            "3g.93gb": (9, 3, 4, 2, -1),
            "4g.93gb": (5, 4, 4, 1, -1),
            "7g.186gb": (0, 7, 8, 1, -1),
        },
    ),
    # RTX PRO 4500: names and counts from NVIDIA's profile list; ids and placements are inferred.
    "RTX-PRO-4500": (
        2,
        dict.fromkeys((14, 47, 65, 67), ((0, 1), 1)) | dict.fromkeys((5, 35), ((0,), 2)),
        {
            "1g.16gb": (14, 1, 1, 2, -1),
            "1g.16gb+gfx": (47, 1, 1, 2, -1),
            "1g.16gb+me.all": (65, 1, 1, 1, -1),
            "1g.16gb-me": (67, 1, 1, 2, -1),
            "2g.32gb": (5, 2, 2, 1, -1),
            "2g.32gb+gfx": (35, 2, 2, 1, -1),
        },
    ),
    "A30-24GB": (
        4,
        A30,
        {
            "1g.6gb": (14, 1, 1, 4, 5.81),
            "1g.6gb+me": (21, 1, 1, 1, 5.81),
            "2g.12gb": (5, 2, 2, 2, 11.69),
            "2g.12gb+me": (6, 2, 2, 1, 11.69),
            "4g.24gb": (0, 4, 4, 1, 23.44),
        },
    ),
    "RTX-PRO-6000": (
        12,
        RTX6000,
        {
            "1g.24gb": (14, 1, 1, 4, 23.62),
            "1g.24gb+me": (21, 1, 1, 1, 23.62),
            "1g.24gb+gfx": (47, 1, 1, 4, 23.62),
            "1g.24gb+me.all": (65, 1, 1, 1, 23.62),
            "1g.24gb-me": (67, 1, 1, 4, 23.62),
            "2g.48gb": (5, 2, 2, 2, 47.38),
            "2g.48gb+gfx": (35, 2, 2, 2, 47.38),
            "2g.48gb+me.all": (64, 2, 2, 1, 47.38),
            "2g.48gb-me": (66, 2, 2, 2, 47.38),
            "4g.96gb": (0, 4, 4, 1, 95.00),
            "4g.96gb+gfx": (32, 4, 4, 1, 95.00),
        },
    ),
}


@pytest.mark.parametrize("model_id", sorted(PUBLISHED))
def test_profile_table_matches_the_published_one(model_id: str) -> None:
    axis, placements, profiles = PUBLISHED[model_id]
    model = get_model(model_id)
    assert model.mig_capable
    assert model.placement_units == axis
    assert {p.name for p in model.profiles} == set(profiles)
    for name, (pid, compute, memory, max_count, gib) in profiles.items():
        p = model.profile(name)
        assert (p.profile_id, p.compute_slices, p.memory_slices, p.max_instances) == (
            pid,
            compute,
            memory,
            max_count,
        )
        assert (p.starts, p.size) == placements[pid], name
        if gib >= 0:
            assert p.memory_gib == pytest.approx(gib), name


@pytest.mark.parametrize(
    ("model_id", "compute", "memory", "gib"),
    [
        pytest.param("A100-40GB", 7, 8, 40, id="an A100 40GB has 7 compute and 8 memory slices and 40 GB"),
        pytest.param("A100-80GB", 7, 8, 80, id="an A100 80GB has 7 compute and 8 memory slices and 80 GB"),
        pytest.param("H100-80GB", 7, 8, 80, id="an H100 80GB has 7 compute and 8 memory slices and 80 GB"),
        pytest.param("H100-94GB", 7, 8, 94, id="an H100 NVL has 7 compute and 8 memory slices and 94 GB"),
        pytest.param("H200-141GB", 7, 8, 141, id="an H200 has 7 compute and 8 memory slices and 141 GB"),
        pytest.param("B200-180GB", 7, 8, 180, id="a B200 has 7 compute and 8 memory slices and 180 GB"),
        pytest.param("A30-24GB", 4, 4, 24, id="an A30 has 4 compute and 4 memory slices and 24 GB"),
        pytest.param(
            "RTX-PRO-6000", 4, 4, 96, id="an RTX PRO 6000 has 4 compute and 4 memory slices and 96 GB"
        ),
        pytest.param(
            "RTX-PRO-4500", 2, 2, 32, id="an RTX PRO 4500 has 2 compute and 2 memory slices and 32 GB"
        ),
    ],
)
def test_slice_counts_per_model(model_id: str, compute: int, memory: int, gib: float) -> None:
    model = get_model(model_id)
    assert (model.compute_slices, model.memory_slices, model.memory_gib) == (compute, memory, gib)


def test_rtx_pro_4500_granularity() -> None:
    # docs/layouts.md#the-catalog: two compute and two memory slices, 1g.16gb twice or one 2g.32gb.
    model = get_model("RTX-PRO-4500")
    assert {p.name for p in model.profiles if not p.attribute} == {"1g.16gb", "2g.32gb"}
    assert model.profile("1g.16gb").max_instances == 2
    assert model.find_profile("1g.16gb+me") is None


def test_a100_40gb_two_slice_1g_needs_r525() -> None:
    assert get_model("A100-40GB").profile("1g.10gb").min_driver == "525"
    assert get_model("A100-40GB").profile("1g.5gb").min_driver is None


@pytest.mark.parametrize(
    "model_id",
    [
        pytest.param("L40S-48GB", id="an L40S"),
        pytest.param("L4-24GB", id="an L4"),
        pytest.param("A10G-24GB", id="an A10G"),
        pytest.param("RTX-6000-ADA", id="an RTX 6000 Ada"),
    ],
)
def test_non_mig_models_have_no_profiles(model_id: str) -> None:
    model = get_model(model_id)
    assert not model.mig_capable
    assert model.profiles == ()
    assert model.placement_units == 0
    with pytest.raises(UnknownProfile):
        model.profile("1g.10gb")


def test_model_ids_are_case_insensitive() -> None:
    assert get_model("h100-80gb").id == "H100-80GB"
    assert get_model(" rtx-pro-6000 ").id == "RTX-PRO-6000"
    assert find_model("nope") is None


def test_unknown_model_is_not_found() -> None:
    with pytest.raises(NotFound) as info:
        get_model("H300-1TB")
    assert info.value.code == "NOT_FOUND"
    assert "H100-80GB" in info.value.details["known"]


def test_every_required_model_id_exists() -> None:
    ids = {m.id for m in all_models()}
    required = {
        "A100-40GB",
        "A100-80GB",
        "A30-24GB",
        "H100-80GB",
        "H100-94GB",
        "H200-141GB",
        "B200-180GB",
        "RTX-PRO-6000",
        "RTX-PRO-4500",
        "L40S-48GB",
        "L4-24GB",
        "A10G-24GB",
        "RTX-6000-ADA",
    }
    assert required <= ids
    assert {m.id for m in mig_models()} >= required - {"L40S-48GB", "L4-24GB", "A10G-24GB", "RTX-6000-ADA"}


@pytest.mark.parametrize(
    ("product", "model_id"),
    [
        pytest.param("NVIDIA H100 80GB HBM3", "H100-80GB", id="the H100 SXM by its NVML name"),
        pytest.param("NVIDIA A100-SXM4-40GB", "A100-40GB", id="the A100 40GB SXM by its NVML name"),
        pytest.param("A100-SXM4-40GB", "A100-40GB", id="an older driver's name without NVIDIA in front"),
        pytest.param("NVIDIA A100-SXM4-80GB", "A100-80GB", id="the A100 80GB SXM by its NVML name"),
        pytest.param("NVIDIA H200", "H200-141GB", id="the H200 by its NVML name"),
        pytest.param("NVIDIA H100 NVL", "H100-94GB", id="H100 NVL is the 94 GB H100"),
        pytest.param("NVIDIA A30", "A30-24GB", id="the A30 by its NVML name"),
        pytest.param("NVIDIA B200", "B200-180GB", id="the B200 by its NVML name"),
        pytest.param(
            "NVIDIA RTX PRO 6000 Blackwell Server Edition",
            "RTX-PRO-6000",
            id="the RTX PRO 6000 Server Edition by its NVML name",
        ),
        pytest.param("NVIDIA L40S", "L40S-48GB", id="a GPU without MIG by its NVML name"),
        pytest.param("nvidia  l4", "L4-24GB", id="case and spacing do not matter"),
        pytest.param(
            "NVIDIA RTX 6000 Ada Generation", "RTX-6000-ADA", id="the RTX 6000 Ada by its NVML name"
        ),
    ],
)
def test_nvml_product_names_map_to_models(product: str, model_id: str) -> None:
    found = model_for_product(product)
    assert found is not None
    assert found.id == model_id


@pytest.mark.parametrize(
    "product",
    [
        pytest.param("NVIDIA H800", id="an H800 is not taken for an H100"),
        pytest.param("NVIDIA GeForce RTX 4090", id="a GeForce board"),
        pytest.param("NVIDIA H100", id="an H100 name without its memory or form factor"),
        pytest.param("Tesla V100-SXM2-16GB", id="a V100, which the catalog lacks"),
    ],
)
def test_unknown_products_are_not_guessed(product: str) -> None:
    assert model_for_product(product) is None


def test_pci_device_ids() -> None:
    assert model_for_pci_device_id("0x233010DE") is not None
    assert model_for_pci_device_id("0x2330").id == "H100-80GB"  # type: ignore[union-attr]
    assert model_for_pci_device_id(0x20B7).id == "A30-24GB"  # type: ignore[union-attr]
    assert model_for_pci_device_id("0xFFFF") is None


def test_nvml_profile_ids_are_per_family() -> None:
    # The same 1-slice enum is id 19 on the 8-slice family and 14 on A30 / RTX PRO 6000.
    assert get_model("H100-80GB").profile("1g.10gb").profile_id == 19
    assert get_model("A30-24GB").profile("1g.6gb").profile_id == 14
    assert get_model("RTX-PRO-6000").profile("1g.24gb").profile_id == 14
    assert get_model("H100-80GB").profile_by_id(15).name == "1g.20gb"  # type: ignore[union-attr]


def test_profile_lookup_accepts_mig_prefix_and_aliases() -> None:
    assert get_model("H100-80GB").profile("MIG-3g.40gb").name == "3g.40gb"
    assert get_model("A100-80GB").profile("3g.39gb").name == "3g.40gb"


def test_driver_versions() -> None:
    assert parse_driver_version("R525") == (525,)
    assert parse_driver_version("470.256.02") == (470, 256, 2)
    assert driver_at_least("525.85.12", "525")
    assert not driver_at_least("470.256.02", "525")
    assert driver_at_least("580", "575.51.03")
    with pytest.raises(InvalidInput):
        parse_driver_version("latest")
