"""The real GPU backend: NVML through NVIDIA's `nvidia-ml-py` bindings (`import pynvml`).

This is the only module that imports `pynvml`, and only when a backend is built, so `bcd version`,
the fake backend and the tests never load it. `pynvml` has no type stubs: every value read from it
is converted here to the typed values of `bcd.gpu`, and every `NVMLError` becomes a `GpuError` (a
change) or a health note (a reading) that says what went wrong in an operator's words.

Reading (`list_gpus`) calls only NVML queries; `MUTATING_CALLS` lists the calls that change a GPU,
and only `create_instance`, `destroy_instance`, `set_mig_mode` and `set_compute_mode` make them.
NVML has no GPU reset: `reset_gpu` runs `nvidia-smi --gpu-reset`, through a runner tests replace.

Facts used (nvml.h, as NVIDIA's go-nvml carries it; docs/bcd.md cites them):

- GPU-instance profiles are enumerated by their NVML enum until NVML refuses one, and later calls take
  the profile's `id`, not the enum; profile infos exist only while MIG mode is on. GPU instances are
  listed per profile id; a GPU instance's placement comes from `nvmlGpuInstanceGetInfo`, never from
  its id. Possible placements come from `nvmlDeviceGetGpuInstancePossiblePlacements` (pynvml calls the
  `_v2` symbol): called once with no array for the count, then with an array of that size.
- A MIG device is named by its own handle. nvml.h documents `nvmlComputeInstanceGetInfo().device` as
  the *parent* device; NVIDIA's DRA driver reads it as the MIG device. So that handle is used only
  when `nvmlDeviceIsMigDeviceHandle` says it is a MIG device handle of this compute instance;
  otherwise the parent's MIG devices are walked (`nvmlDeviceGetMaxMigDeviceCount`,
  `nvmlDeviceGetMigDeviceHandleByIndex`, where NOT_FOUND is an empty index), once per GPU per
  reading, and matched by `nvmlDeviceGetGpuInstanceId` / `nvmlDeviceGetComputeInstanceId`. A compute
  instance with no MIG device found is left out, never reported with its GPU's uuid; its GPU instance
  is there all the same, so the GPU is then `partial` and unhealthy (`UNLISTED_NOTE`).
- One GPU that cannot be read does not hide the others: a lost GPU, one that needs a reset, or one
  whose MIG instances this user may not read is listed unhealthy with a note saying so and what to
  do (`Health.notes`); one whose uuid cannot be read is left out and named in `unreadable`.
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
    UNKNOWN_COMPUTE_MODE,
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
from better_compute.bcd.nvml_errors import (
    GPU_ACCESS_HINT,
    GPU_LOST_NOTE,
    MIG_READ_HINT,
    NODE_WIDE,
    RESET_REQUIRED_NOTE,
    ROOT_HINT,
    UNLISTED_NOTE,
    NvmlReturn,
    phrase,
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

UNKNOWN_NAME = "unknown"
"""The product name of a GPU whose name NVML would not give (a lost GPU): reported, never guessed."""

_MIB = 1 << 20

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


def _uint(value: object) -> int:
    """An integer NVML gave back: pynvml returns some as a `ctypes.c_uint` (`nvmlDeviceIsMigDeviceHandle`)."""
    raw = getattr(value, "value", value)
    return int(raw) if isinstance(raw, int) else 0


def _code(exc: Exception) -> int | None:
    code = getattr(exc, "value", None)
    return code if isinstance(code, int) else None


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
class InstanceProfile:
    """A GPU-instance profile as NVML describes it on one GPU (what `nvidia-smi mig -lgip` and
    `-lgipp` print), read for checks; the backend itself creates instances from the same calls."""

    profile: str
    """The catalog's spelling (`3g.40gb`)."""
    profile_id: int
    slices: int
    max_instances: int
    memory_mib: int
    multiprocessors: int
    placements: tuple[tuple[int, int], ...]
    """(start, size) of each placement NVML allows, in NVML's order."""


@dataclass(frozen=True)
class _Links:
    direct: tuple[str, ...]
    """Bus ids of GPUs at the far end of an active NVLink."""
    switched: bool
    """Whether an active NVLink goes to an NVSwitch (every such GPU reaches every other)."""


class _Unread(Exception):
    """A reading NVML refused; the reason is already a note of the GPU's reading."""


class _Reading:
    """One GPU's answers from NVML and what went wrong, in words.

    Lenient (`list_gpus`): a refused query becomes a health note and the reading goes on with the
    GPU's other fields; after GPU_IS_LOST nothing more is asked of the GPU (every call would fail,
    and may each wait on the driver). Strict (a change): a refused query is a `GpuError`.
    """

    def __init__(self, backend: NvmlBackend, *, strict: bool) -> None:
        self._backend = backend
        self._strict = strict
        self.notes: list[str] = []
        self.lost = False
        self.partial = False
        """Part of the GPU's MIG state could not be read."""

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def _state(self, code: int | None) -> None:
        if code == NvmlReturn.GPU_IS_LOST:
            self.lost = True
            self.note(GPU_LOST_NOTE)
        elif code == NvmlReturn.RESET_REQUIRED:
            self.note(RESET_REQUIRED_NOTE)

    def _raw(self, name: str, args: tuple[Any, ...]) -> tuple[Any, int | None, Exception | None]:
        nv = self._backend.nv
        fn = getattr(nv, name, None)
        if fn is None:
            return None, NvmlReturn.FUNCTION_NOT_FOUND, None
        try:
            return fn(*args), None, None
        except nv.NVMLError as exc:
            code = _code(exc)
            if code in NODE_WIDE:
                raise self._backend.error(name, exc) from exc
            if self._strict:
                return None, code, exc
            self._state(code)
            return None, code, exc

    def ask(
        self, what: str, name: str, *args: Any, hint: str = ROOT_HINT, absent: frozenset[int] = frozenset()
    ) -> Any:
        """NVML's answer to a query the reading needs; None where NVML answers one of `absent`."""
        if self.lost:
            raise _Unread(what)
        value, code, exc = self._raw(name, args)
        if code is None:
            return value
        if code in absent:
            return None
        if self._strict:
            raise self._backend.error(name, exc) if exc is not None else GpuError(f"{name}: {phrase(code)}")
        if code not in (NvmlReturn.GPU_IS_LOST, NvmlReturn.RESET_REQUIRED):
            extra = f"; {hint}" if code == NvmlReturn.NO_PERMISSION else ""
            self.note(f"cannot read {what}: {phrase(code, exc)}{extra}")
        raise _Unread(what)

    def optional(self, name: str, *args: Any) -> Any | None:
        """NVML's answer to a query a GPU may not support, or None: "not available"."""
        if self.lost:
            return None
        value, code, _ = self._raw(name, args)
        return value if code is None else None


class _MigDevices:
    """The MIG devices of one GPU by (GPU instance id, compute instance id), walked on first need and
    kept for one reading only: ids are reused once instances are destroyed and created again."""

    def __init__(self, reading: _Reading, parent: Any) -> None:
        self._reading = reading
        self._parent = parent
        self._found: dict[tuple[int, int], Any] | None = None
        self._twice: set[tuple[int, int]] = set()
        self.failed = False

    def find(self, gi_id: int, ci_id: int) -> Any | None:
        if self._found is None:
            self._found = {}
            try:
                self._walk(self._found)
            except _Unread:
                self.failed = True
        return None if (gi_id, ci_id) in self._twice else self._found.get((gi_id, ci_id))

    def _walk(self, found: dict[tuple[int, int], Any]) -> None:
        r, what = self._reading, "the GPU's MIG devices"
        count = r.ask(what, "nvmlDeviceGetMaxMigDeviceCount", self._parent, hint=MIG_READ_HINT)
        for index in range(_uint(count)):
            mig = r.ask(
                what,
                "nvmlDeviceGetMigDeviceHandleByIndex",
                self._parent,
                index,
                hint=MIG_READ_HINT,
                absent=frozenset(
                    {NvmlReturn.NOT_FOUND, NvmlReturn.INVALID_ARGUMENT}
                ),  # an empty index (go-nvlib skips both)
            )
            if mig is None:
                continue
            key = (
                _uint(r.ask(what, "nvmlDeviceGetGpuInstanceId", mig, hint=MIG_READ_HINT)),
                _uint(r.ask(what, "nvmlDeviceGetComputeInstanceId", mig, hint=MIG_READ_HINT)),
            )
            if key in found:
                self._twice.add(key)  # two MIG devices claim one compute instance: trust neither
            found[key] = mig


class NvmlBackend:
    """`GpuBackend` over NVML. `library` is `pynvml` (a stub in tests); `sysfs` is where NUMA nodes
    are read when NVML has none for a GPU; `run` runs `nvidia-smi` for resets."""

    def __init__(
        self, library: ModuleType | None = None, *, sysfs: Path = Path("/sys"), run: Runner | None = None
    ) -> None:
        self.nv: Any = library if library is not None else load_library()
        self._sysfs = sysfs
        self._runner: Runner = run if run is not None else _run
        self.unreadable: tuple[str, ...] = ()
        """GPUs NVML counted in the last `list_gpus` but whose uuid it would not give, each with why:
        a GPU is named by its uuid, so these could not be listed."""
        self._call("nvmlInit")

    # Errors

    def error(self, name: str, exc: Exception) -> GpuError:
        """NVML's refusal of `name` as the `GpuError` a change raises."""
        code = _code(exc)
        if code == NvmlReturn.LIBRARY_NOT_FOUND:
            return NvmlUnavailable(NVML_MISSING)
        if code == NvmlReturn.DRIVER_NOT_LOADED:
            return NvmlUnavailable(
                "the NVIDIA driver is not loaded (NVML: Driver Not Loaded); load it or reboot"
            )
        if code == NvmlReturn.LIB_RM_VERSION_MISMATCH:
            return NvmlUnavailable(
                "NVML and the loaded NVIDIA driver are different versions; reboot the node"
            )
        if code == NvmlReturn.UNINITIALIZED:
            return NvmlUnavailable(f"{name}: NVML is not initialised")
        if code == NvmlReturn.NO_PERMISSION:
            return GpuError(
                f"{name}: permission denied: run as root (or with the mig/monitor capability to read MIG"
                " instances, mig/config to change them)"
            )
        if code == NvmlReturn.FUNCTION_NOT_FOUND:
            return GpuError(f"{name} is not in this driver's NVML; a newer driver is needed")
        if code == NvmlReturn.IN_USE:
            return InstanceInUse(f"{name}: in use ({exc})")
        if code == NvmlReturn.INSUFFICIENT_RESOURCES:
            return InstanceRefused(f"{name}: insufficient resources ({exc}): the placement is taken or full")
        if code == NvmlReturn.GPU_IS_LOST:
            return GpuError(f"{name}: {GPU_LOST_NOTE}")
        if code == NvmlReturn.RESET_REQUIRED:
            return GpuError(f"{name}: {RESET_REQUIRED_NOTE}")
        return GpuError(f"{name} failed: {exc}")

    def _call(self, name: str, *args: Any) -> Any:
        try:
            return getattr(self.nv, name)(*args)
        except self.nv.NVMLError as exc:
            raise self.error(name, exc) from exc

    def _try(self, name: str, *args: Any) -> tuple[Any, int | None]:
        """(result, None), or (None, NVML's error code) for a query a GPU may not support."""
        fn = getattr(self.nv, name, None)
        if fn is None:
            return None, NvmlReturn.FUNCTION_NOT_FOUND
        try:
            return fn(*args), None
        except self.nv.NVMLError as exc:
            if _code(exc) in NODE_WIDE:
                raise self.error(name, exc) from exc
            return None, _code(exc)

    # Reading

    def list_gpus(self) -> tuple[Gpu, ...]:
        count = int(self._call("nvmlDeviceGetCount"))
        unreadable: list[str] = []
        named: list[tuple[int, Any, str]] = []
        for index in range(count):
            handle, code = self._try("nvmlDeviceGetHandleByIndex", index)
            uuid = None
            if code is None:
                uuid, code = self._try("nvmlDeviceGetUUID", handle)
            if code is not None or not uuid:
                why = phrase(code) if code is not None else "it was empty"
                hint = f"; {GPU_ACCESS_HINT}" if code == NvmlReturn.NO_PERMISSION else ""
                unreadable.append(f"GPU {index}: not listed: NVML would not give its uuid: {why}{hint}")
                continue
            named.append((index, handle, _text(uuid)))
        self.unreadable = tuple(unreadable)
        readings = [(index, handle, uuid, _Reading(self, strict=False)) for index, handle, uuid in named]
        buses = [self._bus(r, h) for _, h, _, r in readings]
        links = [self._links(r, h) for _, h, _, r in readings]
        uuids = [uuid for _, _, uuid, _ in readings]
        by_bus = {b.upper(): u for b, u in zip(buses, uuids, strict=True) if b}
        switched = [u for u, link in zip(uuids, links, strict=True) if link.switched]
        gpus = []
        for (index, handle, uuid, reading), bus, link in zip(readings, buses, links, strict=True):
            peers = {by_bus[b.upper()] for b in link.direct if b.upper() in by_bus}
            if link.switched:
                peers.update(switched)
            peers.discard(uuid)
            gpus.append(self._gpu(reading, index, handle, uuid, bus, tuple(u for u in uuids if u in peers)))
        return tuple(gpus)

    def _bus(self, reading: _Reading, handle: Any) -> str:
        try:
            return _text(reading.ask("the PCI bus id", "nvmlDeviceGetPciInfo", handle).busId)
        except _Unread:
            return ""

    def _gpu(self, r: _Reading, index: int, handle: Any, uuid: str, bus: str, peers: tuple[str, ...]) -> Gpu:
        try:
            name = _text(r.ask("the product name", "nvmlDeviceGetName", handle))
        except _Unread:
            name = UNKNOWN_NAME
        try:
            memory_mib = int(r.ask("the memory size", "nvmlDeviceGetMemoryInfo", handle).total) // _MIB
        except _Unread:
            memory_mib = 0
        capable, current, pending = self._mig_mode(r, handle)
        instances: tuple[GpuInstance, ...] = ()
        unlisted: list[str] = []
        if current:
            instances = self._instances(r, handle, uuid, unlisted)
        if unlisted and not r.partial:
            # NVML lists a compute instance it names no MIG device for: its GPU instance is there
            # but not reported, so the GPU's MIG state is not read whole (a layout planned from it
            # would cut over that instance).
            r.note(UNLISTED_NOTE)
        ecc, throttle = self._health(r, handle)
        numa_node, minor, compute_mode = (
            self._numa_node(r, handle, bus),
            self._minor(r, handle),
            self._compute_mode(r, handle),
        )
        return Gpu(  # built once every query is made: any of them may find the GPU lost
            index=index,
            uuid=uuid,
            name=name,
            memory_mib=memory_mib,
            pci_bus_id=bus,
            numa_node=numa_node,
            nvlink_peers=peers,
            health=Health(ecc_uncorrected=ecc, throttle_reasons=throttle, notes=tuple(r.notes)),
            mig_capable=capable,
            mig_current=current,
            mig_pending=pending,
            instances=instances,
            minor_number=minor,
            compute_mode=compute_mode,
            unlisted=tuple(unlisted),
            partial=r.partial or r.lost or bool(unlisted),
        )

    def _mig_mode(self, r: _Reading, handle: Any) -> tuple[bool, bool, bool]:
        """(capable, current, pending). NOT_SUPPORTED is a GPU without MIG; any other refusal leaves
        the mode unknown, which is a health problem: its instances cannot be known either."""
        try:
            mode = r.ask(
                "the MIG mode",
                "nvmlDeviceGetMigMode",
                handle,
                absent=frozenset({NvmlReturn.NOT_SUPPORTED, NvmlReturn.FUNCTION_NOT_FOUND}),
            )
        except _Unread:
            r.partial = True
            return True, False, False
        if mode is None:
            return False, False, False
        enabled = int(self.nv.NVML_DEVICE_MIG_ENABLE)
        return True, int(mode[0]) == enabled, int(mode[1]) == enabled

    def _minor(self, r: _Reading, handle: Any) -> int | None:
        minor = r.optional("nvmlDeviceGetMinorNumber", handle)
        return None if minor is None else int(minor)

    def _compute_mode(self, r: _Reading, handle: Any) -> str:
        """The GPU's compute mode; `UNKNOWN_COMPUTE_MODE` where NVML would not give it or gave a
        value nvml.h does not name (EXCLUSIVE_THREAD, gone since CUDA 8): never taken for `default`."""
        mode = r.optional("nvmlDeviceGetComputeMode", handle)
        names = {v: k for k, v in _COMPUTE_MODE_VALUES.items()}
        return UNKNOWN_COMPUTE_MODE if mode is None else names.get(int(mode), UNKNOWN_COMPUTE_MODE)

    def _numa_node(self, r: _Reading, handle: Any, bus: str) -> int | None:
        node = r.optional("nvmlDeviceGetNumaNodeId", handle)
        if node is not None and int(node) >= 0:
            return int(node)
        return sysfs_numa_node(self._sysfs, bus) if bus else None

    def _links(self, r: _Reading, handle: Any) -> _Links:
        direct: list[str] = []
        switched = False
        for link in range(int(self.nv.NVML_NVLINK_MAX_LINKS)):
            state = r.optional("nvmlDeviceGetNvLinkState", handle, link)
            if state is None:
                break  # links are numbered from 0; NVML refuses the first one past the last
            if int(state) != int(self.nv.NVML_FEATURE_ENABLED):
                continue
            kind = r.optional("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
            if kind is not None and int(kind) == int(self.nv.NVML_NVLINK_DEVICE_TYPE_SWITCH):
                switched = True
                continue
            remote = r.optional("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
            if remote is not None:
                direct.append(_text(remote.busId))
        return _Links(tuple(direct), switched)

    def _health(self, r: _Reading, handle: Any) -> tuple[int | None, tuple[str, ...]]:
        ecc = r.optional(
            "nvmlDeviceGetTotalEccErrors",
            handle,
            self.nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            self.nv.NVML_VOLATILE_ECC,
        )
        reasons = r.optional("nvmlDeviceGetCurrentClocksEventReasons", handle)
        if reasons is None:
            reasons = r.optional("nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        mask = 0 if reasons is None else int(reasons)
        throttle = tuple(name for name, bit in THROTTLE_BITS.items() if mask & bit)
        return (None if ecc is None else int(ecc)), throttle

    def _gi_profiles(self, r: _Reading, handle: Any) -> list[Any]:
        """The GPU's GPU-instance profile infos, one per profile id, by enum until NVML refuses."""
        infos: dict[int, Any] = {}
        for enum in range(int(self.nv.NVML_GPU_INSTANCE_PROFILE_COUNT)):
            info = r.ask(
                "the MIG profiles",
                "nvmlDeviceGetGpuInstanceProfileInfo",
                handle,
                enum,
                hint=MIG_READ_HINT,
                absent=frozenset(
                    {NvmlReturn.NOT_SUPPORTED, NvmlReturn.INVALID_ARGUMENT}
                ),  # a profile this GPU lacks
            )
            if info is not None and int(info.id) not in infos:
                infos[int(info.id)] = info
        return list(infos.values())

    def _gi_handles(self, r: _Reading, handle: Any) -> list[tuple[Any, Any]]:
        """(GPU instance handle, its profile info) for every GPU instance: NVML lists them per profile."""
        found: list[tuple[Any, Any]] = []
        for info in self._gi_profiles(r, handle):
            if int(info.instanceCount) <= 0:
                continue
            array = (self.nv.c_nvmlGpuInstance_t * int(info.instanceCount))()
            count = ctypes.c_uint(0)
            r.ask(
                "the GPU instances",
                "nvmlDeviceGetGpuInstances",
                handle,
                info.id,
                array,
                ctypes.byref(count),
                hint=MIG_READ_HINT,
            )
            found.extend((array[i], info) for i in range(min(count.value, len(array))))
        return found

    def _instances(self, r: _Reading, handle: Any, uuid: str, unlisted: list[str]) -> tuple[GpuInstance, ...]:
        """The GPU's instances; those read before a refusal are kept (the refusal is a health note)."""
        migs = _MigDevices(r, handle)
        instances = []
        try:
            for gi, info in self._gi_handles(r, handle):
                instances.append(self._instance(r, gi, info, handle, uuid, migs, unlisted))
        except _Unread:
            r.partial = True
        r.partial = r.partial or migs.failed
        return tuple(sorted(instances, key=lambda i: (i.placement_start, i.gi_id)))

    def _instance(
        self,
        r: _Reading,
        gi: Any,
        info: Any,
        parent: Any,
        parent_uuid: str,
        migs: _MigDevices,
        unlisted: list[str],
    ) -> GpuInstance:
        gi_info = r.ask("a GPU instance", "nvmlGpuInstanceGetInfo", gi, hint=MIG_READ_HINT)
        gi_id = int(gi_info.id)
        profile = profile_name(info.name)
        cis = []
        for ci, ci_profile in self._ci_handles(r, gi):
            ci_info = r.ask("a compute instance", "nvmlComputeInstanceGetInfo", ci, hint=MIG_READ_HINT)
            ci_id = int(ci_info.id)
            where = f"GPU instance {gi_id} ({profile}) compute instance {ci_id}"
            found = self._mig_device(r, ci_info.device, gi_id, ci_id, migs)
            if found is None:
                why = (
                    "walking the GPU's MIG devices failed" if migs.failed else "NVML has no MIG device for it"
                )
                unlisted.append(f"{where}: not listed: {why}")
                continue
            mig_uuid = r.optional("nvmlDeviceGetUUID", found)
            mig_uuid = None if mig_uuid is None else _text(mig_uuid)
            if mig_uuid is None or not mig_uuid.startswith("MIG-") or mig_uuid == parent_uuid:
                unlisted.append(f"{where}: not listed: its MIG device has no MIG- uuid ({mig_uuid})")
                continue
            memory = r.optional("nvmlDeviceGetMemoryInfo", found)
            cis.append(
                ComputeInstance(
                    ci_id=ci_id,
                    slices=int(ci_profile.sliceCount),
                    uuid=mig_uuid,
                    memory_mib=None if memory is None else int(memory.total) // _MIB,
                )
            )
        return GpuInstance(
            gi_id=gi_id,
            profile=profile,
            profile_id=int(info.id),
            placement_start=int(gi_info.placement.start),
            placement_size=int(gi_info.placement.size),
            slices=int(info.sliceCount),
            compute_instances=tuple(sorted(cis, key=lambda c: c.ci_id)),
        )

    def _mig_device(self, r: _Reading, device: Any, gi_id: int, ci_id: int, migs: _MigDevices) -> Any | None:
        """The MIG device of compute instance (gi_id, ci_id). The handle `nvmlComputeInstanceGetInfo`
        gave is taken only when NVML says it is a MIG device handle, of this very instance: nvml.h calls
        that field the parent device, and the parent's uuid would hand out the whole GPU."""
        is_mig = r.optional("nvmlDeviceIsMigDeviceHandle", device)
        if is_mig is not None and _uint(is_mig):
            ids = (
                r.optional("nvmlDeviceGetGpuInstanceId", device),
                r.optional("nvmlDeviceGetComputeInstanceId", device),
            )
            if ids[0] is not None and ids[1] is not None and (_uint(ids[0]), _uint(ids[1])) == (gi_id, ci_id):
                return device
        return migs.find(gi_id, ci_id)

    def _ci_profiles(self, r: _Reading, gi: Any) -> list[Any]:
        infos: dict[int, Any] = {}
        for enum in range(int(self.nv.NVML_COMPUTE_INSTANCE_PROFILE_COUNT)):
            info = r.ask(
                "the compute-instance profiles",
                "nvmlGpuInstanceGetComputeInstanceProfileInfo",
                gi,
                enum,
                self.nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
                hint=MIG_READ_HINT,
                absent=frozenset({NvmlReturn.NOT_SUPPORTED, NvmlReturn.INVALID_ARGUMENT}),
            )
            if info is not None and int(info.id) not in infos:
                infos[int(info.id)] = info
        return list(infos.values())

    def _ci_handles(self, r: _Reading, gi: Any) -> list[tuple[Any, Any]]:
        found: list[tuple[Any, Any]] = []
        for info in self._ci_profiles(r, gi):
            if int(info.instanceCount) <= 0:
                continue
            array = (self.nv.c_nvmlComputeInstance_t * int(info.instanceCount))()
            count = ctypes.c_uint(0)
            r.ask(
                "the compute instances",
                "nvmlGpuInstanceGetComputeInstances",
                gi,
                info.id,
                array,
                ctypes.byref(count),
                hint=MIG_READ_HINT,
            )
            found.extend((array[i], info) for i in range(min(count.value, len(array))))
        return found

    def _placements(self, handle: Any, info: Any) -> tuple[tuple[int, int], ...]:
        """(start, size) of each placement NVML allows `info`'s profile, by the two-call pattern of
        `nvmlDeviceGetGpuInstancePossiblePlacements_v2`: a NULL array asks for the count, then an
        array of that many is filled (and the count says how many were written)."""
        count = ctypes.c_uint(0)
        self._call("nvmlDeviceGetGpuInstancePossiblePlacements", handle, info.id, None, ctypes.byref(count))
        if count.value == 0:
            return ()
        array = (self.nv.c_nvmlGpuInstancePlacement_t * count.value)()
        self._call("nvmlDeviceGetGpuInstancePossiblePlacements", handle, info.id, array, ctypes.byref(count))
        return tuple((int(array[i].start), int(array[i].size)) for i in range(min(count.value, len(array))))

    def instance_profiles(self, gpu: str) -> tuple[InstanceProfile, ...]:
        """The GPU's GPU-instance profiles and their possible placements, as NVML reports them: only
        queries. NVML describes profiles only while MIG mode is on; otherwise there are none."""
        handle = self._handle(gpu)
        if not self._mig_on(handle):
            return ()
        r = _Reading(self, strict=True)
        return tuple(
            InstanceProfile(
                profile=profile_name(info.name),
                profile_id=int(info.id),
                slices=int(info.sliceCount),
                max_instances=int(info.instanceCount),
                memory_mib=int(info.memorySizeMB),
                multiprocessors=int(info.multiprocessorCount),
                placements=self._placements(handle, info),
            )
            for info in self._gi_profiles(r, handle)
        )

    # Changing

    def _handle(self, gpu: str) -> Any:
        handle, code = self._try("nvmlDeviceGetHandleByUUID", gpu)
        if code in (NvmlReturn.NOT_FOUND, NvmlReturn.INVALID_ARGUMENT):
            raise UnknownGpu(f"this node has no GPU {gpu}")
        if code is not None:
            raise GpuError(f"GPU {gpu} cannot be reached: {phrase(code)}")
        return handle

    def _mig_on(self, handle: Any) -> bool:
        mode, code = self._try("nvmlDeviceGetMigMode", handle)
        return code is None and int(mode[0]) == int(self.nv.NVML_DEVICE_MIG_ENABLE)

    def create_instance(self, gpu: str, profile: str, placement_start: int) -> GpuInstance:
        handle = self._handle(gpu)
        wanted = normalize_profile_name(profile)
        if not self._mig_on(handle):
            _, code = self._try("nvmlDeviceGetMigMode", handle)
            why = "it does not support MIG" if code == NvmlReturn.NOT_SUPPORTED else "MIG mode is not enabled"
            raise InstanceRefused(f"{gpu} cannot hold a {wanted} instance: {why}")
        r = _Reading(self, strict=True)
        infos = self._gi_profiles(r, handle)
        info = next((i for i in infos if profile_name(i.name) == wanted), None)
        if info is None:
            known = ", ".join(profile_name(i.name) for i in infos) or "none"
            raise InstanceRefused(f"{gpu} has no profile {wanted} (profiles: {known})")
        placements = self._placements(handle, info)
        chosen = next((p for p in placements if p[0] == placement_start), None)
        if chosen is None:
            allowed = ", ".join(str(start) for start, _ in placements) or "nowhere: NVML lists none"
            raise InstanceRefused(
                f"{wanted} cannot start at {placement_start} (placements start at {allowed})"
            )
        placement = self.nv.c_nvmlGpuInstancePlacement_t()
        placement.start, placement.size = chosen
        gi = self._call("nvmlDeviceCreateGpuInstanceWithPlacement", handle, info.id, ctypes.byref(placement))
        try:
            self._call("nvmlGpuInstanceCreateComputeInstance", gi, self._full_ci_profile(r, gi, info).id)
        except GpuError:
            self._call("nvmlGpuInstanceDestroy", gi)
            raise
        return self._instance(r, gi, info, handle, gpu, _MigDevices(r, handle), [])

    def _full_ci_profile(self, r: _Reading, gi: Any, info: Any) -> Any:
        """The compute-instance profile spanning the whole GPU instance, with the most SMs: on some
        GPUs two profiles span it and the first one found has fewer."""
        full = [c for c in self._ci_profiles(r, gi) if int(c.sliceCount) == int(info.sliceCount)]
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
        for ci, _ in self._ci_handles(_Reading(self, strict=True), gi):
            self._call("nvmlComputeInstanceDestroy", ci)
        self._call("nvmlGpuInstanceDestroy", gi)

    def set_mig_mode(self, gpu: str, enabled: bool) -> bool:
        handle = self._handle(gpu)
        _, code = self._try("nvmlDeviceGetMigMode", handle)
        if code is not None:
            raise MigNotSupported(f"{gpu} does not support MIG")
        mode = self.nv.NVML_DEVICE_MIG_ENABLE if enabled else self.nv.NVML_DEVICE_MIG_DISABLE
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
        """`nvidia-smi --gpu-reset`. A GPU NVML knows but cannot reach (one that needs a reset says
        RESET_REQUIRED, a lost one GPU_IS_LOST) is still nvidia-smi's to try: it is named by uuid."""
        try:
            self._handle(gpu)
        except UnknownGpu:
            raise
        except GpuError:
            pass
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
