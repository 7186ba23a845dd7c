"""Layout grammar and the placement-finding validator, against the seed examples and the facts' lists."""

from __future__ import annotations

import itertools

import pytest

from better_compute.domain.catalog import GpuModel, MigProfile, get_model
from better_compute.domain.errors import InvalidInput, LayoutRefused, NotFound, UnknownProfile
from better_compute.domain.layouts import (
    Layout,
    PlacedInstance,
    fit_count,
    format_layout,
    format_partition_types,
    is_valid,
    layout_from_partition_types,
    parse_layout,
    partition_types,
    validate,
)

# --- grammar ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("all-disabled", "all-disabled"),
        ("ALL-DISABLED", "all-disabled"),
        ("all-1g.10gb", "all-1g.10gb"),
        ("all-1g.10gb+me", "all-1g.10gb+me"),
        ("mixed:3g.40gb+2x2g.20gb", "mixed:3g.40gb+2x2g.20gb"),
        ("mixed:2x2g.20gb+3g.40gb", "mixed:3g.40gb+2x2g.20gb"),
        ("mixed:1x2g.20gb+2g.20gb+3g.40gb", "mixed:3g.40gb+2x2g.20gb"),
        ("mixed: 1g.10gb + 4g.40gb + 2g.20gb", "mixed:4g.40gb+2g.20gb+1g.10gb"),
        ("mixed:1g.10gb+me+2x1g.10gb", "mixed:2x1g.10gb+1g.10gb+me"),
        ("mixed:1g.24gb+me.all+3x1g.24gb-me", "mixed:1g.24gb+me.all+3x1g.24gb-me"),
        ("mixed:1g.10gb+1g.20gb", "mixed:1g.20gb+1g.10gb"),
        ('["mig-4g.20gb","mig-2g.10gb","mig-1g.5gb"]', "mixed:4g.20gb+2g.10gb+1g.5gb"),
        ('["mig-1g.5gb", "mig-1g.5gb", "mig-7g.40gb"]', "mixed:7g.40gb+2x1g.5gb"),
    ],
)
def test_parse_and_format_canonically(text: str, canonical: str) -> None:
    layout = parse_layout(text)
    assert format_layout(layout) == canonical
    assert parse_layout(format_layout(layout)) == layout


def test_all_profile_needs_the_model_to_expand() -> None:
    layout = parse_layout("all-2g.20gb")
    assert layout == Layout.all_of("2g.20gb")
    with pytest.raises(InvalidInput):
        partition_types(layout)
    assert partition_types(layout, "H100-80GB") == ("mig-2g.20gb",) * 3


def test_endpoint_form_round_trip() -> None:
    layout = layout_from_partition_types(["mig-4g.20gb", "mig-2g.10gb", "mig-1g.5gb"])
    assert format_partition_types(layout) == '["mig-4g.20gb", "mig-2g.10gb", "mig-1g.5gb"]'
    assert parse_layout(format_partition_types(layout)) == layout


def test_layout_construction_is_canonical() -> None:
    assert Layout.mixed({"2g.20gb": 1, "3g.40gb": 1}) == Layout.mixed([("3g.40gb", 1), ("2g.20gb", 1)])
    assert Layout("mixed", counts=(("2g.20gb", 1), ("2g.20gb", 1))).counts == (("2g.20gb", 2),)
    assert str(Layout.disabled()) == "all-disabled"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "all-",
        "all-enabled",
        "mixed:",
        "mixed:0x3g.40gb",
        "mixed:3g.40gb++1g.10gb",
        "mixed:3x",
        "mixed:three.40gb",
        "some-layout",
        "[]",
        '["mig-3g.40gb"',
        '{"a": 1}',
        "[1, 2]",
        "mixed:4c.3g.40gb",
    ],
)
def test_malformed_layouts_are_invalid_input(text: str) -> None:
    with pytest.raises(InvalidInput) as info:
        parse_layout(text)
    assert info.value.code == "INVALID_INPUT"


# --- seed examples ------------------------------------------------------------------------------


def test_seed_h100_4g_2g_1g() -> None:
    placement = validate("mixed:4g.40gb+2g.20gb+1g.10gb", "H100-80GB")
    assert placement.instances == (
        PlacedInstance("4g.40gb", 0, 4),
        PlacedInstance("2g.20gb", 4, 2),
        PlacedInstance("1g.10gb", 6, 1),
    )


def test_seed_h100_two_3g_fill_the_gpu() -> None:
    placement = validate("mixed:2x3g.40gb", "H100-80GB")
    assert [(i.start, i.size) for i in placement.instances] == [(0, 4), (4, 4)]
    h100 = get_model("H100-80GB")
    for profile in h100.profiles:
        with pytest.raises((LayoutRefused, UnknownProfile)):
            validate(Layout.mixed([("3g.40gb", 2), (profile.name, 1)]), h100)


def test_seed_rtx_pro_6000_two_1g_with_one_2g() -> None:
    placement = validate("mixed:2x1g.24gb+2g.48gb", "RTX-PRO-6000")
    # The placement the public RTX PRO 6000 capture shows: 2g at 0:6, 1g at 6:3 and 9:3.
    assert placement.instances == (
        PlacedInstance("2g.48gb", 0, 6),
        PlacedInstance("1g.24gb", 6, 3),
        PlacedInstance("1g.24gb", 9, 3),
    )


def test_seed_sagemaker_a100_list() -> None:
    placement = validate('["mig-4g.20gb", "mig-2g.10gb", "mig-1g.5gb"]', "A100-40GB")
    assert sum(get_model("A100-40GB").profile(i.profile).compute_slices for i in placement.instances) == 7


def test_seed_rtx_pro_6000_choices() -> None:
    for text in ("all-1g.24gb", "mixed:2x1g.24gb+2g.48gb", "mixed:2x2g.48gb", "all-4g.96gb"):
        assert is_valid(text, "RTX-PRO-6000"), text


def test_seed_rtx_pro_4500_two_or_one() -> None:
    assert validate("all-1g.16gb", "RTX-PRO-4500").counts == (("1g.16gb", 2),)
    assert is_valid("all-2g.32gb", "RTX-PRO-4500")
    assert not is_valid("mixed:2g.32gb+1g.16gb", "RTX-PRO-4500")


# --- a table of valid and invalid layouts ---------------------------------------------------------

# The maximal layouts of the 8-slice family, in abstract names (facts §2), then per model.
MAXIMAL_CLASSIC = [
    {"7g": 1},
    {"4g": 1, "3g": 1},
    {"4g": 1, "2g": 1, "1g": 1},
    {"4g": 1, "1g": 3},
    {"3g": 2},
    {"3g": 1, "2g": 2},
    {"3g": 1, "2g": 1, "1g": 2},
    {"3g": 1, "1g": 4},
    {"2g": 3, "1g": 1},
    {"2g": 2, "1g": 3},
    {"2g": 1, "1g": 5},
    {"1g": 7},
]
MAXIMAL_REV2 = [
    {"4g": 1, "2g": 1, "1g2m": 1},
    {"4g": 1, "1g2m": 2},
    {"4g": 1, "1g2m": 1, "1g": 2},
    {"3g": 1, "2g": 1, "1g2m": 1},
    {"3g": 1, "1g2m": 2},
    {"3g": 1, "1g2m": 1, "1g": 2},
    {"2g": 3, "1g2m": 1},
    {"2g": 2, "1g2m": 2},
    {"2g": 2, "1g2m": 1, "1g": 2},
    {"2g": 1, "1g2m": 3},
    {"2g": 1, "1g2m": 2, "1g": 2},
    {"2g": 1, "1g2m": 1, "1g": 4},
    {"1g2m": 4},
    {"1g2m": 3, "1g": 2},
    {"1g2m": 2, "1g": 4},
    {"1g2m": 1, "1g": 6},
]
NAMES = {
    "A100-40GB": {
        "7g": "7g.40gb",
        "4g": "4g.20gb",
        "3g": "3g.20gb",
        "2g": "2g.10gb",
        "1g": "1g.5gb",
        "1g2m": "1g.10gb",
    },
    "H100-80GB": {
        "7g": "7g.80gb",
        "4g": "4g.40gb",
        "3g": "3g.40gb",
        "2g": "2g.20gb",
        "1g": "1g.10gb",
        "1g2m": "1g.20gb",
    },
    "H200-141GB": {
        "7g": "7g.141gb",
        "4g": "4g.71gb",
        "3g": "3g.71gb",
        "2g": "2g.35gb",
        "1g": "1g.18gb",
        "1g2m": "1g.35gb",
    },
}


def _concrete(model_id: str, abstract: dict[str, int]) -> str:
    return format_layout(Layout.mixed({NAMES[model_id][k]: n for k, n in abstract.items()}))


MAXIMAL_CASES = [
    (model_id, _concrete(model_id, abstract))
    for model_id in NAMES
    for abstract in MAXIMAL_CLASSIC + MAXIMAL_REV2
]


@pytest.mark.parametrize(("model_id", "text"), MAXIMAL_CASES)
def test_maximal_layouts_are_valid_and_cannot_grow(model_id: str, text: str) -> None:
    validate(text, model_id)
    base = parse_layout(text)
    for name in NAMES[model_id].values():
        grown = Layout.mixed([*base.counts, (name, 1)])
        assert not is_valid(grown, model_id), format_layout(grown)


VALID = [
    ("A100-40GB", "all-disabled"),
    ("A100-40GB", "all-1g.5gb"),
    ("A100-40GB", "all-1g.10gb"),
    ("A100-40GB", "all-3g.20gb"),
    ("A100-40GB", "mixed:1g.5gb+me+6x1g.5gb"),
    ("A100-40GB", "mixed:3g.20gb+2g.10gb+1g.5gb"),
    ("A100-80GB", "mixed:3g.39gb+3g.40gb"),
    ("H100-80GB", "all-7g.80gb"),
    ("H100-80GB", "mixed:2x1g.10gb+2g.20gb+3g.40gb"),
    ("H100-80GB", "mixed:1g.10gb+me+1g.20gb+2g.20gb"),
    ("H100-80GB", "mixed:2g.20gb"),
    ("H200-141GB", "all-1g.35gb"),
    ("H200-141GB", "mixed:2x1g.18gb+2g.35gb+3g.71gb"),
    ("H200-141GB", "mixed:4g.71gb+3g.71gb"),
    ("A30-24GB", "all-4g.24gb"),
    ("A30-24GB", "all-1g.6gb"),
    ("A30-24GB", "mixed:2x2g.12gb"),
    ("A30-24GB", "mixed:2g.12gb+2x1g.6gb"),
    ("A30-24GB", "mixed:2g.12gb+me+1g.6gb+me+1g.6gb"),
    ("RTX-PRO-6000", "all-1g.24gb"),
    ("RTX-PRO-6000", "all-2g.48gb"),
    ("RTX-PRO-6000", "mixed:1g.24gb+me.all+3x1g.24gb-me"),
    ("RTX-PRO-6000", "mixed:2g.48gb+me.all+2x1g.24gb-me"),
    ("RTX-PRO-6000", "mixed:1g.24gb+me+3x1g.24gb"),
    ("RTX-PRO-6000", "mixed:2x1g.24gb+gfx+2g.48gb+gfx"),
    ("L40S-48GB", "all-disabled"),
]


@pytest.mark.parametrize(("model_id", "text"), VALID)
def test_valid_layouts(model_id: str, text: str) -> None:
    placement = validate(text, model_id)
    assert placement.model == get_model(model_id).id


INVALID = [
    # (model, layout, offending profile, reason)
    ("A100-40GB", "mixed:2x4g.20gb", "4g.20gb", "too_many_instances"),
    ("A100-40GB", "mixed:2x3g.20gb+1g.5gb", "1g.5gb", "memory_slices_exceeded"),
    ("A100-40GB", "mixed:3x2g.10gb+1g.10gb+1g.5gb", "1g.5gb", "compute_slices_exceeded"),
    ("A100-40GB", "mixed:5x1g.10gb", "1g.10gb", "too_many_instances"),
    ("A100-40GB", "mixed:8x1g.5gb", "1g.5gb", "too_many_instances"),
    ("A100-40GB", "mixed:7g.40gb+1g.5gb", "1g.5gb", "compute_slices_exceeded"),
    ("A100-40GB", "mixed:2x1g.5gb+me", "1g.5gb+me", "too_many_instances"),
    ("A100-40GB", "mixed:3g.40gb", "3g.40gb", "unknown_profile"),
    ("A100-40GB", "all-1g.20gb", "1g.20gb", "unknown_profile"),
    ("H100-80GB", "mixed:2x4g.40gb", "4g.40gb", "too_many_instances"),
    ("H100-80GB", "mixed:2x3g.40gb+1g.10gb", "1g.10gb", "memory_slices_exceeded"),
    ("H100-80GB", "mixed:4g.40gb+3g.40gb+1g.10gb", "1g.10gb", "compute_slices_exceeded"),
    ("H100-80GB", "mixed:7x1g.10gb+me", "1g.10gb+me", "too_many_instances"),
    ("H100-80GB", "mixed:4g.40gb+2x2g.20gb", "2g.20gb", "compute_slices_exceeded"),
    ("H100-80GB", "mixed:3x2g.20gb+1g.20gb+1g.10gb", "1g.10gb", "compute_slices_exceeded"),
    ("H100-80GB", "mixed:3g.20gb", "3g.20gb", "unknown_profile"),
    ("H200-141GB", "mixed:7g.141gb+1g.18gb", "1g.18gb", "compute_slices_exceeded"),
    ("H200-141GB", "mixed:5x1g.35gb", "1g.35gb", "too_many_instances"),
    ("H200-141GB", "mixed:2x3g.71gb+1g.18gb+me", "1g.18gb+me", "memory_slices_exceeded"),
    ("A30-24GB", "mixed:4g.24gb+1g.6gb", "1g.6gb", "compute_slices_exceeded"),
    ("A30-24GB", "mixed:3x2g.12gb", "2g.12gb", "too_many_instances"),
    ("A30-24GB", "mixed:2x2g.12gb+me", "2g.12gb+me", "too_many_instances"),
    ("A30-24GB", "mixed:2x2g.12gb+1g.6gb", "1g.6gb", "compute_slices_exceeded"),
    ("A30-24GB", "mixed:3g.18gb", "3g.18gb", "unknown_profile"),
    ("RTX-PRO-6000", "mixed:3x2g.48gb", "2g.48gb", "too_many_instances"),
    ("RTX-PRO-6000", "mixed:4g.96gb+1g.24gb", "1g.24gb", "compute_slices_exceeded"),
    ("RTX-PRO-6000", "mixed:5x1g.24gb", "1g.24gb", "too_many_instances"),
    ("RTX-PRO-6000", "mixed:1g.24gb+me.all+1g.24gb", "1g.24gb+me.all", "media_engines_exceeded"),
    ("RTX-PRO-6000", "mixed:1g.24gb+me+1g.24gb+me.all", "1g.24gb+me.all", "media_engines_exceeded"),
    ("RTX-PRO-6000", "mixed:2g.48gb+me.all+1g.24gb+me.all", "1g.24gb+me.all", "media_engines_exceeded"),
    ("RTX-PRO-6000", "mixed:1g.16gb", "1g.16gb", "unknown_profile"),
    ("L40S-48GB", "all-1g.10gb", "1g.10gb", "unknown_profile"),
]


@pytest.mark.parametrize(("model_id", "text", "profile", "reason"), INVALID)
def test_invalid_layouts_name_the_profile_and_reason(
    model_id: str, text: str, profile: str, reason: str
) -> None:
    with pytest.raises(InvalidInput) as info:
        validate(text, model_id)
    error = info.value
    assert error.code == "INVALID_INPUT"
    assert isinstance(error, UnknownProfile if reason == "unknown_profile" else LayoutRefused)
    assert error.details["profile"] == profile
    assert error.details["reason"] == reason
    assert error.details["model"] == get_model(model_id).id
    assert profile in error.message


def test_table_size_and_coverage() -> None:
    valid_models = {m for m, _ in VALID} | {m for m, _ in MAXIMAL_CASES}
    invalid_models = {m for m, *_ in INVALID}
    required = {"A100-40GB", "H100-80GB", "H200-141GB", "A30-24GB", "RTX-PRO-6000"}
    assert len(VALID) + len(MAXIMAL_CASES) >= 20 and len(INVALID) >= 20
    assert required <= valid_models and required <= invalid_models


def test_unknown_model_is_not_found() -> None:
    with pytest.raises(NotFound):
        validate("all-1g.10gb", "Z100")


# --- drivers --------------------------------------------------------------------------------------


def test_a100_40gb_1g_10gb_needs_r525() -> None:
    with pytest.raises(LayoutRefused) as info:
        validate("mixed:1g.10gb", "A100-40GB", driver="470.256.02")
    assert info.value.details == {
        "profile": "1g.10gb",
        "reason": "driver_too_old",
        "model": "A100-40GB",
        "layout": "mixed:1g.10gb",
    }
    assert "R525" in info.value.message
    validate("mixed:1g.10gb", "A100-40GB", driver="525.85.12")
    validate("mixed:1g.10gb", "A100-40GB", driver="R580")


def test_4g_with_3g_needs_r510() -> None:
    with pytest.raises(LayoutRefused) as info:
        validate("mixed:4g.20gb+3g.20gb", "A100-40GB", driver="470.82.01")
    assert info.value.details["reason"] == "driver_too_old"
    assert "R510" in info.value.message
    validate("mixed:4g.20gb+3g.20gb", "A100-40GB", driver="510.47.03")
    validate("mixed:4g.20gb+2g.10gb", "A100-40GB", driver="470.82.01")


def test_model_minimum_driver() -> None:
    with pytest.raises(LayoutRefused) as info:
        validate("all-1g.18gb", "H200-141GB", driver="535.104.05")
    assert info.value.details["reason"] == "driver_too_old"
    validate("all-disabled", "H200-141GB", driver="470")


def test_garbage_driver_is_invalid_input() -> None:
    with pytest.raises(InvalidInput):
        validate("all-disabled", "H100-80GB", driver="newest")


# --- placement ------------------------------------------------------------------------------------


def test_all_profile_expands_to_what_fits() -> None:
    assert validate("all-1g.10gb", "A100-40GB").counts == (("1g.10gb", 4),)
    assert validate("all-1g.10gb", "H100-80GB").counts == (("1g.10gb", 7),)
    assert validate("all-1g.10gb+me", "H100-80GB").counts == (("1g.10gb+me", 1),)
    assert validate("all-1g.24gb", "RTX-PRO-6000").expanded == parse_layout("mixed:4x1g.24gb")
    assert fit_count("A30-24GB", "2g.12gb") == 2


def test_creation_order_is_largest_first_and_starts_are_allowed() -> None:
    placement = validate("mixed:1g.5gb+1g.10gb+3g.20gb", "A100-40GB")
    assert [i.profile for i in placement.instances] == ["3g.20gb", "1g.10gb", "1g.5gb"]
    model = get_model("A100-40GB")
    used: set[int] = set()
    for instance in placement.instances:
        assert instance.start in model.profile(instance.profile).starts
        span = set(range(instance.start, instance.start + instance.size))
        assert not span & used
        used |= span


def test_placement_uses_the_models_axis() -> None:
    a30 = validate("all-1g.6gb", "A30-24GB")
    assert [(i.start, i.size) for i in a30.instances] == [(0, 1), (1, 1), (2, 1), (3, 1)]
    rtx = validate("all-1g.24gb", "RTX-PRO-6000")
    assert [(i.start, i.size) for i in rtx.instances] == [(0, 3), (3, 3), (6, 3), (9, 3)]


def test_disabled_has_no_instances() -> None:
    placement = validate("all-disabled", "H100-80GB")
    assert placement.instances == ()
    assert not placement.mig_enabled


def _toy_model() -> GpuModel:
    """A model where slice sums allow 8 one-slice instances but starts only reach 7: the search decides."""
    one = MigProfile("1g.5gb", 19, "1_SLICE", 1, 1, 5.0, 8, (0, 1, 2, 3, 4, 5, 6), 1)
    return GpuModel(
        id="TOY",
        name="toy",
        memory_gib=40,
        mig_capable=True,
        compute_slices=8,
        memory_slices=8,
        placement_units=8,
        profiles=(one,),
    )


def test_slice_sums_are_not_enough_the_search_decides() -> None:
    toy = _toy_model()
    assert len(validate("mixed:7x1g.5gb", toy).instances) == 7
    with pytest.raises(LayoutRefused) as info:
        validate("mixed:8x1g.5gb", toy)
    assert info.value.details["reason"] == "no_start_position"
    assert info.value.details["profile"] == "1g.5gb"
    assert fit_count(toy, "1g.5gb") == 7


# --- exhaustive enumeration -----------------------------------------------------------------------


def _feasible(model_id: str, names: list[str]) -> int:
    """Feasible non-empty multisets; each count runs one past the profile's maximum, so nothing that
    could fit is cut off by the enumeration."""
    model = get_model(model_id)
    ranges = [range(model.profile(n).max_instances + 2) for n in names]
    found = 0
    for counts in itertools.product(*ranges):
        if any(counts) and is_valid(
            Layout.mixed([(n, c) for n, c in zip(names, counts, strict=True) if c]), model
        ):
            found += 1
    return found


@pytest.mark.parametrize("model_id", ["A100-40GB", "H100-80GB"])
def test_eight_slice_family_feasible_multisets(model_id: str) -> None:
    names = NAMES[model_id]
    classic = [names[k] for k in ("1g", "2g", "3g", "4g", "7g")]
    with_rev2 = [*classic, names["1g2m"]]
    assert _feasible(model_id, classic) == 37
    assert _feasible(model_id, with_rev2) == 77


@pytest.mark.parametrize(
    ("model_id", "names"),
    [("A30-24GB", ["1g.6gb", "2g.12gb", "4g.24gb"]), ("RTX-PRO-6000", ["1g.24gb", "2g.48gb", "4g.96gb"])],
)
def test_four_slice_models_feasible_multisets(model_id: str, names: list[str]) -> None:
    assert _feasible(model_id, names) == 9
