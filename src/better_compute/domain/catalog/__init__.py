"""The GPU catalog: every model a pool can hold and, for MIG-capable ones, their profiles and placements.

The tables are data (``models.toml``, ``placements.toml`` beside this file) because they come from
NVIDIA's captures and change when a driver or board does; code only types and cross-checks them.
They are TOML because the standard library reads it (``tomllib``) and it keeps the comments that say
where each figure comes from: the domain imports nothing outside the standard library. The loader
refuses an inconsistent table at import time rather than letting a wrong placement reach a node.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from better_compute.domain.kernel.errors import InvalidInput, NotFound, UnknownProfile

__all__ = [
    "DriverRule",
    "GpuModel",
    "MigProfile",
    "all_models",
    "driver_at_least",
    "find_model",
    "get_model",
    "mig_models",
    "model_for_pci_device_id",
    "model_for_product",
    "normalize_profile_name",
    "parse_driver_version",
]

_PROFILE_NAME = re.compile(r"^(?P<g>[1-9][0-9]*)g\.(?P<gb>[1-9][0-9]*)gb(?P<attr>[+-][a-z]+(?:\.[a-z]+)*)?$")
_DRIVER = re.compile(r"^[rR]?(?P<v>[0-9]+(?:\.[0-9]+)*)$")


def normalize_profile_name(name: str) -> str:
    """The comparable spelling of a profile name: users type `MIG-3g.40gb` as often as `3g.40gb`."""
    text = name.strip().lower()
    return text.removeprefix("mig-")


def profile_name_key(name: str) -> tuple[int, int, str]:
    """Order profile names largest first without a model: compute, then memory, then attribute."""
    match = _PROFILE_NAME.match(normalize_profile_name(name))
    if match is None:
        return (0, 0, name)
    return (-int(match["g"]), -int(match["gb"]), match["attr"] or "")


def is_profile_name(name: str) -> bool:
    """Whether ``name`` has the shape `<G>g.<GB>gb[+attr|-attr]` NVIDIA gives GPU-instance profiles."""
    return _PROFILE_NAME.match(normalize_profile_name(name)) is not None


def parse_driver_version(text: str) -> tuple[int, ...]:
    """`R525`, `525` and `525.85.12` all compare by branch first, so drivers are tuples of integers."""
    match = _DRIVER.match(text.strip())
    if match is None:
        raise InvalidInput(
            f"driver version {text!r} is not a version such as 525.85.12 or R525",
            {"driver": text},
        )
    return tuple(int(part) for part in match["v"].split("."))


def driver_at_least(driver: str, minimum: str) -> bool:
    """Whether ``driver`` is ``minimum`` or newer; `R525` as a minimum admits every 525.x release."""
    return parse_driver_version(driver) >= parse_driver_version(minimum)


@dataclass(frozen=True)
class MigProfile:
    """One GPU-instance profile of one model, with where it may start on the placement axis."""

    name: str
    profile_id: int
    """NVML GPU-instance profile id (what `nvidia-smi mig -lgip` prints and creation calls take)."""
    nvml_enum: str
    """The NVML_GPU_INSTANCE_PROFILE_* constant that yields ``profile_id`` on this model."""
    compute_slices: int
    memory_slices: int
    memory_gib: float
    max_instances: int
    starts: tuple[int, ...]
    size: int
    """Units the instance occupies on the model's placement axis (not always its memory slices)."""
    multiprocessors: int | None = None
    min_driver: str | None = None
    aliases: tuple[str, ...] = ()
    engines: tuple[tuple[str, int], ...] = ()

    @property
    def attribute(self) -> str:
        """`+me`, `+me.all`, `-me`, `+gfx`, or empty for the plain profile."""
        match = _PROFILE_NAME.match(self.name)
        return (match["attr"] or "") if match else ""

    def engine_count(self, engine: str) -> int:
        return dict(self.engines).get(engine, 0)


@dataclass(frozen=True)
class DriverRule:
    """Profiles that each exist on older drivers but only fit together from ``min_driver`` on."""

    together: tuple[str, ...]
    min_driver: str


@dataclass(frozen=True)
class GpuModel:
    """A GPU model: whole-GPU facts for every model, MIG facts for the MIG-capable ones."""

    id: str
    name: str
    memory_gib: float
    """The data sheet's memory (what the model is sold as)."""
    mig_capable: bool
    usable_gib: float = 0.0
    """The memory the board exposes to a process (nvidia-smi's `memory.total`, or a floor where no
    reading was found: models.toml names the source for each model); 0: not given, the data sheet's."""
    products: tuple[str, ...] = ()
    pci_device_ids: tuple[str, ...] = ()
    compute_slices: int = 0
    memory_slices: int = 0
    placement_units: int = 0
    """Length of the axis placements are drawn on: 8 on A100/H100/H200/B200, 4 on A30, 12 on RTX PRO 6000."""
    placement_family: str | None = None
    placements_confirmed: bool = False
    """True only where a real `nvidia-smi mig -lgipp` of this model was read (placements.toml
    `capturedOn`); a model that shares a captured model's table is inferred, and says so."""
    min_driver: str | None = None
    driver_rules: tuple[DriverRule, ...] = ()
    engine_totals: tuple[tuple[str, int], ...] = ()
    profiles: tuple[MigProfile, ...] = ()

    def find_profile(self, name: str) -> MigProfile | None:
        wanted = normalize_profile_name(name)
        for profile in self.profiles:
            if profile.name == wanted or wanted in profile.aliases:
                return profile
        return None

    def profile(self, name: str) -> MigProfile:
        """The profile called ``name`` (or one of its aliases); refuses a name this model lacks."""
        found = self.find_profile(name)
        if found is not None:
            return found
        wanted = normalize_profile_name(name)
        if not self.mig_capable:
            message = f"{self.id} does not support MIG, so it has no profile {wanted}"
        else:
            known = ", ".join(p.name for p in self.profiles)
            message = f"profile {wanted} does not exist on {self.id} (profiles: {known})"
        raise UnknownProfile(
            message,
            {"profile": wanted, "reason": "unknown_profile", "model": self.id},
        )

    def profile_by_id(self, profile_id: int) -> MigProfile | None:
        for profile in self.profiles:
            if profile.profile_id == profile_id:
                return profile
        return None

    def engine_total(self, engine: str) -> int:
        return dict(self.engine_totals).get(engine, 0)


def _engines(raw: Any) -> tuple[tuple[str, int], ...]:
    if not raw:
        return ()
    if not isinstance(raw, Mapping):
        raise ValueError(f"engines must be a mapping, not {raw!r}")
    return tuple(sorted((str(k), int(v)) for k, v in raw.items()))


def _load_table(name: str) -> dict[str, Any]:
    """One catalog file beside this module, parsed; a file of another format version is refused."""
    text = resources.files(__name__).joinpath(name).read_text(encoding="utf-8")
    data = tomllib.loads(text)
    if data.get("version") != 1:
        raise ValueError(f"catalog file {name} must say version = 1")
    return data


def _placement_families() -> dict[str, dict[str, Any]]:
    """Placement families by name, each profile table keyed by NVML profile id as an integer.

    TOML keys are always strings, while models name their profiles by the integer id NVML uses.
    """
    families: dict[str, dict[str, Any]] = {}
    for name, family in _load_table("placements.toml")["families"].items():
        table: dict[int, Any] = {}
        for key, row in family["profiles"].items():
            if not key.isdigit():
                raise ValueError(f"placement family {name}: profile key {key!r} is not an NVML profile id")
            table[int(key)] = row
        families[name] = {**family, "profiles": table}
    return families


def _build_profile(model_id: str, raw: Mapping[str, Any], family: Mapping[str, Any]) -> MigProfile:
    profile_id = int(raw["id"])
    table = family["profiles"].get(profile_id)
    if table is None:
        raise ValueError(f"{model_id} {raw['name']}: profile id {profile_id} is not in its placement family")
    name = str(raw["name"])
    if not _PROFILE_NAME.match(name):
        raise ValueError(f"{model_id}: {name!r} is not a profile name")
    return MigProfile(
        name=name,
        profile_id=profile_id,
        nvml_enum=str(table["enum"]),
        compute_slices=int(raw["compute"]),
        memory_slices=int(raw["memory"]),
        memory_gib=float(raw["gib"]),
        max_instances=int(raw["max"]),
        starts=tuple(int(s) for s in table["starts"]),
        size=int(table["size"]),
        multiprocessors=int(raw["sm"]) if raw.get("sm") is not None else None,
        min_driver=str(raw["minDriver"]) if raw.get("minDriver") is not None else None,
        aliases=tuple(str(a) for a in raw.get("aliases", ())),
        engines=_engines(raw.get("engines")),
    )


def _check_model(model: GpuModel) -> None:
    """Refuse a table that contradicts itself; a typo here would become a wrong partition on a node."""
    names = [p.name for p in model.profiles] + [a for p in model.profiles for a in p.aliases]
    if len(names) != len(set(names)):
        raise ValueError(f"{model.id}: duplicate profile name or alias")
    ids = [p.profile_id for p in model.profiles]
    if len(ids) != len(set(ids)):
        raise ValueError(f"{model.id}: duplicate profile id")
    for p in model.profiles:
        if p.compute_slices > model.compute_slices or p.memory_slices > model.memory_slices:
            raise ValueError(f"{model.id} {p.name}: larger than the GPU")
        if p.memory_slices * model.placement_units != p.size * model.memory_slices:
            raise ValueError(f"{model.id} {p.name}: placement size disagrees with memory slices")
        if any(s < 0 or s + p.size > model.placement_units for s in p.starts):
            raise ValueError(f"{model.id} {p.name}: a start runs past the placement axis")
        if not 1 <= p.max_instances <= len(p.starts):
            raise ValueError(f"{model.id} {p.name}: max instances must be 1..number of starts")
        for engine, count in p.engines:
            if count > model.engine_total(engine):
                raise ValueError(f"{model.id} {p.name}: takes more {engine} than the GPU has")
    for rule in model.driver_rules:
        for name in rule.together:
            if model.find_profile(name) is None:
                raise ValueError(f"{model.id}: driver rule names unknown profile {name}")


def _usable(model_id: str, raw: Mapping[str, Any]) -> float:
    """`usableGiB`: given for every model, above 0 and at most the data sheet's `memoryGiB`."""
    usable = float(raw["usableGiB"])
    if not 0 < usable <= float(raw["memoryGiB"]):
        raise ValueError(f"{model_id}: usableGiB must be above 0 and at most memoryGiB")
    return usable


def _build_model(raw: Mapping[str, Any], families: Mapping[str, Any]) -> GpuModel:
    model_id = str(raw["id"])
    common: dict[str, Any] = {
        "id": model_id,
        "name": str(raw["name"]),
        "memory_gib": float(raw["memoryGiB"]),
        "usable_gib": _usable(model_id, raw),
        "products": tuple(str(p) for p in raw.get("products") or ()),
        "pci_device_ids": tuple(str(p).upper().replace("0X", "0x") for p in raw.get("pciDeviceIds") or ()),
    }
    mig = raw.get("mig")
    if not mig:
        return GpuModel(mig_capable=False, **common)
    family_name = str(mig["placements"])
    family = families.get(family_name)
    if family is None:
        raise ValueError(f"{model_id}: unknown placement family {family_name}")
    profiles = tuple(_build_profile(model_id, p, family) for p in mig["profiles"])
    rules = tuple(
        DriverRule(together=tuple(str(n) for n in r["together"]), min_driver=str(r["minDriver"]))
        for r in mig.get("driverRules") or ()
    )
    model = GpuModel(
        mig_capable=True,
        compute_slices=int(mig["computeSlices"]),
        memory_slices=int(mig["memorySlices"]),
        placement_units=int(family["axis"]),
        placement_family=family_name,
        placements_confirmed=model_id in family.get("capturedOn", ()),
        min_driver=str(mig["minDriver"]) if mig.get("minDriver") is not None else None,
        driver_rules=rules,
        engine_totals=_engines(mig.get("engines")),
        profiles=profiles,
        **common,
    )
    _check_model(model)
    return model


@cache
def all_models() -> tuple[GpuModel, ...]:
    """Every catalog model, in catalog order (MIG-capable first, as the data file lists them)."""
    families = _placement_families()
    models = tuple(_build_model(raw, families) for raw in _load_table("models.toml")["models"])
    ids = [m.id.lower() for m in models]
    if len(ids) != len(set(ids)):
        raise ValueError("duplicate model id in the catalog")
    products = [_product_key(p) for m in models for p in m.products]
    if len(products) != len(set(products)):
        raise ValueError("one NVML product name maps to two catalog models")
    return models


def mig_models() -> tuple[GpuModel, ...]:
    return tuple(m for m in all_models() if m.mig_capable)


@cache
def _by_id() -> dict[str, GpuModel]:
    return {m.id.lower(): m for m in all_models()}


def find_model(model_id: str) -> GpuModel | None:
    return _by_id().get(model_id.strip().lower())


def get_model(model_id: str | GpuModel) -> GpuModel:
    """The model users call ``model_id`` (case-insensitive); an unknown id is NOT_FOUND."""
    if isinstance(model_id, GpuModel):
        return model_id
    found = find_model(model_id)
    if found is None:
        known = ", ".join(m.id for m in all_models())
        raise NotFound(
            f"unknown GPU model {model_id!r} (known models: {known})",
            {"model": model_id, "known": [m.id for m in all_models()]},
        )
    return found


def _product_key(name: str) -> str:
    text = " ".join(name.split()).lower()
    return text.removeprefix("nvidia ")


@cache
def _by_product() -> dict[str, GpuModel]:
    return {_product_key(p): m for m in all_models() for p in m.products}


def model_for_product(nvml_name: str) -> GpuModel | None:
    """The catalog model of an NVML product name, or None: an unknown board is reported, never guessed.

    Older drivers drop the `NVIDIA ` prefix (`A100-SXM4-40GB`) and spacing varies, so both are ignored.
    """
    return _by_product().get(_product_key(nvml_name))


def model_for_pci_device_id(device_id: str | int) -> GpuModel | None:
    """The model whose PCI device id (`0x2330`, `0x233010DE` or 0x2330) is ``device_id``, if known."""
    if isinstance(device_id, int):
        value = device_id >> 16 if device_id > 0xFFFF else device_id
    else:
        text = device_id.strip().lower().split(":")[0]
        try:
            raw = int(text, 16)
        except ValueError:
            return None
        value = raw >> 16 if len(text.removeprefix("0x")) > 4 else raw
    for model in all_models():
        if any(int(pci, 16) == value for pci in model.pci_device_ids):
            return model
    return None
