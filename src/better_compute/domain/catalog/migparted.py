"""NVIDIA mig-parted configuration files, to and from layouts.

Operators already keep mig-parted files (`version: v1`, `mig-configs`), so a pool's layout can leave
as one and come back from one. Export writes only layouts the validator accepts; import refuses
anything the validator refuses, so a file can never smuggle in a layout the control plane would not
apply. mig-parted matches profiles by counts only; placements stay this system's business.

A config may say more than a pool's layout can: NVIDIA's own files hold `all-enabled` (MIG on, no
instances: something else makes them) and per-index configs (`devices: [0, 1]` one way, `[2, 3]`
another). `read_config` reads every such config as the GPUs it names and what each gets
(`DeviceLayout`); `import_mig_parted` is the narrower question a pool asks, one layout per model,
and says which of those answers it cannot take.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import yaml

from better_compute.domain.catalog import GpuModel, get_model
from better_compute.domain.catalog.layouts import Layout, format_layout, parse_layout, validate
from better_compute.domain.kernel.errors import InvalidInput, NotFound

__all__ = [
    "DeviceLayout",
    "NamedLayout",
    "config_names",
    "default_config_name",
    "export_layout",
    "export_mig_parted",
    "for_index",
    "import_mig_parted",
    "read_config",
]

_TOP_KEYS = {"version", "mig-configs"}
_ENTRY_KEYS = {"devices", "device-filter", "mig-enabled", "mig-devices"}


@dataclass(frozen=True)
class NamedLayout:
    """One config to export: several entries with the same name become one multi-model config."""

    name: str
    layout: Layout | str
    model: GpuModel | str
    devices: Literal["all"] | tuple[int, ...] = "all"


@dataclass(frozen=True)
class DeviceLayout:
    """What one entry of a config gives the GPUs it names: `devices` (`all`, or GPU indexes) and
    their `layout`, None where MIG is enabled with no instances (`all-enabled`)."""

    devices: Literal["all"] | tuple[int, ...]
    layout: Layout | None

    @property
    def mig_enabled(self) -> bool:
        return self.layout is None or self.layout.mig_enabled


def default_config_name(layout: Layout | str) -> str:
    """mig-parted's own naming: `all-<profile>` with `+` turned into `.`; a mixed layout is
    `custom-` and its counts joined by `-` (`custom-3g.40gb-2x2g.20gb`), so that two mixed layouts
    never share a name (mig-parted's one `custom-config` would merge them into one config)."""
    parsed = parse_layout(layout) if isinstance(layout, str) else layout
    if parsed.kind == "mixed":
        parts = (name if count == 1 else f"{count}x{name}" for name, count in parsed.counts)
        return "custom-" + "-".join(part.replace("+", ".") for part in parts)
    return format_layout(parsed).replace("+", ".")


def _filter_for(model: GpuModel) -> list[str]:
    if not model.pci_device_ids:
        raise InvalidInput(
            f"{model.id} has no known PCI device id, so it cannot share a config with other models",
            {"model": model.id},
        )
    return [f"0x{int(pci, 16):04X}10DE" for pci in model.pci_device_ids]


def _entry(item: NamedLayout, with_filter: bool) -> dict[str, Any]:
    model = get_model(item.model)
    placement = validate(item.layout, model)
    entry: dict[str, Any] = {"devices": "all" if item.devices == "all" else list(item.devices)}
    if with_filter:
        filters = _filter_for(model)
        entry["device-filter"] = filters[0] if len(filters) == 1 else filters
    entry["mig-enabled"] = placement.mig_enabled
    if placement.mig_enabled:
        entry["mig-devices"] = dict(placement.counts)
    return entry


def export_mig_parted(configs: Sequence[NamedLayout]) -> str:
    """A mig-parted `v1` file with one named config per distinct name.

    A name given for several models becomes one config whose entries carry a `device-filter`, so
    mig-parted applies each model's layout only to that model's GPUs.
    """
    if not configs:
        raise InvalidInput("nothing to export: give at least one layout", {})
    grouped: dict[str, list[NamedLayout]] = {}
    for item in configs:
        if not item.name.strip():
            raise InvalidInput("a mig-parted config needs a non-empty name", {})
        grouped.setdefault(item.name, []).append(item)
    out: dict[str, list[dict[str, Any]]] = {}
    for name, items in grouped.items():
        _refuse_overlaps(name, items)
        models = {get_model(i.model).id for i in items}
        out[name] = [_entry(i, with_filter=len(models) > 1) for i in items]
    return yaml.safe_dump(
        {"version": "v1", "mig-configs": out}, sort_keys=False, default_flow_style=False, allow_unicode=True
    )


def _refuse_overlaps(name: str, items: Sequence[NamedLayout]) -> None:
    """Two layouts under one name for the same GPUs of one model: mig-parted would apply one over
    the other, so each needs a name of its own (`default_config_name` gives mixed layouts distinct
    ones)."""
    taken: dict[str, frozenset[int] | None] = {}
    """GPU indexes given a layout so far, by model; None: all of them."""
    for item in items:
        model = get_model(item.model).id
        devices = None if item.devices == "all" else frozenset(item.devices)
        if model in taken:
            before = taken[model]
            if before is None or devices is None or before & devices:
                raise InvalidInput(
                    f"config {name!r} would give {model} GPUs two layouts; give each layout its own name",
                    {"config": name, "model": model},
                )
            devices = before | devices
        taken[model] = devices


def export_layout(layout: Layout | str, model: GpuModel | str, name: str | None = None) -> str:
    """One layout for one model as a mig-parted file (config name defaults to mig-parted's naming)."""
    parsed = parse_layout(layout) if isinstance(layout, str) else layout
    return export_mig_parted([NamedLayout(name or default_config_name(parsed), parsed, model)])


def _load(text: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidInput(f"the mig-parted file is not YAML: {exc}", {}) from exc
    if not isinstance(data, dict):
        raise InvalidInput("a mig-parted file is a mapping with version and mig-configs", {})
    unknown = set(map(str, data)) - _TOP_KEYS
    if unknown:
        raise InvalidInput(f"unknown top-level keys in the mig-parted file: {sorted(unknown)}", {})
    if data.get("version") != "v1":
        raise InvalidInput(f"mig-parted file version must be v1, not {data.get('version')!r}", {})
    configs = data.get("mig-configs")
    if not isinstance(configs, dict) or not configs:
        raise InvalidInput("a mig-parted file needs at least one entry under mig-configs", {})
    return configs


def config_names(text: str) -> tuple[str, ...]:
    return tuple(str(name) for name in _load(text))


def _filter_matches(device_filter: Any, model: GpuModel) -> bool:
    filters = device_filter if isinstance(device_filter, list) else [device_filter]
    known = {int(pci, 16) for pci in model.pci_device_ids}
    for raw in filters:
        text = str(raw).strip().lower().split(":")[0]
        try:
            value = int(text, 16)
        except ValueError as exc:
            raise InvalidInput(f"device-filter {raw!r} is not a PCI id such as 0x233010DE", {}) from exc
        device = value >> 16 if len(text.removeprefix("0x")) > 4 else value
        if device in known:
            return True
    return False


def _entry_layout(name: str, index: int, entry: Any) -> DeviceLayout:
    where = f"mig-configs.{name}[{index}]"
    if not isinstance(entry, dict):
        raise InvalidInput(f"{where} must be a mapping", {"config": name})
    unknown = set(map(str, entry)) - _ENTRY_KEYS
    if unknown:
        raise InvalidInput(f"{where} has unknown keys {sorted(unknown)}", {"config": name})
    devices = entry.get("devices")
    if devices != "all" and not (
        isinstance(devices, list)
        and devices
        and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in devices)
    ):
        raise InvalidInput(f"{where}.devices must be 'all' or a list of GPU indexes", {"config": name})
    indexes: Literal["all"] | tuple[int, ...] = "all" if devices == "all" else tuple(sorted(set(devices)))
    enabled = entry.get("mig-enabled")
    if not isinstance(enabled, bool):
        raise InvalidInput(f"{where}.mig-enabled must be true or false", {"config": name})
    devs = entry.get("mig-devices") or {}
    if not isinstance(devs, dict):
        raise InvalidInput(f"{where}.mig-devices must map profiles to counts", {"config": name})
    if not enabled:
        if devs:
            raise InvalidInput(f"{where} lists mig-devices with mig-enabled false", {"config": name})
        return DeviceLayout(indexes, Layout.disabled())
    counts: list[tuple[str, int]] = []
    for profile, count in devs.items():
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise InvalidInput(f"{where}.mig-devices.{profile} must be a count >= 0", {"config": name})
        if count:
            counts.append((str(profile), count))
    return DeviceLayout(indexes, Layout.mixed(counts) if counts else None)


def read_config(
    text: str, config: str, model: GpuModel | str, driver: str | None = None
) -> tuple[DeviceLayout, ...]:
    """What config ``config`` gives ``model``'s GPUs, entry by entry, each layout validated and in
    catalog profile names. Entries whose `device-filter` names other models are skipped; a GPU index
    named by two entries is refused, as mig-parted would apply one over the other."""
    gpu = get_model(model)
    configs = _load(text)
    entries = configs.get(config)
    if entries is None:
        raise NotFound(
            f"no config {config!r} in the mig-parted file (configs: {', '.join(map(str, configs))})",
            {"config": config},
        )
    if not isinstance(entries, list) or not entries:
        raise InvalidInput(f"mig-configs.{config} must be a non-empty list", {"config": config})
    found: list[DeviceLayout] = []
    for index, entry in enumerate(entries):
        read = _entry_layout(config, index, entry)
        if "device-filter" in entry and not _filter_matches(entry["device-filter"], gpu):
            continue
        layout = None if read.layout is None else validate(read.layout, gpu, driver).expanded
        found.append(DeviceLayout(read.devices, layout))
    if not found:
        raise InvalidInput(f"config {config!r} has no entry for {gpu.id}", {"config": config})
    seen: set[int] = set()
    for item in found:
        if item.devices == "all" and len(found) > 1:
            raise InvalidInput(
                f"config {config!r} names all of {gpu.id}'s GPUs in one entry and some again in another",
                {"config": config},
            )
        twice = seen & set(item.devices) if item.devices != "all" else set()
        if twice:
            raise InvalidInput(
                f"config {config!r} names GPU index {min(twice)} in two entries", {"config": config}
            )
        if item.devices != "all":
            seen.update(item.devices)
    return tuple(found)


def for_index(found: Sequence[DeviceLayout], index: int, config: str) -> DeviceLayout:
    """The entry of a config (`read_config`) that names GPU `index`: what that GPU gets, so a
    per-index config can give a pool the layout of one of its GPUs."""
    for item in found:
        if item.devices == "all" or index in item.devices:
            return DeviceLayout((index,), item.layout)
    raise InvalidInput(
        f"config {config!r} names no GPU index {index}",
        {"config": config, "index": index},
    )


def import_mig_parted(text: str, config: str, model: GpuModel | str, driver: str | None = None) -> Layout:
    """The one layout that config ``config`` gives ``model``'s GPUs, for a pool (`read_config` says
    what the config gives each GPU). Refused, saying why, when the entries give GPUs different
    layouts (a pool layout is one per model) or enable MIG with no instances (`all-enabled`: a
    pool's layout names the instances its atoms are)."""
    found = read_config(text, config, model, driver)
    layouts = {item.layout for item in found}
    if len(layouts) > 1:
        shown = "; ".join(_describe(item) for item in found)
        raise InvalidInput(
            f"config {config!r} gives {get_model(model).id} GPUs different layouts by index ({shown});"
            " a pool has one layout per model",
            {"config": config},
        )
    layout = found[0].layout
    if layout is None:
        raise InvalidInput(
            f"config {config!r} enables MIG with no instances; a pool's layout names its instances",
            {"config": config},
        )
    return layout


def _describe(item: DeviceLayout) -> str:
    """`GPUs 0,1: mixed:2x3g.40gb`, `all GPUs: MIG enabled, no instances`."""
    where = "all GPUs" if item.devices == "all" else "GPU" + ("s " if len(item.devices) > 1 else " ")
    if item.devices != "all":
        where += ",".join(map(str, item.devices))
    return f"{where}: {describe_layout(item.layout)}"


def describe_layout(layout: Layout | None) -> str:
    """A config entry's layout as the CLI prints it (None: MIG on with no instances)."""
    return "MIG enabled, no instances" if layout is None else format_layout(layout)
