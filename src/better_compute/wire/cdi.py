"""The CDI names a node writes and a user types: one place, so that `reservations show` prints the
device and file the node's daemon (`bcd/cdi.py`) writes, and the two can never disagree."""

from __future__ import annotations

VENDOR = "better-compute.io"
CLASS = "gpu"
KIND = f"{VENDOR}/{CLASS}"


def device(allocation_id: str) -> str:
    """The fully qualified CDI device of an allocation, as `--device` takes it:
    `better-compute.io/gpu=rsv-...`."""
    return f"{KIND}={allocation_id}"


def spec_file_name(allocation_id: str) -> str:
    """The allocation's transient spec file in the node's CDI directory,
    `<vendor>-<class>_<allocation>.json`, as CDI's own naming helpers name per-claim files."""
    return f"{VENDOR}-{CLASS}_{allocation_id}.json"
