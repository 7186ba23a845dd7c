"""mig-parted files: what export writes, what import accepts and what it refuses."""

from __future__ import annotations

import pytest
import yaml

from better_compute.domain.catalog.layouts import parse_layout
from better_compute.domain.catalog.migparted import (
    DeviceLayout,
    NamedLayout,
    config_names,
    default_config_name,
    export_layout,
    export_mig_parted,
    import_mig_parted,
    read_config,
)
from better_compute.domain.kernel.errors import InvalidInput, LayoutRefused, NotFound, UnknownProfile


def test_export_one_layout() -> None:
    text = export_layout("mixed:3g.40gb+2x2g.20gb", "H100-80GB", "balanced")
    assert yaml.safe_load(text) == {
        "version": "v1",
        "mig-configs": {
            "balanced": [
                {"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 1, "2g.20gb": 2}},
            ]
        },
    }


def test_export_all_profile_expands_and_uses_mig_parted_naming() -> None:
    data = yaml.safe_load(export_layout("all-1g.10gb+me", "H100-80GB"))
    assert data["mig-configs"] == {
        "all-1g.10gb.me": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb+me": 1}}]
    }
    data = yaml.safe_load(export_layout("all-1g.10gb", "A100-40GB"))
    assert data["mig-configs"]["all-1g.10gb"][0]["mig-devices"] == {"1g.10gb": 4}


def test_export_disabled() -> None:
    data = yaml.safe_load(export_layout("all-disabled", "A30-24GB"))
    assert data["mig-configs"] == {"all-disabled": [{"devices": "all", "mig-enabled": False}]}


def test_default_names() -> None:
    assert default_config_name("all-disabled") == "all-disabled"
    assert default_config_name("all-1g.24gb-me") == "all-1g.24gb-me"
    assert default_config_name("mixed:2x3g.40gb") == "custom-2x3g.40gb"
    assert default_config_name("mixed:3g.40gb+2x2g.20gb") == "custom-3g.40gb-2x2g.20gb"
    assert default_config_name("mixed:1g.10gb+me+2x1g.10gb") == "custom-2x1g.10gb-1g.10gb.me"


def test_mixed_layouts_export_under_distinct_names_and_import_back() -> None:
    """Regression: every mixed layout was `custom-config`, so two of them merged into one config."""
    a, b = parse_layout("mixed:3g.40gb+2x2g.20gb"), parse_layout("mixed:4g.40gb+3g.40gb")
    text = export_mig_parted([NamedLayout(default_config_name(x), x, "H100-80GB") for x in (a, b)])
    assert config_names(text) == ("custom-3g.40gb-2x2g.20gb", "custom-4g.40gb-3g.40gb")
    assert import_mig_parted(text, "custom-3g.40gb-2x2g.20gb", "H100-80GB") == a
    assert import_mig_parted(text, "custom-4g.40gb-3g.40gb", "H100-80GB") == b


def test_export_refuses_two_layouts_for_the_same_gpus_under_one_name() -> None:
    with pytest.raises(InvalidInput, match="two layouts"):
        export_mig_parted(
            [
                NamedLayout("custom-config", "mixed:3g.40gb+2x2g.20gb", "H100-80GB"),
                NamedLayout("custom-config", "mixed:4g.40gb+3g.40gb", "H100-80GB"),
            ]
        )
    text = export_mig_parted(
        [
            NamedLayout("split", "mixed:3g.40gb+2x2g.20gb", "H100-80GB", devices=(0, 1)),
            NamedLayout("split", "all-disabled", "H100-80GB", devices=(2,)),
        ]
    )
    assert read_config(text, "split", "H100-80GB") == (
        DeviceLayout((0, 1), parse_layout("mixed:3g.40gb+2x2g.20gb")),
        DeviceLayout((2,), parse_layout("all-disabled")),
    )


def test_export_refuses_an_invalid_layout() -> None:
    with pytest.raises(LayoutRefused):
        export_layout("mixed:2x3g.40gb+1g.10gb", "H100-80GB")


def test_several_named_per_node_layouts_round_trip() -> None:
    text = export_mig_parted(
        [
            NamedLayout("node-a", "mixed:4g.40gb+2g.20gb+1g.10gb", "H100-80GB"),
            NamedLayout("node-b", "all-3g.20gb", "A100-40GB"),
            NamedLayout("node-c", "all-disabled", "A30-24GB"),
        ]
    )
    assert config_names(text) == ("node-a", "node-b", "node-c")
    assert import_mig_parted(text, "node-a", "H100-80GB") == parse_layout("mixed:4g.40gb+2g.20gb+1g.10gb")
    assert import_mig_parted(text, "node-b", "A100-40GB") == parse_layout("mixed:2x3g.20gb")
    assert import_mig_parted(text, "node-c", "A30-24GB") == parse_layout("all-disabled")


def test_one_config_for_two_models_uses_device_filters() -> None:
    text = export_mig_parted(
        [
            NamedLayout("balanced", "mixed:3g.40gb+2g.20gb+2x1g.10gb", "H100-80GB"),
            NamedLayout("balanced", "mixed:2g.12gb+2x1g.6gb", "A30-24GB"),
        ]
    )
    entries = yaml.safe_load(text)["mig-configs"]["balanced"]
    assert entries[1]["device-filter"] == "0x20B710DE"
    assert import_mig_parted(text, "balanced", "A30-24GB") == parse_layout("mixed:2g.12gb+2x1g.6gb")
    assert import_mig_parted(text, "balanced", "H100-80GB") == parse_layout("mixed:3g.40gb+2g.20gb+2x1g.10gb")
    with pytest.raises(InvalidInput):
        import_mig_parted(text, "balanced", "H200-141GB")


MIG_PARTED_DEFAULTS = """
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-enabled:
    - devices: all
      mig-enabled: true
      mig-devices: {}
  all-balanced:
    - device-filter: ["0x20B010DE", "0x20B110DE", "0x20F110DE", "0x20F610DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.5gb": 2
        "2g.10gb": 1
        "3g.20gb": 1
    - device-filter: ["0x233010DE", "0x233110DE", "0x232210DE", "0x20B210DE", "0x20B510DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 2
        "2g.20gb": 1
        "3g.40gb": 1
    - device-filter: "0x2BB510DE"
      devices: all
      mig-enabled: true
      mig-devices:
        "1g.24gb": 2
        "2g.48gb": 1
  too-big:
    - devices: all
      mig-enabled: true
      mig-devices:
        "3g.40gb": 2
        "1g.10gb": 1
  per-index:
    - devices: [0, 1]
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
    - devices: [2, 3]
      mig-enabled: true
      mig-devices: {"7g.80gb": 1}
"""


NVIDIA_EXAMPLE = """\
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false

  all-enabled:
    - devices: all
      mig-enabled: true
      mig-devices: {}

  all-enabled-bare:
    - devices: all
      mig-enabled: true

  all-1g.5gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.5gb": 7

  custom-config:
    - devices: [0,1,2,3]
      mig-enabled: false
    - devices: [4]
      mig-enabled: true
      mig-devices:
        "1g.5gb": 7
    - devices: [5]
      mig-enabled: true
      mig-devices:
        "2g.10gb": 3
    - devices: [6]
      mig-enabled: true
      mig-devices:
        "3g.20gb": 2
    - devices: [7]
      mig-enabled: true
      mig-devices:
        "1g.5gb": 2
        "2g.10gb": 1
        "3g.20gb": 1
"""
"""The shape of NVIDIA mig-parted's examples/config.yaml (`all-enabled-bare` leaves `mig-devices` out)."""


def test_import_nvidia_style_file() -> None:
    assert import_mig_parted(MIG_PARTED_DEFAULTS, "all-balanced", "A100-40GB") == parse_layout(
        "mixed:3g.20gb+2g.10gb+2x1g.5gb"
    )
    assert import_mig_parted(MIG_PARTED_DEFAULTS, "all-balanced", "H100-80GB") == parse_layout(
        "mixed:3g.40gb+2g.20gb+2x1g.10gb"
    )
    assert import_mig_parted(MIG_PARTED_DEFAULTS, "all-balanced", "RTX-PRO-6000") == parse_layout(
        "mixed:2g.48gb+2x1g.24gb"
    )
    assert import_mig_parted(MIG_PARTED_DEFAULTS, "all-disabled", "H100-80GB") == parse_layout("all-disabled")


def test_import_refuses_what_the_validator_refuses() -> None:
    with pytest.raises(LayoutRefused) as info:
        import_mig_parted(MIG_PARTED_DEFAULTS, "too-big", "H100-80GB")
    assert info.value.details["reason"] == "memory_slices_exceeded"
    with pytest.raises(UnknownProfile):
        import_mig_parted(MIG_PARTED_DEFAULTS, "too-big", "A100-40GB")


def test_import_refuses_driver_too_old() -> None:
    text = export_layout("all-1g.10gb", "A100-40GB")
    with pytest.raises(LayoutRefused) as info:
        import_mig_parted(text, "all-1g.10gb", "A100-40GB", driver="470.256.02")
    assert info.value.details["reason"] == "driver_too_old"


def test_nvidia_all_enabled_and_per_index_configs_import() -> None:
    """NVIDIA's own examples/config.yaml: `all-enabled` (no mig-devices) and per-index entries."""
    assert read_config(NVIDIA_EXAMPLE, "all-enabled", "A100-40GB") == (DeviceLayout("all", None),)
    assert read_config(NVIDIA_EXAMPLE, "all-enabled-bare", "A100-40GB") == (DeviceLayout("all", None),)
    assert read_config(NVIDIA_EXAMPLE, "custom-config", "A100-40GB") == (
        DeviceLayout((0, 1, 2, 3), parse_layout("all-disabled")),
        DeviceLayout((4,), parse_layout("mixed:7x1g.5gb")),
        DeviceLayout((5,), parse_layout("mixed:3x2g.10gb")),
        DeviceLayout((6,), parse_layout("mixed:2x3g.20gb")),
        DeviceLayout((7,), parse_layout("mixed:3g.20gb+2g.10gb+2x1g.5gb")),
    )
    assert read_config(MIG_PARTED_DEFAULTS, "per-index", "H100-80GB") == (
        DeviceLayout((0, 1), parse_layout("mixed:2x3g.40gb")),
        DeviceLayout((2, 3), parse_layout("mixed:7g.80gb")),
    )
    assert read_config(NVIDIA_EXAMPLE, "all-1g.5gb", "A100-40GB") == (
        DeviceLayout("all", parse_layout("mixed:7x1g.5gb")),
    )


def test_read_config_refuses_a_gpu_named_twice() -> None:
    text = (
        "version: v1\nmig-configs:\n  a:\n"
        "    - {devices: [0, 1], mig-enabled: false}\n"
        "    - {devices: [1], mig-enabled: true, mig-devices: {7g.80gb: 1}}\n"
    )
    with pytest.raises(InvalidInput, match="GPU index 1 in two entries"):
        read_config(text, "a", "H100-80GB")


def test_a_pool_layout_is_refused_where_the_config_has_none_to_give() -> None:
    with pytest.raises(InvalidInput, match="no instances"):
        import_mig_parted(MIG_PARTED_DEFAULTS, "all-enabled", "H100-80GB")
    with pytest.raises(
        InvalidInput, match=r"different layouts by index \(GPUs 0,1: mixed:2x3g.40gb; GPUs 2,3"
    ):
        import_mig_parted(MIG_PARTED_DEFAULTS, "per-index", "H100-80GB")
    with pytest.raises(NotFound):
        import_mig_parted(MIG_PARTED_DEFAULTS, "nope", "H100-80GB")


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("not: [valid", id="a file that is not YAML"),
        pytest.param("- a list", id="a list instead of a mapping"),
        pytest.param(
            "version: v2\nmig-configs: {a: [{devices: all, mig-enabled: false}]}",
            id="a version mig-parted does not write",
        ),
        pytest.param("version: v1\nmig-configs: {}", id="no configs at all"),
        pytest.param(
            "version: v1\nextra: 1\nmig-configs: {a: [{devices: all, mig-enabled: false}]}",
            id="an unknown top-level key",
        ),
        pytest.param(
            "version: v1\nmig-configs: {a: [{devices: all, mig-enabled: false, colour: red}]}",
            id="an unknown key in an entry",
        ),
        pytest.param(
            "version: v1\nmig-configs: {a: [{devices: some, mig-enabled: false}]}",
            id="devices that are neither all nor indexes",
        ),
        pytest.param(
            "version: v1\nmig-configs: {a: [{devices: all, mig-enabled: maybe}]}",
            id="mig-enabled that is not a boolean",
        ),
        pytest.param(
            "version: v1\nmig-configs: {a: [{devices: all, mig-enabled: false, mig-devices: {1g.10gb: 1}}]}",
            id="instances while MIG is off",
        ),
        pytest.param(
            "version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true, mig-devices: {1g.10gb: -1}}]}",
            id="a negative instance count",
        ),
        pytest.param("version: v1\nmig-configs: {a: []}", id="a config with no entries"),
    ],
)
def test_import_refuses_malformed_files(text: str) -> None:
    with pytest.raises(InvalidInput):
        import_mig_parted(text, "a", "H100-80GB")
