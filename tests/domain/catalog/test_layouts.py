"""Layout grammar and the validator that finds instance placements, against the worked examples and
the counts of layouts that fit in docs/layouts.md#worked-examples."""

from __future__ import annotations

import itertools

import pytest

from better_compute.domain import catalog
from better_compute.domain.catalog import GpuModel, MigProfile, get_model
from better_compute.domain.catalog.layouts import (
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
from better_compute.domain.kernel.errors import InvalidInput, LayoutRefused, NotFound, UnknownProfile

# --- grammar ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        pytest.param("all-disabled", "all-disabled", id="all-disabled is already canonical"),
        pytest.param("ALL-DISABLED", "all-disabled", id="case does not matter"),
        pytest.param("all-1g.10gb", "all-1g.10gb", id="all-<profile> keeps its form"),
        pytest.param("all-1g.10gb+me", "all-1g.10gb+me", id="a profile attribute is part of the name"),
        pytest.param(
            "mixed:3g.40gb+2x2g.20gb", "mixed:3g.40gb+2x2g.20gb", id="a canonical mixed layout is unchanged"
        ),
        pytest.param(
            "mixed:2x2g.20gb+3g.40gb", "mixed:3g.40gb+2x2g.20gb", id="the largest profile comes first"
        ),
        pytest.param(
            "mixed:1x2g.20gb+2g.20gb+3g.40gb",
            "mixed:3g.40gb+2x2g.20gb",
            id="counts of one profile are merged and 1x is left out",
        ),
        pytest.param(
            "mixed: 1g.10gb + 4g.40gb + 2g.20gb",
            "mixed:4g.40gb+2g.20gb+1g.10gb",
            id="spaces around the terms are ignored",
        ),
        pytest.param(
            "mixed:1g.10gb+me+2x1g.10gb",
            "mixed:2x1g.10gb+1g.10gb+me",
            id="a plain profile comes before its +me variant",
        ),
        pytest.param(
            "mixed:1g.24gb+me.all+3x1g.24gb-me",
            "mixed:1g.24gb+me.all+3x1g.24gb-me",
            id="+me.all and -me variants keep their names",
        ),
        pytest.param(
            "mixed:1g.10gb+1g.20gb", "mixed:1g.20gb+1g.10gb", id="among 1g profiles more memory comes first"
        ),
        pytest.param(
            '["mig-4g.20gb","mig-2g.10gb","mig-1g.5gb"]',
            "mixed:4g.20gb+2g.10gb+1g.5gb",
            id="the endpoint list is a mixed layout",
        ),
        pytest.param(
            '["mig-1g.5gb", "mig-1g.5gb", "mig-7g.40gb"]',
            "mixed:7g.40gb+2x1g.5gb",
            id="the endpoint list is counted and sorted",
        ),
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
        pytest.param("", id="an empty layout"),
        pytest.param("all-", id="all- without a profile"),
        pytest.param("all-enabled", id="all-enabled, which is no profile"),
        pytest.param("mixed:", id="mixed: without a profile"),
        pytest.param("mixed:0x3g.40gb", id="a count of zero"),
        pytest.param("mixed:3g.40gb++1g.10gb", id="an empty term between two plus signs"),
        pytest.param("mixed:3x", id="a count without a profile"),
        pytest.param("mixed:three.40gb", id="a profile that is not <G>g.<GB>gb"),
        pytest.param("some-layout", id="an unknown form"),
        pytest.param("[]", id="an empty partition-type list"),
        pytest.param('["mig-3g.40gb"', id="a partition-type list that is not JSON"),
        pytest.param('{"a": 1}', id="a JSON object instead of a list"),
        pytest.param("[1, 2]", id="numbers instead of partition types"),
        pytest.param("mixed:4c.3g.40gb", id="a compute-instance profile instead of a GPU-instance one"),
    ],
)
def test_malformed_layouts_are_invalid_input(text: str) -> None:
    with pytest.raises(InvalidInput) as info:
        parse_layout(text)
    assert info.value.code == "INVALID_INPUT"


# --- worked examples (docs/layouts.md#worked-examples) ------------------------------------------


def test_h100_4g_2g_1g() -> None:
    placement = validate("mixed:4g.40gb+2g.20gb+1g.10gb", "H100-80GB")
    assert placement.instances == (
        PlacedInstance("4g.40gb", 0, 4),
        PlacedInstance("2g.20gb", 4, 2),
        PlacedInstance("1g.10gb", 6, 1),
    )


def test_h100_two_3g_fill_the_gpu() -> None:
    placement = validate("mixed:2x3g.40gb", "H100-80GB")
    assert [(i.start, i.size) for i in placement.instances] == [(0, 4), (4, 4)]
    h100 = get_model("H100-80GB")
    for profile in h100.profiles:
        with pytest.raises((LayoutRefused, UnknownProfile)):
            validate(Layout.mixed([("3g.40gb", 2), (profile.name, 1)]), h100)


def test_rtx_pro_6000_two_1g_with_one_2g() -> None:
    placement = validate("mixed:2x1g.24gb+2g.48gb", "RTX-PRO-6000")
    # The placement the public RTX PRO 6000 capture shows: 2g at 0:6, 1g at 6:3 and 9:3.
    assert placement.instances == (
        PlacedInstance("2g.48gb", 0, 6),
        PlacedInstance("1g.24gb", 6, 3),
        PlacedInstance("1g.24gb", 9, 3),
    )


def test_a100_endpoint_list_uses_every_compute_slice() -> None:
    placement = validate('["mig-4g.20gb", "mig-2g.10gb", "mig-1g.5gb"]', "A100-40GB")
    assert sum(get_model("A100-40GB").profile(i.profile).compute_slices for i in placement.instances) == 7


def test_rtx_pro_6000_choices() -> None:
    for text in ("all-1g.24gb", "mixed:2x1g.24gb+2g.48gb", "mixed:2x2g.48gb", "all-4g.96gb"):
        assert is_valid(text, "RTX-PRO-6000"), text


def test_rtx_pro_4500_two_or_one() -> None:
    assert validate("all-1g.16gb", "RTX-PRO-4500").counts == (("1g.16gb", 2),)
    assert is_valid("all-2g.32gb", "RTX-PRO-4500")
    assert not is_valid("mixed:2g.32gb+1g.16gb", "RTX-PRO-4500")


# --- a table of valid and invalid layouts ---------------------------------------------------------

# The maximal layouts of the 8-unit family (docs/layouts.md#worked-examples), in abstract names, then
# per model: the 12 of the plain profiles, then the 16 more that the two-memory-slice 1g ("1g2m") adds.
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
    pytest.param(
        model_id,
        _concrete(model_id, abstract),
        id=f"{_concrete(model_id, abstract)} fits on {model_id} and no instance fits beside it",
    )
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
    pytest.param("A100-40GB", "all-disabled", id="MIG off is a layout on an A100 40GB"),
    pytest.param("A100-40GB", "all-1g.5gb", id="seven 1g.5gb fill an A100 40GB"),
    pytest.param("A100-40GB", "all-1g.10gb", id="four two-memory-slice 1g.10gb fill an A100 40GB"),
    pytest.param("A100-40GB", "all-3g.20gb", id="two 3g.20gb fill an A100 40GB"),
    pytest.param("A100-40GB", "mixed:1g.5gb+me+6x1g.5gb", id="one 1g.5gb+me beside six plain 1g.5gb"),
    pytest.param("A100-40GB", "mixed:3g.20gb+2g.10gb+1g.5gb", id="3g, 2g and 1g together on an A100 40GB"),
    pytest.param("A100-80GB", "mixed:3g.39gb+3g.40gb", id="the 3g.39gb alias counts as a second 3g.40gb"),
    pytest.param("H100-80GB", "all-7g.80gb", id="one 7g.80gb takes a whole H100 80GB"),
    pytest.param(
        "H100-80GB", "mixed:2x1g.10gb+2g.20gb+3g.40gb", id="NVIDIA's balanced layout on an H100 80GB"
    ),
    pytest.param(
        "H100-80GB", "mixed:1g.10gb+me+1g.20gb+2g.20gb", id="a +me 1g beside a two-memory-slice 1g and a 2g"
    ),
    pytest.param("H100-80GB", "mixed:2g.20gb", id="one 2g.20gb alone on an H100 80GB"),
    pytest.param("H200-141GB", "all-1g.35gb", id="four 1g.35gb fill an H200"),
    pytest.param("H200-141GB", "mixed:2x1g.18gb+2g.35gb+3g.71gb", id="NVIDIA's balanced layout on an H200"),
    pytest.param("H200-141GB", "mixed:4g.71gb+3g.71gb", id="4g beside 3g on an H200 with a current driver"),
    pytest.param("A30-24GB", "all-4g.24gb", id="one 4g.24gb takes a whole A30"),
    pytest.param("A30-24GB", "all-1g.6gb", id="four 1g.6gb fill an A30"),
    pytest.param("A30-24GB", "mixed:2x2g.12gb", id="two 2g.12gb fill an A30"),
    pytest.param("A30-24GB", "mixed:2g.12gb+2x1g.6gb", id="NVIDIA's balanced layout on an A30"),
    pytest.param("A30-24GB", "mixed:2g.12gb+me+2x1g.6gb", id="one +me instance beside plain ones on an A30"),
    pytest.param("A100-80GB", "mixed:1g.10gb+me+6x1g.10gb", id="one +me 1g beside six plain 1g on an A100"),
    pytest.param("H100-80GB", "mixed:1g.10gb+me+6x1g.10gb", id="one +me 1g beside six plain 1g on an H100"),
    pytest.param("RTX-PRO-6000", "all-1g.24gb", id="four 1g.24gb fill an RTX PRO 6000"),
    pytest.param("RTX-PRO-6000", "all-2g.48gb", id="two 2g.48gb fill an RTX PRO 6000"),
    pytest.param(
        "RTX-PRO-6000",
        "mixed:1g.24gb+me.all+3x1g.24gb-me",
        id="a 1g with every media engine beside three 1g with none",
    ),
    pytest.param(
        "RTX-PRO-6000",
        "mixed:2g.48gb+me.all+2x1g.24gb-me",
        id="a 2g with every media engine beside two 1g with none",
    ),
    pytest.param(
        "RTX-PRO-6000", "mixed:1g.24gb+me+3x1g.24gb", id="a +me 1g and three plain 1g share the media engines"
    ),
    pytest.param(
        "RTX-PRO-6000", "mixed:2x1g.24gb+gfx+2g.48gb+gfx", id="graphics profiles place like plain ones"
    ),
    pytest.param("L40S-48GB", "all-disabled", id="a GPU without MIG takes all-disabled"),
]


@pytest.mark.parametrize(("model_id", "text"), VALID)
def test_valid_layouts(model_id: str, text: str) -> None:
    placement = validate(text, model_id)
    assert placement.model == get_model(model_id).id


INVALID = [
    # (model, layout, offending profile, reason)
    pytest.param(
        "A100-40GB",
        "mixed:2x4g.20gb",
        "4g.20gb",
        "too_many_instances",
        id="two 4g.20gb on an A100 40GB, which holds one",
    ),
    pytest.param(
        "A100-40GB",
        "mixed:2x3g.20gb+1g.5gb",
        "1g.5gb",
        "memory_slices_exceeded",
        id="a 1g beside two 3g, which take all eight memory slices",
    ),
    pytest.param(
        "A100-40GB",
        "mixed:3x2g.10gb+1g.10gb+1g.5gb",
        "1g.5gb",
        "compute_slices_exceeded",
        id="three 2g and two 1g need eight compute slices of seven",
    ),
    pytest.param(
        "A100-40GB",
        "mixed:5x1g.10gb",
        "1g.10gb",
        "too_many_instances",
        id="five 1g.10gb on an A100 40GB, which holds four",
    ),
    pytest.param(
        "A100-40GB",
        "mixed:8x1g.5gb",
        "1g.5gb",
        "too_many_instances",
        id="eight 1g.5gb on an A100 40GB, which holds seven",
    ),
    pytest.param(
        "A100-40GB",
        "mixed:7g.40gb+1g.5gb",
        "1g.5gb",
        "compute_slices_exceeded",
        id="a 1g beside a 7g, which takes every compute slice",
    ),
    pytest.param(
        "A100-40GB",
        "mixed:2x1g.5gb+me",
        "1g.5gb+me",
        "too_many_instances",
        id="two 1g.5gb+me when every +me profile allows one",
    ),
    pytest.param(
        "A100-40GB",
        "mixed:3g.40gb",
        "3g.40gb",
        "unknown_profile",
        id="3g.40gb is an H100 profile, not an A100 40GB one",
    ),
    pytest.param(
        "A100-40GB",
        "all-1g.20gb",
        "1g.20gb",
        "unknown_profile",
        id="all-1g.20gb names a profile the A100 40GB lacks",
    ),
    pytest.param(
        "H100-80GB",
        "mixed:2x4g.40gb",
        "4g.40gb",
        "too_many_instances",
        id="two 4g.40gb on an H100, which holds one",
    ),
    pytest.param(
        "H100-80GB",
        "mixed:2x3g.40gb+1g.10gb",
        "1g.10gb",
        "memory_slices_exceeded",
        id="a 1g beside two 3g on an H100 runs out of memory slices",
    ),
    pytest.param(
        "H100-80GB",
        "mixed:4g.40gb+3g.40gb+1g.10gb",
        "1g.10gb",
        "compute_slices_exceeded",
        id="4g, 3g and 1g need eight compute slices of seven",
    ),
    pytest.param(
        "H100-80GB",
        "mixed:7x1g.10gb+me",
        "1g.10gb+me",
        "too_many_instances",
        id="seven 1g.10gb+me when the H100 allows one",
    ),
    pytest.param(
        "H100-80GB",
        "mixed:4g.40gb+2x2g.20gb",
        "2g.20gb",
        "compute_slices_exceeded",
        id="a 4g beside two 2g needs eight compute slices of seven",
    ),
    pytest.param(
        "H100-80GB",
        "mixed:3x2g.20gb+1g.20gb+1g.10gb",
        "1g.10gb",
        "compute_slices_exceeded",
        id="three 2g and two 1g on an H100 need eight compute slices of seven",
    ),
    pytest.param(
        "H100-80GB",
        "mixed:3g.20gb",
        "3g.20gb",
        "unknown_profile",
        id="3g.20gb is an A100 40GB profile, not an H100 one",
    ),
    pytest.param(
        "H200-141GB",
        "mixed:7g.141gb+1g.18gb",
        "1g.18gb",
        "compute_slices_exceeded",
        id="a 1g beside a 7g on an H200",
    ),
    pytest.param(
        "H200-141GB",
        "mixed:5x1g.35gb",
        "1g.35gb",
        "too_many_instances",
        id="five 1g.35gb on an H200, which holds four",
    ),
    pytest.param(
        "H200-141GB",
        "mixed:2x3g.71gb+1g.18gb+me",
        "1g.18gb+me",
        "memory_slices_exceeded",
        id="a +me 1g beside two 3g on an H200 runs out of memory slices",
    ),
    pytest.param(
        "A30-24GB",
        "mixed:4g.24gb+1g.6gb",
        "1g.6gb",
        "compute_slices_exceeded",
        id="a 1g beside a 4g on an A30 runs out of compute slices",
    ),
    pytest.param(
        "A30-24GB",
        "mixed:3x2g.12gb",
        "2g.12gb",
        "too_many_instances",
        id="three 2g.12gb on an A30, which holds two",
    ),
    pytest.param(
        "A30-24GB",
        "mixed:2x2g.12gb+me",
        "2g.12gb+me",
        "too_many_instances",
        id="two 2g.12gb+me when the A30 allows one",
    ),
    pytest.param(
        "A30-24GB",
        "mixed:2x2g.12gb+1g.6gb",
        "1g.6gb",
        "compute_slices_exceeded",
        id="a 1g beside two 2g on an A30 runs out of compute slices",
    ),
    pytest.param("A30-24GB", "mixed:3g.18gb", "3g.18gb", "unknown_profile", id="the A30 has no 3g profile"),
    pytest.param(
        "RTX-PRO-6000",
        "mixed:3x2g.48gb",
        "2g.48gb",
        "too_many_instances",
        id="three 2g.48gb on an RTX PRO 6000, which holds two",
    ),
    pytest.param(
        "RTX-PRO-6000",
        "mixed:4g.96gb+1g.24gb",
        "1g.24gb",
        "compute_slices_exceeded",
        id="a 1g beside a 4g on an RTX PRO 6000 runs out of compute slices",
    ),
    pytest.param(
        "RTX-PRO-6000",
        "mixed:5x1g.24gb",
        "1g.24gb",
        "too_many_instances",
        id="five 1g.24gb on an RTX PRO 6000, which holds four",
    ),
    pytest.param(
        "RTX-PRO-6000",
        "mixed:1g.24gb+me.all+1g.24gb",
        "1g.24gb+me.all",
        "media_engines_exceeded",
        id="a 1g with every media engine beside a plain 1g, which needs one",
    ),
    pytest.param(
        "RTX-PRO-6000",
        "mixed:1g.24gb+me+1g.24gb+me.all",
        "1g.24gb+me.all",
        "media_engines_exceeded",
        id="a 1g with every media engine beside a +me 1g",
    ),
    pytest.param(
        "RTX-PRO-6000",
        "mixed:2g.48gb+me.all+1g.24gb+me.all",
        "1g.24gb+me.all",
        "media_engines_exceeded",
        id="two instances that each take every media engine",
    ),
    pytest.param(
        "A30-24GB",
        "mixed:1g.6gb+me+2g.12gb+me",
        "1g.6gb+me",
        "media_engines_exceeded",
        id="issue 11 defect 17: two +me instances on an A30, which has one JPEG and one OFA engine",
    ),
    pytest.param(
        "A30-24GB",
        "mixed:2g.12gb+me+1g.6gb+me+1g.6gb",
        "1g.6gb+me",
        "media_engines_exceeded",
        id="a +me 2g and a +me 1g on one A30",
    ),
    pytest.param(
        "A100-40GB",
        "mixed:1g.5gb+me+7g.40gb",
        "1g.5gb+me",
        "compute_slices_exceeded",
        id="a +me 1g beside the whole A100",
    ),
    pytest.param(
        "RTX-PRO-6000",
        "mixed:1g.16gb",
        "1g.16gb",
        "unknown_profile",
        id="1g.16gb is an RTX PRO 4500 profile, not an RTX PRO 6000 one",
    ),
    pytest.param(
        "L40S-48GB", "all-1g.10gb", "1g.10gb", "unknown_profile", id="a GPU without MIG has no 1g.10gb"
    ),
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
    valid_models = {case.values[0] for case in VALID + MAXIMAL_CASES}
    invalid_models = {case.values[0] for case in INVALID}
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


def test_every_mig_model_has_media_engine_totals_and_its_me_profiles_take_from_them() -> None:
    """Issue 11, defect 17: only RTX PRO modelled media engines, so an A30 took two +me instances."""
    for model in catalog.mig_models():
        assert model.engine_total("ofa") >= 1 and model.engine_total("jpeg") >= 1, model.id
        for profile in model.profiles:
            if profile.name.endswith("+me"):
                assert dict(profile.engines).get("ofa") == 1, (model.id, profile.name)


def test_placements_are_confirmed_only_for_models_a_real_lgipp_was_read_on() -> None:
    """Issue 11, defect 17: docs/layouts.md calls the A100 80GB, B200 and GB200 placements inferred,
    but the catalog said confirmed. (The H200's were read on a real H200 since.)"""
    confirmed = {m.id for m in catalog.mig_models() if m.placements_confirmed}
    assert confirmed == {"A100-40GB", "A30-24GB", "H100-80GB", "H100-94GB", "H200-141GB", "RTX-PRO-6000"}
