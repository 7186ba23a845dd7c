"""CDI spec files: how `bcd` hands a booked atom to exactly one container.

Each allocation gets one transient spec file under the CDI root (`/var/run/cdi` in production), with
one device named after the allocation, so a container runtime asked for
`better-compute.io/gpu=<allocation>` gives the container that allocation's devices and nothing else.
The device's edits are all a runtime needs, with no NVIDIA hook of its own: the device nodes of its
GPUs (and, for a MIG instance, of its GPU and compute instance capabilities), the driver's control
and UVM nodes, the driver's libraries and binaries, and the environment
(`bcd.container_edits` says what goes in, and why).

A spec names the node that wrote it (`node_of`): the variable `BETTER_COMPUTE_NODE` in the spec's
own `containerEdits`, so a container also learns its node. Where several nodes share one CDI
directory (the simulated nodes of `serve --fleet` under podman, several `bcd` on one test host), an
endpoint copy keeps its allocation id (`copy:<component>:<index>`) when it moves between nodes, and
the node it left must not remove or overwrite the spec the node it joined wrote: a node writes and
removes only a spec of its own or one that names no node (`SpecOfAnotherNode` otherwise), checked and
done under a lock on the directory. Not a CDI annotation: annotations need `cdiVersion` 0.6.0, which
Debian 12's podman refuses (its devices become unresolvable); an environment variable is 0.3.0's.

Files are written whole or not at all (a temporary file renamed over the target), since a runtime
may read the directory at any moment, and removed when the allocation goes. Each declares the lowest
`cdiVersion` its fields need (`minimum_version`, the rules of CDI's `specs-go/version.go`), so a
runtime with an older CDI library (Debian 12's podman reads up to 0.5.0) still loads it.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from better_compute.wire.cdi import CLASS, KIND, VENDOR, spec_file_name

__all__ = ["CLASS", "KIND", "VENDOR"]

VERSIONS = ("0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")
"""The CDI spec versions a file may declare that this module writes, oldest first (0.1.0 and 0.2.0
predate what runtimes still load; 0.3.0 is CDI's earliest supported)."""


_DEVICE_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?$")
"""A CDI device name: alphanumeric first and last, `_`, `-`, `.` and `:` inside."""


class CdiError(ValueError):
    """An allocation that cannot be written as a CDI device (its id is not a valid device name)."""


NODE_ENV = "BETTER_COMPUTE_NODE"
"""The variable of a spec's own `containerEdits` that names the node that wrote it."""

LOCK_NAME = f".{VENDOR}-{CLASS}.lock"
"""The lock file in the CDI directory under which a node checks whose a spec is and writes or removes
it (a runtime reads only `*.json` and `*.yaml` files)."""


class SpecOfAnotherNode(Exception):
    """The allocation's spec on disk is another node's (a shared CDI directory): left as it is."""

    def __init__(self, allocation_id: str, node: str) -> None:
        super().__init__(f"the CDI spec of {allocation_id} is node {node}'s")
        self.allocation_id = allocation_id
        self.node = node


def valid_device_name(allocation_id: str) -> bool:
    """Whether an allocation id can name a CDI device (at most 128 characters)."""
    return bool(_DEVICE_NAME.match(allocation_id)) and len(allocation_id) <= 128


def device_name(allocation_id: str) -> str:
    """The CDI device of an allocation: its id, which must be a valid CDI device name."""
    if not valid_device_name(allocation_id):
        raise CdiError(f"allocation id {allocation_id!r} is not a valid CDI device name")
    return allocation_id


def qualified_name(allocation_id: str) -> str:
    """What a container asks its runtime for: `better-compute.io/gpu=<allocation>`."""
    return f"{KIND}={device_name(allocation_id)}"


def _all_edits(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    edits = [d.get("containerEdits") or {} for d in spec.get("devices", [])]
    return [*edits, spec.get("containerEdits") or {}]


_ASCII_DIGITS = tuple("0123456789")
"""What CDI means by a digit where a device name starts with one: an ASCII digit (it compares the
name's first byte), not whatever Unicode calls a digit."""


def minimum_version(spec: Mapping[str, Any]) -> str:
    """The lowest `cdiVersion` that allows every field `spec` uses, by the rules of CDI's
    `specs-go/version.go` (each version's test looks at the spec-wide and every device's edits):
    network devices, or Intel RDT with `schemata` or `enableMonitoring`, need 1.1.0; any Intel RDT or
    additional GIDs 0.7.0; annotations (spec-wide or a device's) or a `.` in the kind's class (after
    its `/`) 0.6.0; a device node's `hostPath` or a device name whose first character is an ASCII
    digit 0.5.0; a mount's `type` 0.4.0; anything else 0.3.0, CDI's earliest supported version. 0.8.0
    and 1.0.0 added no field, so no spec needs them."""
    edits = _all_edits(spec)
    rdts = [e["intelRdt"] for e in edits if e.get("intelRdt") is not None]
    if any(e.get("netDevices") for e in edits) or any(
        r.get("schemata") is not None or r.get("enableMonitoring") for r in rdts
    ):
        return "1.1.0"
    if rdts or any(e.get("additionalGids") for e in edits):
        return "0.7.0"
    devices = spec.get("devices", [])
    if (
        spec.get("annotations")
        or any(d.get("annotations") for d in devices)
        or "." in str(spec.get("kind", "")).partition("/")[2]
    ):
        return "0.6.0"
    if any(str(d.get("name", ""))[:1] in _ASCII_DIGITS for d in devices) or any(
        n.get("hostPath") for e in edits for n in e.get("deviceNodes") or []
    ):
        return "0.5.0"
    if any(m.get("type") for e in edits for m in e.get("mounts") or []):
        return "0.4.0"
    return "0.3.0"


def spec_for(allocation_id: str, edits: Mapping[str, Any], node: str | None = None) -> dict[str, Any]:
    """The CDI spec of one allocation: one device, named after it, with `edits` (a CDI
    `containerEdits`), at the lowest `cdiVersion` they need; written by `node` (`node_of`) when given."""
    spec: dict[str, Any] = {
        "kind": KIND,
        "devices": [{"name": device_name(allocation_id), "containerEdits": dict(edits)}],
    }
    if node is not None:
        spec["containerEdits"] = {"env": [f"{NODE_ENV}={node}"]}
    return {"cdiVersion": minimum_version(spec), **spec}


def node_of(spec: Mapping[str, Any]) -> str | None:
    """The node that wrote `spec` (`spec_for`); None for one that names none (an older `bcd`'s)."""
    edits = spec.get("containerEdits")
    env = edits.get("env") if isinstance(edits, Mapping) else None
    for entry in env if isinstance(env, list) else []:
        if isinstance(entry, str) and entry.startswith(f"{NODE_ENV}="):
            return entry.partition("=")[2]
    return None


def read_spec(root: Path, allocation_id: str) -> dict[str, Any] | None:
    """The allocation's spec as written, or None when there is none (or it is not JSON: written again)."""
    try:
        found = json.loads(spec_path(root, allocation_id).read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def spec_path(root: Path, allocation_id: str) -> Path:
    """The transient spec file of an allocation: `<vendor>-<class>_<allocation>.json`, as CDI's own
    naming helpers name per-claim files."""
    return root / spec_file_name(device_name(allocation_id))


@contextmanager
def _locked(root: Path) -> Iterator[None]:
    """Hold the CDI directory's lock: another node's check-then-write cannot come in between."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / LOCK_NAME, "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _check_own(root: Path, allocation_id: str, node: str) -> None:
    found = read_spec(root, allocation_id)
    owner = node_of(found) if found is not None else None
    if owner is not None and owner != node:
        raise SpecOfAnotherNode(allocation_id, owner)


def write_spec(root: Path, allocation_id: str, spec: Mapping[str, Any], node: str | None = None) -> Path:
    """Write the allocation's spec atomically (a runtime never reads half a file); returns its path.
    Given `node`, only over a spec of that node's or one naming none (else `SpecOfAnotherNode`)."""
    if node is None:
        return _write(root, allocation_id, spec)
    with _locked(root):
        _check_own(root, allocation_id, node)
        return _write(root, allocation_id, spec)


def _write(root: Path, allocation_id: str, spec: Mapping[str, Any]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    target = spec_path(root, allocation_id)
    partial = target.with_name(f".{target.name}.partial")
    partial.write_text(json.dumps(spec, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.chmod(partial, 0o644)
    os.replace(partial, target)
    return target


def remove_spec(root: Path, allocation_id: str, node: str | None = None) -> bool:
    """Remove the allocation's spec; False when there was none (removing twice is harmless). Given
    `node`, only a spec of that node's or one naming none (else `SpecOfAnotherNode`)."""
    if node is None:
        return _remove(root, allocation_id)
    with _locked(root):
        _check_own(root, allocation_id, node)
        return _remove(root, allocation_id)


def _remove(root: Path, allocation_id: str) -> bool:
    try:
        spec_path(root, allocation_id).unlink()
    except FileNotFoundError:
        return False
    return True


def env_file_text(env: Mapping[str, str]) -> str:
    """An env file (`KEY=value` lines, sorted) for tools that take one instead of CDI."""
    for key, value in env.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) or "\n" in value:
            raise CdiError(f"{key!r} cannot be written to an env file")
    return "".join(f"{k}={v}\n" for k, v in sorted(env.items()))
