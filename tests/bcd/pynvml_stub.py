"""A stand-in for `pynvml` that needs no GPU: the real package's constants, structs, handle types and
error classes, with its NVML functions replaced by ones that answer from simulated GPUs.

Every function has the real one's name and parameters (tests/bcd/test_nvml.py holds them to
`inspect.signature` of the installed package) and returns what the real one returns: ctypes structs
of the real types (`c_nvmlGpuInstanceInfo_t`, `nvmlPciInfo_t`...), handles as the real pointer types,
`str` from the calls pynvml decorates, a `c_uint` from `nvmlDeviceIsMigDeviceHandle`, and results
written into the caller's ctypes arrays and counters. Errors are the real `pynvml.NVMLError`
subclasses. `calls` records each function called.

What it answers follows nvml.h (NVIDIA/go-nvml `pkg/nvml/nvml.h`), not this project's code:

- A GPU and each of its MIG devices have different handles. A MIG device is reached through its
  parent by index (`nvmlDeviceGetMaxMigDeviceCount`, `nvmlDeviceGetMigDeviceHandleByIndex`, which
  answers NOT_FOUND for an index with no MIG device and INVALID_ARGUMENT past the last), knows its GPU
  and compute instance ids and its parent, and has its own uuid and memory. MIG device indexes are
  not the instances' ids and leave holes where instances were destroyed.
- `nvmlComputeInstanceGetInfo().device` follows one of two readings (`reading`): `HEADER`, nvml.h's
  "Parent device" (the GPU's handle), or `DRA`, the MIG device's handle, as NVIDIA's DRA driver reads
  it. `NULL` gives a NULL handle.
- GPU-instance profile infos and the instance queries answer NOT_SUPPORTED while MIG mode is off;
  possible placements are answered whatever the mode.
- Errors can be injected per GPU and per call (`StubGpu.errors`): a call named there, or every call
  on that GPU under `"*"`, raises the code given (0 lets a named call through). So a lost GPU, one
  that needs a reset or one this user may not query is a dictionary away.
"""

from __future__ import annotations

import ctypes
import uuid as uuidlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import pynvml

from better_compute.domain import catalog

_NS = uuidlib.UUID("5d1c2a0e-4f0b-4d6e-9a51-0c3e1f2b7a44")
_CI_ENUM_BY_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}

HEADER = "header"
"""`nvmlComputeInstanceGetInfo().device` is the parent GPU's handle, as nvml.h documents the field."""
DRA = "dra"
"""`nvmlComputeInstanceGetInfo().device` is the MIG device's handle, as NVIDIA's DRA driver reads it."""
NULL = "null"
"""`nvmlComputeInstanceGetInfo().device` is a NULL handle."""
READINGS = (HEADER, DRA)

LOST = {"*": pynvml.NVML_ERROR_GPU_IS_LOST}
"""Errors of a GPU that fell off the bus: every call on it answers GPU_IS_LOST."""


def _fail(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


@dataclass
class StubCi:
    ci_id: int
    profile_id: int
    slices: int
    uuid: str
    handle: Any
    mig_index: int
    """The MIG device's index under its GPU (`nvmlDeviceGetMigDeviceHandleByIndex`)."""
    memory_mib: int
    mig: StubMig | None = None


@dataclass
class StubMig:
    """A MIG device: what its own handle points at."""

    ci: StubCi
    handle: Any = None


@dataclass
class StubGi:
    gi_id: int
    profile_id: int
    start: int
    size: int
    handle: Any
    cis: list[StubCi] = field(default_factory=list)
    busy: bool = False


@dataclass
class StubLink:
    active: bool = True
    remote_bus: str = ""
    switch: bool = False


@dataclass
class StubGpu:
    uuid: str
    name: str
    memory_mib: int
    bus_id: str
    model: catalog.GpuModel | None = None
    """MIG profiles and placements come from the catalog; None is a GPU without MIG."""
    numa_node: int | None = None
    links: list[StubLink] = field(default_factory=list)
    ecc_uncorrected: int | None = 0
    throttle_mask: int = 0
    mig_current: int = 0
    mig_pending: int = 0
    gis: list[StubGi] = field(default_factory=list)
    handle: Any = None
    minor: int = 0
    compute_mode: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    """NVML error codes by call name (or `"*"`: every call) that calls on this GPU answer."""


class StubNvml:
    """Simulated GPUs and the `pynvml` module answering for them (`module`)."""

    def __init__(
        self,
        gpus: list[StubGpu],
        *,
        library_missing: bool = False,
        has_numa_call: bool = True,
        reading: str = HEADER,
    ) -> None:
        assert reading in (HEADER, DRA, NULL)
        self.gpus = gpus
        self.reading = reading
        self.calls: list[str] = []
        self.library_missing = library_missing
        self._by_address: dict[int, Any] = {}
        self._keep: list[Any] = []
        self._next_gi = 13  # GPU instance ids bear no relation to placements, as on real GPUs
        self._free_gi: list[int] = []  # and are reused once their instance is destroyed
        self._created = 0  # a MIG device made again gets a new uuid, as on hardware
        for gpu in gpus:
            gpu.handle = self._handle(pynvml.c_nvmlDevice_t, pynvml.struct_c_nvmlDevice_t, gpu)
        self.module = self._build_module(has_numa_call)

    # Handles: real pointer types, told apart by the address they point at.

    def _handle(self, pointer: Any, struct: Any, target: Any) -> Any:
        body = struct()
        self._keep.append(body)
        handle = pointer(body)
        self._by_address[ctypes.addressof(body)] = target
        return handle

    def _target(self, handle: Any) -> Any:
        """What a handle points at; a NULL or unknown handle is NVML's INVALID_ARGUMENT."""
        try:
            return self._by_address[ctypes.addressof(handle.contents)]
        except (ValueError, KeyError, AttributeError, TypeError):
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT) from None

    def _gpu(self, handle: Any) -> StubGpu:
        """The GPU a handle names; a MIG device handle is refused where nvml.h takes a GPU's."""
        target = self._target(handle)
        if isinstance(target, StubMig):
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not isinstance(target, StubGpu):
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return target

    def _mig(self, handle: Any) -> StubMig:
        target = self._target(handle)
        if not isinstance(target, StubMig):
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return target

    def _gi(self, handle: Any) -> StubGi:
        target = self._target(handle)
        assert isinstance(target, StubGi)
        return target

    def owner(self, target: Any) -> StubGpu | None:
        """The GPU a handle's target belongs to."""
        if isinstance(target, StubGpu):
            return target
        for gpu in self.gpus:
            for gi in gpu.gis:
                if target is gi or any(target is c or target is c.mig for c in gi.cis):
                    return gpu
        return None

    def _gpu_of_call(self, name: str, args: tuple[Any, ...]) -> StubGpu | None:
        if name == "nvmlDeviceGetHandleByIndex" and args and isinstance(args[0], int):
            return self.gpus[args[0]] if 0 <= args[0] < len(self.gpus) else None
        if name == "nvmlDeviceGetHandleByUUID" and args:
            return next((g for g in self.gpus if g.uuid == args[0]), None)
        if args and isinstance(args[0], ctypes._Pointer):
            try:
                return self.owner(self._target(args[0]))
            except pynvml.NVMLError:
                return None
        return None

    def _profiles(self, gpu: StubGpu) -> list[catalog.MigProfile]:
        if gpu.model is None:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return list(gpu.model.profiles)

    def _profile(self, gpu: StubGpu, profile_id: int) -> catalog.MigProfile:
        found = next((p for p in self._profiles(gpu) if p.profile_id == profile_id), None)
        if found is None:
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return found

    def _build_module(self, has_numa_call: bool) -> ModuleType:
        module = ModuleType("pynvml")
        for name in dir(pynvml):
            value = getattr(pynvml, name)
            if not (callable(value) and name.startswith("nvml") and not isinstance(value, type)):
                setattr(module, name, value)
        for name in dir(self):
            if name.startswith("nvml"):
                if name == "nvmlDeviceGetNumaNodeId" and not has_numa_call:
                    continue
                setattr(module, name, self._recorded(name, getattr(self, name)))
        return module

    def _recorded(self, name: str, fn: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            gpu = self._gpu_of_call(name, args)
            if gpu is not None:
                code = gpu.errors.get(name, gpu.errors.get("*", pynvml.NVML_SUCCESS))
                if code != pynvml.NVML_SUCCESS:
                    raise _fail(code)
            return fn(*args, **kwargs)

        return call

    # The NVML functions, with pynvml's names and parameters.

    def nvmlInit(self) -> None:
        if self.library_missing:
            raise _fail(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    def nvmlShutdown(self) -> None:
        return None

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        if not 0 <= index < len(self.gpus):
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self.gpus[index].handle

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> Any:
        for gpu in self.gpus:
            if gpu.uuid == uuid:
                return gpu.handle
            for gi in gpu.gis:
                for ci in gi.cis:
                    if ci.uuid == uuid and ci.mig is not None:
                        return ci.mig.handle  # a MIG uuid names its MIG device
        raise _fail(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        target = self._target(handle)
        if isinstance(target, StubMig):
            return target.ci.uuid
        return self._gpu(handle).uuid

    def nvmlDeviceGetName(self, handle: Any) -> str:
        return self._gpu(handle).name

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: Any = None) -> Any:
        """The GPU's memory, or on a MIG device handle the MIG device's own (nvml.h: "Per-instance
        information can be queried by using specific MIG device handles")."""
        target = self._target(handle)
        mib = target.ci.memory_mib if isinstance(target, StubMig) else self._gpu(handle).memory_mib
        memory = pynvml.c_nvmlMemory_t()
        memory.total = mib << 20
        memory.used = 0
        memory.free = memory.total
        return memory

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        info = pynvml.nvmlPciInfo_t()
        info.busId = self._gpu(handle).bus_id.encode()
        return info

    def nvmlDeviceGetNumaNodeId(self, handle: Any) -> int:
        node = self._gpu(handle).numa_node
        if node is None:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return node

    def _link(self, device: Any, link: int) -> StubLink:
        gpu = self._gpu(device)
        if not gpu.links:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if link >= len(gpu.links):
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.links[link]

    def nvmlDeviceGetNvLinkState(self, device: Any, link: int) -> int:
        return (
            pynvml.NVML_FEATURE_ENABLED if self._link(device, link).active else pynvml.NVML_FEATURE_DISABLED
        )

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: Any, link: int) -> int:
        switch = self._link(handle, link).switch
        return pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH if switch else pynvml.NVML_NVLINK_DEVICE_TYPE_GPU

    def nvmlDeviceGetNvLinkRemotePciInfo(self, device: Any, link: int) -> Any:
        info = pynvml.nvmlPciInfo_t()
        info.busId = self._link(device, link).remote_bus.encode()
        return info

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, errorType: int, counterType: int) -> int:
        assert (errorType, counterType) == (
            pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            pynvml.NVML_VOLATILE_ECC,
        )
        count = self._gpu(handle).ecc_uncorrected
        if count is None:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return count

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        return self._gpu(handle).throttle_mask

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int:
        return self._gpu(handle).throttle_mask

    def nvmlDeviceGetMinorNumber(self, handle: Any) -> int:
        return self._gpu(handle).minor

    def nvmlDeviceGetComputeMode(self, handle: Any) -> int:
        return self._gpu(handle).compute_mode

    def nvmlDeviceSetComputeMode(self, handle: Any, mode: int) -> int:
        gpu = self._gpu(handle)
        if gpu.mig_current and mode == pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        gpu.compute_mode = mode
        return pynvml.NVML_SUCCESS

    def nvmlDeviceGetMigMode(self, device: Any) -> list[int]:
        gpu = self._gpu(device)
        if gpu.model is None:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return [gpu.mig_current, gpu.mig_pending]

    def nvmlDeviceSetMigMode(self, device: Any, mode: int) -> int:
        gpu = self._gpu(device)
        if gpu.model is None:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if gpu.gis:
            raise _fail(pynvml.NVML_ERROR_IN_USE)
        gpu.mig_pending = mode
        return pynvml.NVML_SUCCESS

    def nvmlDeviceGetGpuInstanceProfileInfo(self, device: Any, profile: int, version: int = 2) -> Any:
        """nvml.h: NOT_SUPPORTED "If device doesn't have MIG mode enabled or profile isn't supported"."""
        gpu = self._gpu(device)
        self._check_mig(gpu)
        found = next(
            (
                p
                for p in self._profiles(gpu)
                if getattr(pynvml, f"NVML_GPU_INSTANCE_PROFILE_{p.nvml_enum}") == profile
            ),
            None,
        )
        if found is None:
            raise _fail(
                pynvml.NVML_ERROR_NOT_SUPPORTED
                if profile < pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT
                else pynvml.NVML_ERROR_INVALID_ARGUMENT
            )
        info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
        info.id = found.profile_id
        info.sliceCount = found.compute_slices
        info.instanceCount = found.max_instances
        info.multiprocessorCount = found.multiprocessors or 0
        info.memorySizeMB = _memory_mib(found)
        info.name = f"MIG {found.name}".encode()
        return info

    def _check_mig(self, gpu: StubGpu) -> None:
        if gpu.mig_current != pynvml.NVML_DEVICE_MIG_ENABLE:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetGpuInstancePossiblePlacements(
        self, device: Any, profileId: int, placementsRef: Any, countRef: Any
    ) -> int:
        """`_v2` (what pynvml calls): "Can be NULL to discover number of allowed placements for this
        profile. If non-NULL must be large enough"; the count returns how many there are. Answered
        "regardless of whether MIG is enabled"."""
        if countRef is None:
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        profile = self._profile(self._gpu(device), profileId)
        if placementsRef is not None:
            if len(placementsRef) < len(profile.starts):
                raise _fail(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)  # real NVML would write past its end
            for i, start in enumerate(profile.starts):
                placementsRef[i].start = start
                placementsRef[i].size = profile.size
        countRef._obj.value = len(profile.starts)
        return pynvml.NVML_SUCCESS

    def nvmlDeviceCreateGpuInstanceWithPlacement(self, device: Any, profileId: int, placement: Any) -> Any:
        gpu = self._gpu(device)
        self._check_mig(gpu)
        profile = self._profile(gpu, profileId)
        start, size = placement._obj.start, placement._obj.size
        if start not in profile.starts or size != profile.size:
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if any(start < g.start + g.size and g.start < start + size for g in gpu.gis):
            raise _fail(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        if self._free_gi:
            gi_id = self._free_gi.pop(0)
        else:
            gi_id, self._next_gi = self._next_gi, self._next_gi - 1
        gi = StubGi(gi_id=gi_id, profile_id=profileId, start=start, size=size, handle=None)
        gi.handle = self._handle(pynvml.c_nvmlGpuInstance_t, pynvml.struct_c_nvmlGpuInstance_t, gi)
        gpu.gis.append(gi)
        return gi.handle

    def nvmlDeviceGetGpuInstances(
        self, device: Any, profileId: int, gpuInstancesRef: Any, countRef: Any
    ) -> int:
        gpu = self._gpu(device)
        self._check_mig(gpu)
        found = [g for g in gpu.gis if g.profile_id == profileId]
        for i, gi in enumerate(found):
            gpuInstancesRef[i] = gi.handle
        countRef._obj.value = len(found)
        return pynvml.NVML_SUCCESS

    def nvmlDeviceGetGpuInstanceById(self, device: Any, gpuInstanceId: int) -> Any:
        gpu = self._gpu(device)
        self._check_mig(gpu)
        for gi in gpu.gis:
            if gi.gi_id == gpuInstanceId:
                return gi.handle
        raise _fail(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlGpuInstanceGetInfo(self, gpuInstance: Any) -> Any:
        gi = self._gi(gpuInstance)
        info = pynvml.c_nvmlGpuInstanceInfo_t()
        info.id = gi.gi_id
        info.profileId = gi.profile_id
        info.placement.start = gi.start
        info.placement.size = gi.size
        return info

    def _gi_slices(self, gi: StubGi) -> int:
        owner = next(g for g in self.gpus if gi in g.gis)
        return self._profile(owner, gi.profile_id).compute_slices

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, device: Any, profile: int, engProfile: int, version: int = 2
    ) -> Any:
        slices = self._gi_slices(self._gi(device))
        by_enum = {e: s for s, e in _CI_ENUM_BY_SLICES.items()}
        if profile not in by_enum or by_enum[profile] > slices:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)
        info = pynvml.c_nvmlComputeInstanceProfileInfo_v2_t()
        info.id = profile
        info.sliceCount = by_enum[profile]
        info.instanceCount = slices // by_enum[profile]
        info.multiprocessorCount = 16 * by_enum[profile]
        info.name = f"MIG {by_enum[profile]}c".encode()
        return info

    def nvmlGpuInstanceCreateComputeInstance(self, gpuInstance: Any, profileId: int) -> Any:
        gi = self._gi(gpuInstance)
        gpu = next(g for g in self.gpus if gi in g.gis)
        slices = next(s for s, e in _CI_ENUM_BY_SLICES.items() if e == profileId)
        used = sum(c.slices for c in gi.cis)
        if used + slices > self._gi_slices(gi):
            raise _fail(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        taken = {c.mig_index for g in gpu.gis for c in g.cis}
        self._created += 1
        profile = self._profile(gpu, gi.profile_id)
        ci = StubCi(
            ci_id=len(gi.cis),
            profile_id=profileId,
            slices=slices,
            uuid="MIG-" + str(uuidlib.uuid5(_NS, f"{gpu.uuid}/{self._created}")),
            handle=None,
            mig_index=min(set(range(len(taken) + 1)) - taken),
            memory_mib=_memory_mib(profile) * slices // profile.compute_slices,
        )
        ci.handle = self._handle(pynvml.c_nvmlComputeInstance_t, pynvml.struct_c_nvmlComputeInstance_t, ci)
        ci.mig = StubMig(ci)
        ci.mig.handle = self._handle(pynvml.c_nvmlDevice_t, pynvml.struct_c_nvmlDevice_t, ci.mig)
        gi.cis.append(ci)
        return ci.handle

    def nvmlGpuInstanceGetComputeInstances(
        self, gpuInstance: Any, profileId: int, computeInstancesRef: Any, countRef: Any
    ) -> int:
        found = [c for c in self._gi(gpuInstance).cis if c.profile_id == profileId]
        for i, ci in enumerate(found):
            computeInstancesRef[i] = ci.handle
        countRef._obj.value = len(found)
        return pynvml.NVML_SUCCESS

    def nvmlComputeInstanceGetInfo(self, computeInstance: Any) -> Any:
        ci = self._target(computeInstance)
        assert isinstance(ci, StubCi) and ci.mig is not None
        info = pynvml.c_nvmlComputeInstanceInfo_t()
        gpu = self.owner(ci)
        assert gpu is not None
        if self.reading == DRA:
            info.device = ci.mig.handle
        elif self.reading == HEADER:
            info.device = gpu.handle
        gi = next(g for g in gpu.gis if ci in g.cis)
        info.gpuInstance = gi.handle
        info.id = ci.ci_id
        info.profileId = ci.profile_id
        return info

    def nvmlComputeInstanceDestroy(self, computeInstance: Any) -> int:
        ci = self._target(computeInstance)
        for gpu in self.gpus:
            for gi in gpu.gis:
                if ci in gi.cis:
                    if gi.busy:
                        raise _fail(pynvml.NVML_ERROR_IN_USE)
                    gi.cis.remove(ci)
        return pynvml.NVML_SUCCESS

    def nvmlGpuInstanceDestroy(self, gpuInstance: Any) -> int:
        gi = self._gi(gpuInstance)
        if gi.cis or gi.busy:
            raise _fail(pynvml.NVML_ERROR_IN_USE)
        for gpu in self.gpus:
            if gi in gpu.gis:
                gpu.gis.remove(gi)
        self._free_gi = sorted([*self._free_gi, gi.gi_id])
        return pynvml.NVML_SUCCESS

    # MIG devices (nvml.h, "Multi Instance GPU Management").

    def nvmlDeviceIsMigDeviceHandle(self, device: Any) -> Any:
        return ctypes.c_uint(int(isinstance(self._target(device), StubMig)))

    def nvmlDeviceGetMaxMigDeviceCount(self, device: Any) -> int:
        """ "Returns zero if MIG is not supported or enabled"."""
        gpu = self._gpu(device)
        if gpu.model is None or gpu.mig_current != pynvml.NVML_DEVICE_MIG_ENABLE:
            return 0
        return gpu.model.compute_slices

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: Any, index: int) -> Any:
        """INVALID_ARGUMENT past the last index, NOT_FOUND "if no valid MIG device was found at index"."""
        gpu = self._gpu(device)
        if not 0 <= index < self.nvmlDeviceGetMaxMigDeviceCount(device):
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        for gi in gpu.gis:
            for ci in gi.cis:
                if ci.mig_index == index and ci.mig is not None:
                    return pynvml.c_nvmlDevice_t(ci.mig.handle.contents)  # a new handle object, as pynvml's
        raise _fail(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetGpuInstanceId(self, device: Any) -> int:
        mig = self._mig(device)
        gpu = self.owner(mig)
        assert gpu is not None
        return next(g.gi_id for g in gpu.gis if mig.ci in g.cis)

    def nvmlDeviceGetComputeInstanceId(self, device: Any) -> int:
        return self._mig(device).ci.ci_id

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, migDevice: Any) -> Any:
        mig = self._target(migDevice)
        if not isinstance(mig, StubMig):
            raise _fail(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        gpu = self.owner(mig)
        assert gpu is not None
        return gpu.handle


def _memory_mib(profile: catalog.MigProfile) -> int:
    """A profile's memory as `-lgip` prints it (GiB with two decimals), in MiB."""
    return int(profile.memory_gib * 1024)


def h100(index: int, *, mig: bool = False, **kw: Any) -> StubGpu:
    """An H100 80GB HBM3 as NVML describes one."""
    return StubGpu(
        uuid=f"GPU-{index:08d}-0000-0000-0000-000000000000",
        name="NVIDIA H100 80GB HBM3",
        memory_mib=81559,
        bus_id=f"00000000:{0x18 + index:02X}:00.0",
        model=catalog.get_model("H100-80GB"),
        mig_current=int(mig),
        mig_pending=int(mig),
        minor=index,
        **kw,
    )


def l40s(index: int, **kw: Any) -> StubGpu:
    """An L40S: no MIG mode at all (NVML answers NOT_SUPPORTED)."""
    return StubGpu(
        uuid=f"GPU-{index:08d}-1111-0000-0000-000000000000",
        name="NVIDIA L40S",
        memory_mib=46068,
        bus_id=f"00000000:{0x40 + index:02X}:00.0",
        **kw,
    )
