"""mig-parted files: what export writes, what import accepts and what it refuses."""

from __future__ import annotations

import pytest
import yaml

from better_compute.domain.catalog.layouts import parse_layout
from better_compute.domain.catalog.migparted import (
    NamedLayout,
    config_names,
    default_config_name,
    export_layout,
    export_mig_parted,
    import_mig_parted,
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
    assert default_config_name("mixed:2x3g.40gb") == "custom-config"


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


def test_import_refuses_what_a_pool_cannot_express() -> None:
    with pytest.raises(InvalidInput, match="without instances"):
        import_mig_parted(MIG_PARTED_DEFAULTS, "all-enabled", "H100-80GB")
    with pytest.raises(InvalidInput, match="different layouts"):
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
