"""What a node daemon reads from and does to its GPUs, whichever backend answers.

Two backends implement `GpuBackend`: the real one over NVML (`bcd.nvml`, the only module that imports
`pynvml`) and the simulated one (`bcd.fake`), which keeps the hardware's rules so converger tests
mean something. Inventory, convergers and `bcd inventory` see only this interface and these values.

GPUs are named by their `GPU-…` uuid everywhere, never by index: the index NVML gives a GPU can
change across a reboot or a driver reload, its uuid cannot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class GpuError(Exception):
    """A GPU operation did not happen; the message says why in an operator's words."""


class NvmlUnavailable(GpuError):
    """NVML (the driver's management library) cannot be loaded or initialised on this machine."""


class UnknownGpu(GpuError):
    """No GPU of this node has the uuid given."""


class UnknownInstance(GpuError):
    """The GPU has no GPU instance with the id given."""


class InstanceRefused(GpuError):
    """A GPU instance cannot be created: unknown profile, invalid or taken placement, MIG off."""


class InstanceInUse(GpuError):
    """A GPU instance (or the GPU) has work on it, so it cannot be destroyed or reset."""


class MigNotSupported(GpuError):
    """The GPU has no MIG mode to set."""


class ResetFailed(GpuError):
    """A GPU reset did not complete; a pending MIG mode change then waits for a reboot."""


class ComputeModeRefused(GpuError):
    """The GPU refused a compute-mode change (MIG mode on, no permission, not supported)."""


class ZeroingFailed(GpuError):
    """A zeroing pass over a GPU's (or a MIG instance's) memory did not complete."""


COMPUTE_MODES: tuple[str, ...] = ("default", "exclusive-process", "prohibited")
"""NVML's compute modes (`nvmlComputeMode_t`: DEFAULT 0, PROHIBITED 2, EXCLUSIVE_PROCESS 3), by the
names `nvidia-smi -c` takes: the modes a GPU can be read in and set to. An MPS GPU runs in
`exclusive-process` while its control daemon does, so only the MPS server (and through it, its
clients) holds a context on it."""

UNKNOWN_COMPUTE_MODE = "unknown"
"""A GPU's compute mode where NVML would not give it (refused, not supported, or a value it does not
document). Never one of `COMPUTE_MODES`, so no backend sets a GPU to it; read as "not shown to be
any mode", never as `default`: a GPU in it cannot be shown exclusive-process, and calling it
`default` would have a converger set the mode again on every pass."""

UNHEALTHY_THROTTLE_REASONS: tuple[str, ...] = ("HwSlowdown", "HwThermalSlowdown", "HwPowerBrakeSlowdown")
"""Clock event (throttle) reasons that make a GPU unhealthy: the hardware itself slowing down (an
external power brake, a thermal or power alarm). Idle, application clock settings, sync boost,
display clocks and the software power and thermal caps are how a working GPU runs under load or at
rest, so they are reported by NVML but never make a GPU unbookable."""


@dataclass(frozen=True)
class Health:
    """What the GPU says about its own state; `healthy` is false when any problem is listed."""

    ecc_uncorrected: int | None = None
    """Volatile uncorrected ECC errors since the driver loaded; None where ECC is off or unsupported."""
    throttle_reasons: tuple[str, ...] = ()
    """Active throttle reasons among `UNHEALTHY_THROTTLE_REASONS`."""
    notes: tuple[str, ...] = ()
    """Other problems, in words (the fake backend's "marked unhealthy")."""

    @property
    def problems(self) -> tuple[str, ...]:
        found: list[str] = []
        if self.ecc_uncorrected:
            found.append(f"{self.ecc_uncorrected} uncorrected ECC errors")
        found.extend(f"throttled: {reason}" for reason in self.throttle_reasons)
        found.extend(self.notes)
        return tuple(found)

    @property
    def healthy(self) -> bool:
        return not self.problems


@dataclass(frozen=True)
class ComputeInstance:
    """A compute instance inside a GPU instance: the MIG device a container is given."""

    ci_id: int
    slices: int
    """Compute slices it spans; equal to its GPU instance's for the default, full-width one."""
    uuid: str
    """The MIG device's `MIG-…` uuid (what `NVIDIA_VISIBLE_DEVICES` takes); never its GPU's uuid."""
    memory_mib: int | None = None
    """The MIG device's own memory (NVML's `nvmlDeviceGetMemoryInfo` on its MIG device handle);
    None where the backend could not read it."""


@dataclass(frozen=True)
class GpuInstance:
    """A GPU instance: a profile at a placement (start, size) on the GPU's placement axis."""

    gi_id: int
    profile: str
    """The profile's name as the catalog spells it (`3g.40gb`, `1g.10gb+me`)."""
    profile_id: int
    """NVML's GPU-instance profile id (what `nvidia-smi mig -lgip` prints)."""
    placement_start: int
    placement_size: int
    slices: int
    """Compute slices of the profile."""
    compute_instances: tuple[ComputeInstance, ...] = ()


@dataclass(frozen=True)
class Gpu:
    """One physical GPU as its backend reads it."""

    index: int
    uuid: str
    name: str
    """The product name NVML reports (`NVIDIA H100 80GB HBM3`)."""
    memory_mib: int
    pci_bus_id: str
    """`00000000:3B:00.0`, NVML's spelling."""
    numa_node: int | None = None
    nvlink_peers: tuple[str, ...] = ()
    """Uuids of the node's other GPUs reachable over an active NVLink (directly or through NVSwitch)."""
    health: Health = Health()
    mig_capable: bool = False
    mig_current: bool = False
    mig_pending: bool = False
    instances: tuple[GpuInstance, ...] = ()
    minor_number: int | None = None
    """The GPU's device node is `/dev/nvidia<minor_number>` (NVML's `nvmlDeviceGetMinorNumber`);
    None where the driver did not say."""
    compute_mode: str = "default"
    """One of `COMPUTE_MODES`, or `UNKNOWN_COMPUTE_MODE` where the backend could not read it."""
    unlisted: tuple[str, ...] = ()
    """Compute instances the backend saw but could not tie to a MIG device, each with why. They are
    left out of `instances`, so they are never handed out, and never as this GPU: handing out the
    GPU's own uuid for a MIG instance would give its holder the whole GPU."""
    partial: bool = False
    """True when the backend could not read all of the GPU's MIG state (its MIG mode, its instances or
    their MIG devices: the GPU is lost, or NVML refused), and whenever `unlisted` is not empty (a GPU
    instance whose compute instance has no MIG device is there, yet not reported): what is listed is
    there, but what is not listed may be there too. Its health says why; a converger leaves such a GPU
    as it is rather than create, destroy or release anything on it for want of a reading, and the
    inventory says its MIG state is unknown (`migStateUnknown`), so the server keeps its last known
    atoms rather than take them for gone."""


class GpuBackend(Protocol):
    """The GPUs of one node. Reading (`list_gpus`) never changes anything; the other methods each make
    one change and raise a `GpuError` when the hardware refuses it."""

    def list_gpus(self) -> tuple[Gpu, ...]:
        """Every GPU of the node, in NVML index order, with its MIG instances."""
        ...

    def create_instance(self, gpu: str, profile: str, placement_start: int) -> GpuInstance:
        """Create a GPU instance of `profile` at `placement_start`, with its full compute instance.

        The placement is always explicit: left to itself NVML picks one, and the order instances are
        created in then decides whether a layout fits at all.
        """
        ...

    def destroy_instance(self, gpu: str, gi_id: int) -> None:
        """Destroy a GPU instance and its compute instances; `InstanceInUse` while work runs on it."""
        ...

    def set_mig_mode(self, gpu: str, enabled: bool) -> bool:
        """Ask for MIG mode on or off; True when the change waits for a GPU reset (or a reboot)."""
        ...

    def set_compute_mode(self, gpu: str, mode: str) -> None:
        """Set the GPU's compute mode (one of `COMPUTE_MODES`); `ComputeModeRefused` when the GPU
        refuses it (NVML refuses `exclusive-process` in MIG mode)."""
        ...

    def reset_gpu(self, gpu: str) -> None:
        """Reset the GPU, which applies a pending MIG mode and loses its instances; `ResetFailed`
        when it does not complete."""
        ...

    def zero_memory(self, gpu: str, gi_id: int | None) -> None:
        """Overwrite the memory of GPU instance `gi_id` (None: of the whole GPU) with zeros, so the
        next holder reads nothing of the last one's; `ZeroingFailed` when it does not complete."""
        ...

    def close(self) -> None:
        """Release the backend (NVML's handle); the backend is not used again."""
        ...
