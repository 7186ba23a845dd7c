"""Device classes: named kinds of atoms, defined by the admin (docs/concepts.md#device-classes; Kubernetes
DRA's DeviceClass).

A device class is an atom class (`gpu`, `gpu.mig`, `gpu.slot`) and a selector over atom attributes,
in the very syntax device requests take (`domain.kernel.selectors`): `h100-80gb-sxm` is `gpu` with
`gpuModel In [H100-80GB]`, `h100-3g.40gb` is `gpu.mig` with `migProfile In [3g.40gb]`. Workloads,
quotas and placement name a class instead of spelling the selector again, and count a cluster's
atoms of it with `belongs_to`, so "an atom of this class" means one thing everywhere.

A class's id is its name, and a class is never changed once created: quotas and workloads that
name it must keep meaning the atoms they meant.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from better_compute.domain.fleet.atoms import Atom, selects
from better_compute.domain.kernel.atom_classes import AtomClass, check_atom_class
from better_compute.domain.kernel.errors import AlreadyExists, NotFound
from better_compute.domain.kernel.selectors import Selector, parse_selector
from better_compute.domain.tenancy.tenancy import check_class_name


@dataclass(frozen=True, slots=True)
class DeviceClassSpec:
    """What defines a device class: its name, atom class and selector (a request or a fleet file)."""

    name: str
    cls: AtomClass
    selector: Selector

    def created(self, at: datetime) -> DeviceClass:
        return DeviceClass(self.name, self.cls, self.selector, at)


@dataclass(frozen=True, slots=True)
class DeviceClass:
    name: str
    cls: AtomClass
    selector: Selector
    created_at: datetime

    @property
    def id(self) -> str:
        return self.name

    @property
    def spec(self) -> DeviceClassSpec:
        return DeviceClassSpec(self.name, self.cls, self.selector)


def parse_spec(name: object, cls: object, selector: object, where: str = "") -> DeviceClassSpec:
    """A device class's definition from what a request or a fleet file gives: a valid name, a known
    atom class and a selector `parse_selector` accepts (with its limits). Each refusal names its
    field, under `where` (`deviceClasses[2]`) when given."""
    prefix = f"{where}." if where else ""
    return DeviceClassSpec(
        name=check_class_name(name, f"{prefix}name"),
        cls=check_atom_class(cls, f"{prefix}class"),
        selector=parse_selector(selector, f"{prefix}selector"),
    )


def belongs_to(atom: Atom, device_class: DeviceClass) -> bool:
    """Whether `atom` is a device of `device_class`: of its atom class, and matching its selector."""
    return atom.cls == device_class.cls and selects(device_class.selector, atom)


def count_of(atoms: Iterable[Atom], device_class: DeviceClass) -> int:
    """How many of `atoms` belong to `device_class`."""
    return sum(1 for atom in atoms if belongs_to(atom, device_class))


def device_class_not_found(name: str) -> NotFound:
    return NotFound(f"device class {name} not found", {"deviceClass": name})


def device_class_taken(name: str) -> AlreadyExists:
    """CONFLICT for a name already taken: a class is never redefined, so the caller picks another."""
    return AlreadyExists(
        f"device class {name} already exists; a device class is never changed, so choose another name",
        {"deviceClass": name},
    )
