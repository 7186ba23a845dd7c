"""CDI spec files: how `bcd` hands a booked atom to exactly one container.

Each allocation gets one transient spec file under the CDI root (`/var/run/cdi` in production), with
one device named after the allocation, so a container runtime asked for
`better-compute.io/gpu=<allocation>` gets that allocation's GPUs or MIG instances and nothing else.
The device's edits set `NVIDIA_VISIBLE_DEVICES` to the GPU or `MIG-...` uuids (the NVIDIA container
runtime turns that into device nodes) and, for an MPS slot, `CUDA_MPS_PIPE_DIRECTORY`.

Files are written whole or not at all (a temporary file renamed over the target), since a runtime
may read the directory at any moment, and removed when the allocation goes.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

CDI_VERSION = "0.6.0"
"""The spec version written: 0.6.0 is the first that allows a `.` in the kind's vendor and
annotations; runtimes since 2023 read it."""

VENDOR = "better-compute.io"
CLASS = "gpu"
KIND = f"{VENDOR}/{CLASS}"

_DEVICE_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?$")
"""A CDI device name: alphanumeric first and last, `_`, `-`, `.` and `:` inside."""


class CdiError(ValueError):
    """An allocation that cannot be written as a CDI device (its id is not a valid device name)."""


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


def spec_for(
    allocation_id: str,
    device_uuids: Sequence[str],
    env: Mapping[str, str] | None = None,
    *,
    mps_pipe_directory: str | None = None,
) -> dict[str, Any]:
    """The CDI spec of one allocation: one device, whose edits make exactly `device_uuids` visible."""
    if not device_uuids:
        raise CdiError(f"allocation {allocation_id} has no device to hand over")
    variables = {"NVIDIA_VISIBLE_DEVICES": ",".join(device_uuids), **dict(env or {})}
    if mps_pipe_directory is not None:
        variables["CUDA_MPS_PIPE_DIRECTORY"] = mps_pipe_directory
    return {
        "cdiVersion": CDI_VERSION,
        "kind": KIND,
        "devices": [
            {
                "name": device_name(allocation_id),
                "containerEdits": {"env": [f"{k}={v}" for k, v in sorted(variables.items())]},
            }
        ],
    }


def spec_path(root: Path, allocation_id: str) -> Path:
    """The transient spec file of an allocation: `<vendor>-<class>_<allocation>.json`, as CDI's own
    naming helpers name per-claim files."""
    return root / f"{VENDOR}-{CLASS}_{device_name(allocation_id)}.json"


def write_spec(root: Path, allocation_id: str, spec: Mapping[str, Any]) -> Path:
    """Write the allocation's spec atomically (a runtime never reads half a file); returns its path."""
    root.mkdir(parents=True, exist_ok=True)
    target = spec_path(root, allocation_id)
    partial = target.with_name(f".{target.name}.partial")
    partial.write_text(json.dumps(spec, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.chmod(partial, 0o644)
    os.replace(partial, target)
    return target


def remove_spec(root: Path, allocation_id: str) -> bool:
    """Remove the allocation's spec; False when there was none (removing twice is harmless)."""
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
