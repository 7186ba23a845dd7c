"""NVML's return codes as bcd tells them apart, and what each means to an operator.

The codes are nvml.h's `nvmlReturn_t` (as NVIDIA's go-nvml carries the header; pynvml's
`NVML_ERROR_*` have the same values). `bcd.nvml` turns a refused query into a health note built from
these words, and a refused change into a `GpuError` that says the same.
"""

from __future__ import annotations

from enum import IntEnum


class NvmlReturn(IntEnum):
    """The `nvmlReturn_t` values bcd tells apart."""

    UNINITIALIZED = 1
    INVALID_ARGUMENT = 2
    NOT_SUPPORTED = 3
    NO_PERMISSION = 4
    NOT_FOUND = 6
    INSUFFICIENT_POWER = 8
    DRIVER_NOT_LOADED = 9
    TIMEOUT = 10
    IRQ_ISSUE = 11
    LIBRARY_NOT_FOUND = 12
    FUNCTION_NOT_FOUND = 13
    CORRUPTED_INFOROM = 14
    GPU_IS_LOST = 15
    RESET_REQUIRED = 16
    OPERATING_SYSTEM = 17
    LIB_RM_VERSION_MISMATCH = 18
    IN_USE = 19
    MEMORY = 20
    INSUFFICIENT_RESOURCES = 23
    UNKNOWN = 999


NODE_WIDE = frozenset(
    {
        NvmlReturn.UNINITIALIZED,
        NvmlReturn.DRIVER_NOT_LOADED,
        NvmlReturn.LIBRARY_NOT_FOUND,
        NvmlReturn.LIB_RM_VERSION_MISMATCH,
    }
)
"""Codes that say NVML itself is unusable: no GPU can be read, so the whole reading fails."""

PHRASES: dict[int, str] = {
    NvmlReturn.NOT_SUPPORTED: "not supported on this GPU or driver",
    NvmlReturn.NO_PERMISSION: "permission denied",
    NvmlReturn.NOT_FOUND: "not found",
    NvmlReturn.INSUFFICIENT_POWER: "its external power cables are not properly attached",
    NvmlReturn.TIMEOUT: "NVML timed out",
    NvmlReturn.IRQ_ISSUE: "the NVIDIA kernel module detected an interrupt issue with it",
    NvmlReturn.FUNCTION_NOT_FOUND: "this driver's NVML lacks the call; a newer driver is needed",
    NvmlReturn.CORRUPTED_INFOROM: "its infoROM is corrupted",
    NvmlReturn.GPU_IS_LOST: "the GPU is lost (it has fallen off the bus or is otherwise inaccessible)",
    NvmlReturn.RESET_REQUIRED: "the GPU needs a reset before it can be used again",
    NvmlReturn.OPERATING_SYSTEM: "the operating system or a cgroup blocked access to the GPU",
    NvmlReturn.IN_USE: "the GPU is in use",
    NvmlReturn.MEMORY: "NVML ran out of memory",
    NvmlReturn.UNKNOWN: "the driver reported an internal error",
}
"""NVML's return codes in an operator's words."""

GPU_LOST_NOTE = (
    "GPU is lost: NVML says it has fallen off the bus or is otherwise inaccessible, and its work is gone;"
    " reboot the node, and have the GPU serviced if it stays lost (dmesg shows Xid 79 for a GPU off the bus)"
)
"""The health note of a GPU NVML answers with GPU_IS_LOST."""

RESET_REQUIRED_NOTE = (
    "GPU needs a reset: NVML says it cannot be used until it is reset; drain it, then run"
    " `nvidia-smi --gpu-reset -i <uuid>` or reboot the node"
)
"""The health note of a GPU NVML answers with RESET_REQUIRED."""

UNLISTED_NOTE = (
    "MIG state not read whole: NVML lists a compute instance it names no MIG device for (`bcd inventory`"
    " shows which); nothing is booked or changed on this GPU until NVML names it"
)
"""The health note of a GPU with a compute instance left out for want of a MIG device (`Gpu.unlisted`)."""

ROOT_HINT = "run bcd as root"
"""What to do when NVML refuses a query of a GPU's own for want of permission."""

MIG_READ_HINT = (
    "reading MIG instances needs root, or the mig/monitor capability"
    " (/proc/driver/nvidia/capabilities/mig/monitor)"
)
"""What to do when NVML refuses a MIG query for want of permission (the MIG User Guide's device
nodes and capabilities: mig/monitor reads instances, mig/config changes them)."""

GPU_ACCESS_HINT = "run bcd as root, and check that no cgroup or device permission withholds /dev/nvidia*"
"""What to do when NVML counts a GPU but refuses its handle (nvml.h: `nvmlDeviceGetCount_v2` counts
"devices that NVML has no permission to talk to")."""


def phrase(code: int | None, exc: Exception | None = None) -> str:
    """An NVML return code in words; one this module does not know keeps NVML's own text."""
    if code in PHRASES:
        return PHRASES[code]
    return f"NVML error {code}: {exc}" if exc is not None else f"NVML error {code}"
