"""A stand-in for `pynvml` that needs no GPU: the real package's constants, structs, handle types and
error classes, with its NVML functions replaced by ones that answer from simulated GPUs.

Every function has the real one's name and parameters (tests/bcd/test_nvml.py holds them to
`inspect.signature` of the installed package) and returns what the real one returns: ctypes structs
of the real types (`c_nvmlGpuInstanceInfo_t`, `nvmlPciInfo_t`...), handles as the real pointer types,
`str` from the calls pynvml decorates, and results written into the caller's ctypes arrays and
counters. Errors are the real `pynvml.NVMLError` subclasses. `calls` records each function called.
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


def _fail(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


@dataclass
class StubCi:
    ci_id: int
    profile_id: int
    slices: int
    uuid: str
    handle: Any
    mig_handle: Any


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


class StubNvml:
    """Simulated GPUs and the `pynvml` module answering for them (`module`)."""

    def __init__(
        self, gpus: list[StubGpu], *, library_missing: bool = False, has_numa_call: bool = True
    ) -> None:
        self.gpus = gpus
        self.calls: list[str] = []
        self.library_missing = library_missing
        self._by_address: dict[int, Any] = {}
        self._keep: list[Any] = []
        self._next_gi = 13  # GPU instance ids bear no relation to placements, as on real GPUs
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
        return self._by_address[ctypes.addressof(handle.contents)]

    def _gpu(self, handle: Any) -> StubGpu:
        target = self._target(handle)
        assert isinstance(target, StubGpu)
        return target

    def _gi(self, handle: Any) -> StubGi:
        target = self._target(handle)
        assert isinstance(target, StubGi)
        return target

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
        raise _fail(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        target = self._target(handle)
        return str(target.uuid)

    def nvmlDeviceGetName(self, handle: Any) -> str:
        return self._gpu(handle).name

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: Any = None) -> Any:
        memory = pynvml.c_nvmlMemory_t()
        memory.total = self._gpu(handle).memory_mib << 20
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
        gpu = self._gpu(device)
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
        info.memorySizeMB = int(found.memory_gib * 1024)
        info.name = f"MIG {found.name}".encode()
        return info

    def _check_mig(self, gpu: StubGpu) -> None:
        if gpu.mig_current != pynvml.NVML_DEVICE_MIG_ENABLE:
            raise _fail(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetGpuInstancePossiblePlacements(
        self, device: Any, profileId: int, placementsRef: Any, countRef: Any
    ) -> int:
        profile = self._profile(self._gpu(device), profileId)
        countRef._obj.value = len(profile.starts)
        if placementsRef is not None:
            for i, start in enumerate(profile.starts):
                placementsRef[i].start = start
                placementsRef[i].size = profile.size
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
        gi = StubGi(gi_id=self._next_gi, profile_id=profileId, start=start, size=size, handle=None)
        self._next_gi -= 1
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
        slices = next(s for s, e in _CI_ENUM_BY_SLICES.items() if e == profileId)
        used = sum(c.slices for c in gi.cis)
        if used + slices > self._gi_slices(gi):
            raise _fail(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        mig = "MIG-" + str(uuidlib.uuid5(_NS, f"{gi.gi_id}/{len(gi.cis)}/{gi.start}"))
        ci = StubCi(
            ci_id=len(gi.cis), profile_id=profileId, slices=slices, uuid=mig, handle=None, mig_handle=None
        )
        ci.handle = self._handle(pynvml.c_nvmlComputeInstance_t, pynvml.struct_c_nvmlComputeInstance_t, ci)
        ci.mig_handle = self._handle(pynvml.c_nvmlDevice_t, pynvml.struct_c_nvmlDevice_t, ci)
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
        assert isinstance(ci, StubCi)
        info = pynvml.c_nvmlComputeInstanceInfo_t()
        info.device = ci.mig_handle
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
        return pynvml.NVML_SUCCESS


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
