"""The real GPU backend: NVML through NVIDIA's `nvidia-ml-py` bindings (`import pynvml`).

This is the only module that imports `pynvml`, and only when a backend is built, so `bcd version`,
the fake backend and the tests never load it. `pynvml` has no type stubs: every value read from it
is converted here to the typed values of `bcd.gpu`, and every `NVMLError` becomes a `GpuError` that
says what went wrong in an operator's words.

Reading (`list_gpus`) calls only NVML queries; `MUTATING_CALLS` lists the calls that change a GPU,
and only `create_instance`, `destroy_instance` and `set_mig_mode` make them. NVML has no GPU reset:
`reset_gpu` runs `nvidia-smi --gpu-reset`, through a runner tests replace.

Facts used (docs/bcd.md cites them): GPU-instance profiles are enumerated by their NVML enum until
NVML refuses one, and later calls take the profile's `id`, not the enum; GPU instances are listed per
profile id; a GPU instance's placement comes from `nvmlGpuInstanceGetInfo`, never from its id; a MIG
device's uuid comes from its compute instance's device handle.
"""

from __future__ import annotations

import ctypes
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from better_compute.bcd.gpu import (
    COMPUTE_MODES,
    ComputeInstance,
    ComputeModeRefused,
    Gpu,
    GpuError,
    GpuInstance,
    Health,
    InstanceInUse,
    InstanceRefused,
    MigNotSupported,
    NvmlUnavailable,
    ResetFailed,
    UnknownGpu,
    UnknownInstance,
    ZeroingFailed,
)
from better_compute.domain.catalog import normalize_profile_name

NVML_MISSING = (
    "NVML is not available on this machine (libnvidia-ml.so.1 not found); is the NVIDIA driver installed?"
)

MUTATING_CALLS = frozenset(
    {
        "nvmlDeviceSetMigMode",
        "nvmlDeviceCreateGpuInstance",
        "nvmlDeviceCreateGpuInstanceWithPlacement",
        "nvmlGpuInstanceCreateComputeInstance",
        "nvmlGpuInstanceCreateComputeInstanceWithPlacement",
        "nvmlGpuInstanceDestroy",
        "nvmlComputeInstanceDestroy",
        "nvmlDeviceSetComputeMode",
    }
)
"""The NVML calls this backend makes that change a GPU; `list_gpus` never makes one."""

THROTTLE_BITS: dict[str, int] = {"HwSlowdown": 0x8, "HwThermalSlowdown": 0x40, "HwPowerBrakeSlowdown": 0x80}
"""`nvmlClocksEventReason*` bits of `bcd.gpu.UNHEALTHY_THROTTLE_REASONS` (fixed by NVML's ABI)."""

_COMPUTE_MODE_VALUES = {"default": 0, "prohibited": 2, "exclusive-process": 3}
"""`nvmlComputeMode_t` (nvml.h): 1 was EXCLUSIVE_THREAD, gone since CUDA 8."""

# NVML return codes this module tells apart (nvml.h; the same values in pynvml).
_NO_PERMISSION = 4
_DRIVER_NOT_LOADED = 9
_LIBRARY_NOT_FOUND = 12
_FUNCTION_NOT_FOUND = 13
_LIB_RM_VERSION_MISMATCH = 18
_IN_USE = 19
_INSUFFICIENT_RESOURCES = 23

Runner = Callable[[Sequence[str]], subprocess.CompletedProcess[str]]
"""Runs a command and returns its result without raising on a non-zero status."""


def load_library() -> ModuleType:
    """`pynvml`, imported now: loading the driver's library waits for `nvmlInit`."""
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - nvidia-ml-py is a dependency of the package
        raise NvmlUnavailable("the nvidia-ml-py package is not installed (pip install nvidia-ml-py)") from exc
    module: ModuleType = pynvml
    return module


def _run(command: Sequence[str]) -> subprocess.CompletedProcess[str]:  # pragma: no cover - needs a GPU
    return subprocess.run(list(command), capture_output=True, text=True, check=False, timeout=120)


def _text(value: object) -> str:
    """pynvml returns `str` from decorated calls and printable structs, `bytes` from plain structs."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def profile_name(raw: object) -> str:
    """A profile's name as the catalog spells it: NVML says `MIG 3g.40gb`."""
    text = _text(raw).strip()
    if text.lower().startswith("mig "):
        text = text[4:]
    return normalize_profile_name(text)


def sysfs_numa_node(sysfs: Path, pci_bus_id: str) -> int | None:
    """The NUMA node Linux gives a PCI device; NVML's `00000000:3B:00.0` is sysfs's `0000:3b:00.0`.
    None where the file is missing or says -1 (a machine with one NUMA node)."""
    domain, _, rest = pci_bus_id.partition(":")
    path = sysfs / "bus" / "pci" / "devices" / f"{domain[-4:]}:{rest}".lower() / "numa_node"
    try:
        node = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


@dataclass(frozen=True)
class _Links:
    direct: tuple[str, ...]
    """Bus ids of GPUs at the far end of an active NVLink."""
    switched: bool
    """Whether an active NVLink goes to an NVSwitch (every such GPU reaches every other)."""


class NvmlBackend:
    """`GpuBackend` over NVML. `library` is `pynvml` (a stub in tests); `sysfs` is where NUMA nodes
    are read when NVML has none for a GPU; `run` runs `nvidia-smi` for resets."""

    def __init__(
        self, library: ModuleType | None = None, *, sysfs: Path = Path("/sys"), run: Runner | None = None
    ) -> None:
        self._nv: Any = library if library is not None else load_library()
        self._sysfs = sysfs
        self._runner: Runner = run if run is not None else _run
        self._call("nvmlInit")

    # Errors

    def _error(self, name: str, exc: Exception) -> GpuError:
        code = getattr(exc, "value", None)
        if code == _LIBRARY_NOT_FOUND:
            return NvmlUnavailable(NVML_MISSING)
        if code == _DRIVER_NOT_LOADED:
            return NvmlUnavailable(
                "the NVIDIA driver is not loaded (NVML: Driver Not Loaded); load it or reboot"
            )
        if code == _LIB_RM_VERSION_MISMATCH:
            return NvmlUnavailable(
                "NVML and the loaded NVIDIA driver are different versions; reboot the node"
            )
        if code == _NO_PERMISSION:
            return GpuError(
                f"{name}: permission denied: run as root (or with the mig/monitor capability to read MIG"
                " instances, mig/config to change them)"
            )
        if code == _FUNCTION_NOT_FOUND:
            return GpuError(f"{name} is not in this driver's NVML; a newer driver is needed")
        if code == _IN_USE:
            return InstanceInUse(f"{name}: in use ({exc})")
        if code == _INSUFFICIENT_RESOURCES:
            return InstanceRefused(f"{name}: insufficient resources ({exc}): the placement is taken or full")
        return GpuError(f"{name} failed: {exc}")

    def _call(self, name: str, *args: Any) -> Any:
        try:
            return getattr(self._nv, name)(*args)
        except self._nv.NVMLError as exc:
            raise self._error(name, exc) from exc

    def _try(self, name: str, *args: Any) -> tuple[Any, int | None]:
        """(result, None), or (None, NVML's error code) for a query a GPU may not support."""
        fn = getattr(self._nv, name, None)
        if fn is None:
            return None, _FUNCTION_NOT_FOUND
        try:
            return fn(*args), None
        except self._nv.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code in (_LIBRARY_NOT_FOUND, _DRIVER_NOT_LOADED, _LIB_RM_VERSION_MISMATCH):
                raise self._error(name, exc) from exc
            return None, code if isinstance(code, int) else None

    # Reading

    def list_gpus(self) -> tuple[Gpu, ...]:
        count = int(self._call("nvmlDeviceGetCount"))
        handles = [self._call("nvmlDeviceGetHandleByIndex", i) for i in range(count)]
        uuids = [_text(self._call("nvmlDeviceGetUUID", h)) for h in handles]
        buses = [_text(self._call("nvmlDeviceGetPciInfo", h).busId) for h in handles]
        links = [self._links(h) for h in handles]
        by_bus = {b.upper(): u for b, u in zip(buses, uuids, strict=True)}
        switched = [u for u, link in zip(uuids, links, strict=True) if link.switched]
        gpus = []
        for index, (handle, uuid, bus, link) in enumerate(zip(handles, uuids, buses, links, strict=True)):
            peers = {by_bus[b.upper()] for b in link.direct if b.upper() in by_bus}
            if link.switched:
                peers.update(switched)
            peers.discard(uuid)
            gpus.append(self._gpu(index, handle, uuid, bus, tuple(u for u in uuids if u in peers)))
        return tuple(gpus)

    def _gpu(self, index: int, handle: Any, uuid: str, bus: str, peers: tuple[str, ...]) -> Gpu:
        mode, code = self._try("nvmlDeviceGetMigMode", handle)
        current, pending = (int(mode[0]), int(mode[1])) if code is None else (0, 0)
        enabled = int(self._nv.NVML_DEVICE_MIG_ENABLE)
        return Gpu(
            index=index,
            uuid=uuid,
            name=_text(self._call("nvmlDeviceGetName", handle)),
            memory_mib=int(self._call("nvmlDeviceGetMemoryInfo", handle).total) // (1 << 20),
            pci_bus_id=bus,
            numa_node=self._numa_node(handle, bus),
            nvlink_peers=peers,
            health=self._health(handle),
            mig_capable=code is None,
            mig_current=current == enabled,
            mig_pending=pending == enabled,
            instances=self._instances(handle) if current == enabled else (),
            minor_number=self._minor(handle),
            compute_mode=self._compute_mode(handle),
        )

    def _minor(self, handle: Any) -> int | None:
        minor, code = self._try("nvmlDeviceGetMinorNumber", handle)
        return int(minor) if code is None else None

    def _compute_mode(self, handle: Any) -> str:
        mode, code = self._try("nvmlDeviceGetComputeMode", handle)
        names = {v: k for k, v in _COMPUTE_MODE_VALUES.items()}
        return names.get(int(mode), "default") if code is None else "default"

    def _numa_node(self, handle: Any, bus: str) -> int | None:
        node, code = self._try("nvmlDeviceGetNumaNodeId", handle)
        if code is None and int(node) >= 0:
            return int(node)
        return sysfs_numa_node(self._sysfs, bus)

    def _links(self, handle: Any) -> _Links:
        direct: list[str] = []
        switched = False
        for link in range(int(self._nv.NVML_NVLINK_MAX_LINKS)):
            state, code = self._try("nvmlDeviceGetNvLinkState", handle, link)
            if code is not None:
                break  # links are numbered from 0; NVML refuses the first one past the last
            if int(state) != int(self._nv.NVML_FEATURE_ENABLED):
                continue
            kind, code = self._try("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
            if code is None and int(kind) == int(self._nv.NVML_NVLINK_DEVICE_TYPE_SWITCH):
                switched = True
                continue
            remote, code = self._try("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
            if code is None:
                direct.append(_text(remote.busId))
        return _Links(tuple(direct), switched)

    def _health(self, handle: Any) -> Health:
        ecc, code = self._try(
            "nvmlDeviceGetTotalEccErrors",
            handle,
            self._nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            self._nv.NVML_VOLATILE_ECC,
        )
        reasons, rcode = self._try("nvmlDeviceGetCurrentClocksEventReasons", handle)
        if rcode is not None:
            reasons, rcode = self._try("nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        mask = int(reasons) if rcode is None else 0
        return Health(
            ecc_uncorrected=int(ecc) if code is None else None,
            throttle_reasons=tuple(name for name, bit in THROTTLE_BITS.items() if mask & bit),
        )

    def _gi_profiles(self, handle: Any) -> list[Any]:
        """The GPU's GPU-instance profile infos, one per profile id, by enum until NVML refuses."""
        infos: dict[int, Any] = {}
        for enum in range(int(self._nv.NVML_GPU_INSTANCE_PROFILE_COUNT)):
            info, code = self._try("nvmlDeviceGetGpuInstanceProfileInfo", handle, enum)
            if code is None and int(info.id) not in infos:
                infos[int(info.id)] = info
        return list(infos.values())

    def _gi_handles(self, handle: Any) -> list[tuple[Any, Any]]:
        """(GPU instance handle, its profile info) for every GPU instance: NVML lists them per profile."""
        found: list[tuple[Any, Any]] = []
        for info in self._gi_profiles(handle):
            if int(info.instanceCount) <= 0:
                continue
            array = (self._nv.c_nvmlGpuInstance_t * int(info.instanceCount))()
            count = ctypes.c_uint(0)
            self._call("nvmlDeviceGetGpuInstances", handle, info.id, array, ctypes.byref(count))
            found.extend((array[i], info) for i in range(count.value))
        return found

    def _instances(self, handle: Any) -> tuple[GpuInstance, ...]:
        instances = [self._instance(gi, info) for gi, info in self._gi_handles(handle)]
        return tuple(sorted(instances, key=lambda i: (i.placement_start, i.gi_id)))

    def _instance(self, gi: Any, info: Any) -> GpuInstance:
        gi_info = self._call("nvmlGpuInstanceGetInfo", gi)
        cis = []
        for ci, ci_profile in self._ci_handles(gi):
            ci_info = self._call("nvmlComputeInstanceGetInfo", ci)
            uuid = _text(self._call("nvmlDeviceGetUUID", ci_info.device))
            cis.append(ComputeInstance(ci_id=int(ci_info.id), slices=int(ci_profile.sliceCount), uuid=uuid))
        return GpuInstance(
            gi_id=int(gi_info.id),
            profile=profile_name(info.name),
            profile_id=int(info.id),
            placement_start=int(gi_info.placement.start),
            placement_size=int(gi_info.placement.size),
            slices=int(info.sliceCount),
            compute_instances=tuple(sorted(cis, key=lambda c: c.ci_id)),
        )

    def _ci_profiles(self, gi: Any) -> list[Any]:
        infos: dict[int, Any] = {}
        for enum in range(int(self._nv.NVML_COMPUTE_INSTANCE_PROFILE_COUNT)):
            info, code = self._try(
                "nvmlGpuInstanceGetComputeInstanceProfileInfo",
                gi,
                enum,
                self._nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
            )
            if code is None and int(info.id) not in infos:
                infos[int(info.id)] = info
        return list(infos.values())

    def _ci_handles(self, gi: Any) -> list[tuple[Any, Any]]:
        found: list[tuple[Any, Any]] = []
        for info in self._ci_profiles(gi):
            if int(info.instanceCount) <= 0:
                continue
            array = (self._nv.c_nvmlComputeInstance_t * int(info.instanceCount))()
            count = ctypes.c_uint(0)
            self._call("nvmlGpuInstanceGetComputeInstances", gi, info.id, array, ctypes.byref(count))
            found.extend((array[i], info) for i in range(count.value))
        return found

    # Changing

    def _handle(self, gpu: str) -> Any:
        handle, code = self._try("nvmlDeviceGetHandleByUUID", gpu)
        if code is not None:
            raise UnknownGpu(f"this node has no GPU {gpu}")
        return handle

    def create_instance(self, gpu: str, profile: str, placement_start: int) -> GpuInstance:
        handle = self._handle(gpu)
        infos = self._gi_profiles(handle)
        wanted = normalize_profile_name(profile)
        info = next((i for i in infos if profile_name(i.name) == wanted), None)
        if info is None:
            known = ", ".join(profile_name(i.name) for i in infos) or "none: MIG is not supported"
            raise InstanceRefused(f"{gpu} has no profile {wanted} (profiles: {known})")
        count = ctypes.c_uint(0)
        self._call("nvmlDeviceGetGpuInstancePossiblePlacements", handle, info.id, None, ctypes.byref(count))
        placements = (self._nv.c_nvmlGpuInstancePlacement_t * count.value)()
        self._call(
            "nvmlDeviceGetGpuInstancePossiblePlacements", handle, info.id, placements, ctypes.byref(count)
        )
        starts = [placements[i] for i in range(count.value)]
        chosen = next((p for p in starts if int(p.start) == placement_start), None)
        if chosen is None:
            allowed = ", ".join(str(int(p.start)) for p in starts)
            raise InstanceRefused(
                f"{wanted} cannot start at {placement_start} (placements start at {allowed})"
            )
        placement = self._nv.c_nvmlGpuInstancePlacement_t()
        placement.start, placement.size = int(chosen.start), int(chosen.size)
        gi = self._call("nvmlDeviceCreateGpuInstanceWithPlacement", handle, info.id, ctypes.byref(placement))
        try:
            self._call("nvmlGpuInstanceCreateComputeInstance", gi, self._full_ci_profile(gi, info).id)
        except GpuError:
            self._call("nvmlGpuInstanceDestroy", gi)
            raise
        return self._instance(gi, info)

    def _full_ci_profile(self, gi: Any, info: Any) -> Any:
        """The compute-instance profile spanning the whole GPU instance, with the most SMs: on some
        GPUs two profiles span it and the first one found has fewer."""
        full = [c for c in self._ci_profiles(gi) if int(c.sliceCount) == int(info.sliceCount)]
        if not full:
            raise InstanceRefused(
                f"no compute-instance profile spans a {profile_name(info.name)} GPU instance"
            )
        return max(full, key=lambda c: int(c.multiprocessorCount))

    def destroy_instance(self, gpu: str, gi_id: int) -> None:
        handle = self._handle(gpu)
        gi, code = self._try("nvmlDeviceGetGpuInstanceById", handle, gi_id)
        if code is not None:
            raise UnknownInstance(f"{gpu} has no GPU instance {gi_id}")
        for ci, _ in self._ci_handles(gi):
            self._call("nvmlComputeInstanceDestroy", ci)
        self._call("nvmlGpuInstanceDestroy", gi)

    def set_mig_mode(self, gpu: str, enabled: bool) -> bool:
        handle = self._handle(gpu)
        _, code = self._try("nvmlDeviceGetMigMode", handle)
        if code is not None:
            raise MigNotSupported(f"{gpu} does not support MIG")
        mode = self._nv.NVML_DEVICE_MIG_ENABLE if enabled else self._nv.NVML_DEVICE_MIG_DISABLE
        self._call("nvmlDeviceSetMigMode", handle, mode)
        current, pending = self._call("nvmlDeviceGetMigMode", handle)
        return int(current) != int(pending)

    def set_compute_mode(self, gpu: str, mode: str) -> None:
        if mode not in COMPUTE_MODES:
            raise ComputeModeRefused(f"{mode!r} is not a compute mode ({', '.join(COMPUTE_MODES)})")
        handle = self._handle(gpu)
        try:
            self._call("nvmlDeviceSetComputeMode", handle, _COMPUTE_MODE_VALUES[mode])
        except GpuError as exc:
            raise ComputeModeRefused(f"{gpu} refused compute mode {mode}: {exc}") from exc

    def reset_gpu(self, gpu: str) -> None:
        self._handle(gpu)
        try:
            result = self._runner(["nvidia-smi", "--gpu-reset", "-i", gpu])
        except (OSError, subprocess.SubprocessError) as exc:
            raise ResetFailed(f"the reset of {gpu} did not run: {exc}") from exc
        if result.returncode != 0:
            lines = (result.stderr or result.stdout or "").strip().splitlines()
            raise ResetFailed(
                f"the reset of {gpu} failed: {lines[-1] if lines else f'exit {result.returncode}'}"
            )

    def zero_memory(self, gpu: str, gi_id: int | None) -> None:
        """NVML has no call that writes a GPU's memory; a zeroing pass needs a CUDA program, which
        this daemon does not carry. Refused, so the atom stays unclean and its next tenant waits."""
        self._handle(gpu)
        where = f"GPU instance {gi_id} of {gpu}" if gi_id is not None else gpu
        raise ZeroingFailed(
            f"the zeroing pass over {where} cannot run: NVML has no call that zeroes GPU memory; "
            "use policy.scrub reset (exclusive pools) or none on this node's pool"
        )

    def close(self) -> None:
        self._try("nvmlShutdown")
