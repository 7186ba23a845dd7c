"""bcd's reading of this node's GPUs against nvidia-smi's, field by field: for the day a GPU is lent.

It reads the GPUs through bcd's NVML backend in this process (`NvmlBackend`, the reading
`bcd inventory --json --nvml real` prints, with the fields the report leaves out: PCI bus id, device
minor, compute mode, each MIG device's memory, each profile's possible placements) and through
NVIDIA's own tool, then prints every field on which the two disagree:

- `nvidia-smi -q -x`: each GPU's uuid, product name, memory, PCI bus id, minor number, compute mode,
  MIG mode (current and pending), and its MIG devices (index, GPU and compute instance ids, memory);
- `nvidia-smi -L`: GPU indexes and each MIG device's `MIG-…` uuid and profile;
- `nvidia-smi mig -lgi`: each GPU instance's profile, id and placement (start:size);
- `nvidia-smi mig -lgip` and `-lgipp`: each GPU-instance profile (id, instances, memory, SMs) and
  its placements, which are also held to NVML's possible placements and to the GPU catalog's.

It only reads: the commands it runs are `READ_ONLY_COMMANDS` and nothing else (a command outside
them is refused before it runs), and of NVML it makes only queries. It never changes MIG mode,
creates or destroys an instance, or resets a GPU, so it is safe on a node in service. Run it as
root: MIG instances and placements are refused to other users.

    python bench/gpu_check.py            # everything above
    python bench/gpu_check.py --quick    # GPUs and MIG instances; no profiles or placements

Exit status: 0 when nothing differs, 1 when something does, 2 when nvidia-smi or NVML is missing.
The last line is one JSON object: {"gpus": N, "mig_instances": N, "profiles": N, "differences": N, ...}.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from better_compute.bcd.gpu import Gpu, GpuError, NvmlUnavailable
from better_compute.bcd.nvml import InstanceProfile
from better_compute.domain.catalog import model_for_product, normalize_profile_name

READ_ONLY_COMMANDS: tuple[tuple[str, ...], ...] = (
    ("nvidia-smi", "-q", "-x"),
    ("nvidia-smi", "-L"),
    ("nvidia-smi", "mig", "-lgi"),
    ("nvidia-smi", "mig", "-lgip"),
    ("nvidia-smi", "mig", "-lgipp"),
)
"""Every command this script may run: each only lists."""

NO_MIG = ("No MIG-enabled devices found", "No GPU instances found")
"""What `nvidia-smi mig -l…` says (with a non-zero status) where there is nothing to list."""

Runner = Callable[[Sequence[str]], subprocess.CompletedProcess[str]]


class Backend(Protocol):
    """What the check needs of bcd's NVML backend (`NvmlBackend`): only its reading calls."""

    unreadable: tuple[str, ...]

    def list_gpus(self) -> tuple[Gpu, ...]: ...

    def instance_profiles(self, gpu: str) -> tuple[InstanceProfile, ...]: ...

    def close(self) -> None: ...


class ToolMissing(Exception):
    """nvidia-smi or NVML is not on this machine."""


def run_command(command: Sequence[str]) -> subprocess.CompletedProcess[str]:  # pragma: no cover - needs a GPU
    return subprocess.run(list(command), capture_output=True, text=True, check=False, timeout=120)


def nvml_backend() -> Backend:  # pragma: no cover - needs a GPU
    from better_compute.bcd.nvml import NvmlBackend

    return NvmlBackend()


# nvidia-smi's outputs, parsed


@dataclass(frozen=True)
class SmiMig:
    index: int
    gi_id: int
    ci_id: int
    memory_mib: int | None
    uuid: str | None = None
    profile: str | None = None


@dataclass
class SmiGpu:
    uuid: str
    name: str
    pci_bus_id: str
    memory_mib: int | None
    minor_number: int | None
    compute_mode: str | None
    mig_current: bool | None
    """None: nvidia-smi says N/A, a GPU without MIG."""
    mig_pending: bool | None
    migs: list[SmiMig] = field(default_factory=list)
    index: int | None = None


@dataclass(frozen=True)
class SmiGi:
    gi_id: int
    profile: str
    profile_id: int
    start: int
    size: int


@dataclass(frozen=True)
class SmiProfile:
    profile: str
    profile_id: int
    total: int
    memory_gib: float
    multiprocessors: int


def _value(element: ET.Element, path: str) -> str | None:
    found = element.find(path)
    text = None if found is None or found.text is None else found.text.strip()
    return None if text in (None, "", "N/A") else text


def _mib(text: str | None) -> int | None:
    match = re.fullmatch(r"(\d+)\s*MiB", text or "")
    return int(match[1]) if match else None


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


def _mig_mode(text: str | None) -> bool | None:
    return None if text is None else text.lower() == "enabled"


def parse_query(xml_text: str) -> list[SmiGpu]:
    """`nvidia-smi -q -x` (nvsmi_device_v12.dtd): one `<gpu id="<bus id>">` per GPU."""
    gpus = []
    for element in ET.fromstring(xml_text).findall("gpu"):
        migs = [
            SmiMig(
                index=_int(_value(m, "index")) or 0,
                gi_id=_int(_value(m, "gpu_instance_id")) or 0,
                ci_id=_int(_value(m, "compute_instance_id")) or 0,
                memory_mib=_mib(_value(m, "fb_memory_usage/total")),
            )
            for m in element.findall("mig_devices/mig_device")
        ]
        mode = _value(element, "compute_mode")
        gpus.append(
            SmiGpu(
                uuid=_value(element, "uuid") or "",
                name=_value(element, "product_name") or "",
                pci_bus_id=_value(element, "pci/pci_bus_id") or element.get("id") or "",
                memory_mib=_mib(_value(element, "fb_memory_usage/total")),
                minor_number=_int(_value(element, "minor_number")),
                compute_mode=None if mode is None else mode.lower().replace("_", "-"),
                mig_current=_mig_mode(_value(element, "mig_mode/current_mig")),
                mig_pending=_mig_mode(_value(element, "mig_mode/pending_mig")),
                migs=migs,
            )
        )
    return gpus


_L_GPU = re.compile(r"^GPU (?P<index>\d+): (?P<name>.*) \(UUID: (?P<uuid>GPU-[^)]+)\)$")
_L_MIG = re.compile(r"^\s+MIG (?P<profile>\S+)\s+Device\s+(?P<index>\d+): \(UUID: (?P<uuid>MIG-[^)]+)\)$")


def parse_list(text: str) -> dict[str, tuple[int, dict[int, tuple[str, str]]]]:
    """`nvidia-smi -L`: by GPU uuid, (its index, {MIG device index: (profile, MIG uuid)})."""
    found: dict[str, tuple[int, dict[int, tuple[str, str]]]] = {}
    current: dict[int, tuple[str, str]] | None = None
    for line in text.splitlines():
        if gpu := _L_GPU.match(line):
            current = {}
            found[gpu["uuid"]] = (int(gpu["index"]), current)
        elif (mig := _L_MIG.match(line)) and current is not None:
            current[int(mig["index"])] = (normalize_profile_name(mig["profile"]), mig["uuid"])
    return found


_LGI = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+MIG\s+(?P<profile>\S+)\s+(?P<id>\d+)\s+(?P<gi>\d+)\s+(?P<start>\d+):(?P<size>\d+)\s*\|$"
)
_LGIP = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+MIG\s+(?P<profile>\S+)\s+(?P<id>\d+)\s+(?P<free>\d+)/(?P<total>\d+)\s+"
    r"(?P<gib>[\d.]+)\s+(?P<p2p>\S+)\s+(?P<sm>\d+)\s+\d+\s+\d+\s*\|$"
)
_LGIPP = re.compile(
    r"^GPU\s+(?P<gpu>\d+)\s+Profile ID\s+(?P<id>\d+)\s+Placements?\s*:\s*"
    r"\{(?P<starts>[\d,\s]*)\}:(?P<size>\d+)\s*$"
)


def parse_lgi(text: str) -> dict[int, list[SmiGi]]:
    """`nvidia-smi mig -lgi`: by GPU index, its GPU instances."""
    found: dict[int, list[SmiGi]] = {}
    for line in text.splitlines():
        if row := _LGI.match(line.strip()):
            found.setdefault(int(row["gpu"]), []).append(
                SmiGi(
                    gi_id=int(row["gi"]),
                    profile=normalize_profile_name(row["profile"]),
                    profile_id=int(row["id"]),
                    start=int(row["start"]),
                    size=int(row["size"]),
                )
            )
    return found


def parse_lgip(text: str) -> dict[int, dict[int, SmiProfile]]:
    """`nvidia-smi mig -lgip`: by GPU index, its profiles by id (each row's second line, CE/JPEG/OFA,
    is not read)."""
    found: dict[int, dict[int, SmiProfile]] = {}
    for line in text.splitlines():
        if row := _LGIP.match(line.strip()):
            found.setdefault(int(row["gpu"]), {})[int(row["id"])] = SmiProfile(
                profile=normalize_profile_name(row["profile"]),
                profile_id=int(row["id"]),
                total=int(row["total"]),
                memory_gib=float(row["gib"]),
                multiprocessors=int(row["sm"]),
            )
    return found


def parse_lgipp(text: str) -> dict[int, dict[int, tuple[tuple[int, ...], int]]]:
    """`nvidia-smi mig -lgipp`: by GPU index, each profile id's (placement starts, size); one placement
    is printed `Placement :`, several `Placements:`."""
    found: dict[int, dict[int, tuple[tuple[int, ...], int]]] = {}
    for line in text.splitlines():
        if row := _LGIPP.match(line.strip()):
            starts = tuple(int(s) for s in row["starts"].replace(" ", "").split(",") if s)
            found.setdefault(int(row["gpu"]), {})[int(row["id"])] = (starts, int(row["size"]))
    return found


# Comparing


def _placements(starts: Sequence[int], size: int) -> str:
    return "{" + ",".join(str(s) for s in starts) + f"}}:{size}"


def _nvml_placements(profile: InstanceProfile) -> str:
    sizes = {size for _, size in profile.placements}
    if len(sizes) > 1:
        return ", ".join(f"{start}:{size}" for start, size in profile.placements)
    return _placements([start for start, _ in profile.placements], sizes.pop() if sizes else 0)


@dataclass
class Check:
    """What was compared and what differed."""

    differences: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    fields: int = 0
    gpus: int = 0
    mig_instances: int = 0
    profiles: int = 0

    def same(self, where: str, what: str, bcd: object, smi: object, other: str = "nvidia-smi") -> None:
        self.fields += 1
        if bcd != smi:
            self.differences.append(f"{where}: {what}: bcd {bcd!r}, {other} {smi!r}")


def compare_gpu(check: Check, gpu: Gpu, smi: SmiGpu, lgi: list[SmiGi]) -> None:
    where = f"GPU {gpu.index} {gpu.uuid}"
    check.same(where, "index", gpu.index, smi.index)
    check.same(where, "product name", gpu.name, smi.name)
    check.same(where, "memory MiB", gpu.memory_mib, smi.memory_mib)
    check.same(where, "PCI bus id", gpu.pci_bus_id.upper(), smi.pci_bus_id.upper())
    check.same(where, "minor number", gpu.minor_number, smi.minor_number)
    check.same(where, "compute mode", gpu.compute_mode, smi.compute_mode)
    check.same(where, "MIG mode current", gpu.mig_current if gpu.mig_capable else None, smi.mig_current)
    check.same(where, "MIG mode pending", gpu.mig_pending if gpu.mig_capable else None, smi.mig_pending)
    check.notes.extend(f"{where}: bcd says unhealthy: {p}" for p in gpu.health.problems)
    check.differences.extend(f"{where}: bcd left out {u}" for u in gpu.unlisted)

    ours = {gi.gi_id: gi for gi in gpu.instances}
    theirs = {gi.gi_id: gi for gi in lgi}
    for gi_id in sorted(ours.keys() | theirs.keys()):
        at = f"{where} GPU instance {gi_id}"
        if gi_id not in theirs:
            check.differences.append(f"{at}: bcd lists it, nvidia-smi mig -lgi does not")
            continue
        if gi_id not in ours:
            check.differences.append(
                f"{at}: nvidia-smi mig -lgi lists it ({theirs[gi_id].profile}), bcd does not"
            )
            continue
        mine, smi_gi = ours[gi_id], theirs[gi_id]
        check.same(at, "profile", mine.profile, smi_gi.profile)
        check.same(at, "profile id", mine.profile_id, smi_gi.profile_id)
        check.same(
            at, "placement", f"{mine.placement_start}:{mine.placement_size}", f"{smi_gi.start}:{smi_gi.size}"
        )

    ours_ci = {(gi.gi_id, ci.ci_id): (gi, ci) for gi in gpu.instances for ci in gi.compute_instances}
    theirs_ci = {(m.gi_id, m.ci_id): m for m in smi.migs}
    for key in sorted(ours_ci.keys() | theirs_ci.keys()):
        at = f"{where} MIG device GI {key[0]} CI {key[1]}"
        if key not in theirs_ci:
            check.differences.append(f"{at}: bcd lists it, nvidia-smi does not")
            continue
        if key not in ours_ci:
            check.differences.append(f"{at}: nvidia-smi lists it ({theirs_ci[key].uuid}), bcd does not")
            continue
        check.mig_instances += 1
        (gi, ci), m = ours_ci[key], theirs_ci[key]
        check.same(at, "MIG uuid", ci.uuid, m.uuid)
        check.same(at, "memory MiB", ci.memory_mib, m.memory_mib)
        profile = gi.profile if ci.slices >= gi.slices else f"{ci.slices}c.{gi.profile}"
        check.same(at, "profile", profile, m.profile)


def compare_profiles(
    check: Check,
    gpu: Gpu,
    nvml: Sequence[InstanceProfile],
    lgip: dict[int, SmiProfile],
    lgipp: dict[int, tuple[tuple[int, ...], int]],
) -> None:
    where = f"GPU {gpu.index} {gpu.uuid}"
    ours = {p.profile_id: p for p in nvml}
    model = model_for_product(gpu.name)
    if model is None:
        check.notes.append(f"{where}: the catalog has no model for {gpu.name!r}: placements not held to it")
    for profile_id in sorted(ours.keys() | lgip.keys() | lgipp.keys()):
        at = f"{where} profile {profile_id}"
        mine, listed, placed = ours.get(profile_id), lgip.get(profile_id), lgipp.get(profile_id)
        if mine is None or listed is None or placed is None:
            sources = [n for n, v in (("NVML", mine), ("-lgip", listed), ("-lgipp", placed)) if v is not None]
            check.differences.append(f"{at}: only {', '.join(sources)} list it")
            continue
        check.profiles += 1
        check.same(at, "name", mine.profile, listed.profile, "nvidia-smi mig -lgip")
        check.same(at, "instances", mine.max_instances, listed.total, "nvidia-smi mig -lgip")
        check.same(
            at, "memory GiB", round(mine.memory_mib / 1024, 2), listed.memory_gib, "nvidia-smi mig -lgip"
        )
        check.same(at, "SMs", mine.multiprocessors, listed.multiprocessors, "nvidia-smi mig -lgip")
        smi_placements = _placements(*placed)
        check.same(at, "placements", _nvml_placements(mine), smi_placements, "nvidia-smi mig -lgipp")
        if model is not None:
            known = model.profile_by_id(profile_id)
            if known is None:
                check.differences.append(f"{at}: the catalog's {model.id} has no profile {profile_id}")
                continue
            check.same(at, "name (catalog)", known.name, listed.profile, "nvidia-smi mig -lgip")
            check.same(
                at,
                "placements (catalog)",
                _placements(known.starts, known.size),
                smi_placements,
                "nvidia-smi mig -lgipp",
            )


def _smi(run: Runner, command: tuple[str, ...], check: Check) -> str:
    """A read-only command's output; a command outside `READ_ONLY_COMMANDS` is refused unrun."""
    if command not in READ_ONLY_COMMANDS:
        raise ValueError(f"not a read-only command: {' '.join(command)}")
    try:
        result = run(command)
    except FileNotFoundError as exc:
        raise ToolMissing(f"{command[0]} is not installed (or not on PATH): {exc}") from exc
    out = result.stdout or ""
    if result.returncode != 0 and not any(n in out + (result.stderr or "") for n in NO_MIG):
        lines = ((result.stderr or "") + out).strip().splitlines()
        check.differences.append(
            f"{' '.join(command)} failed (exit {result.returncode}): {lines[-1] if lines else 'no output'}"
        )
    return out


def check_node(backend: Backend, run: Runner, *, quick: bool = False) -> Check:
    """Read the GPUs both ways and compare them; `backend` is only read, then closed."""
    check = Check()
    try:
        gpus = backend.list_gpus()
        profiles = {} if quick else {g.uuid: backend.instance_profiles(g.uuid) for g in gpus if g.mig_current}
        check.notes.extend(f"bcd: {line}" for line in backend.unreadable)
    finally:
        backend.close()
    try:
        query = parse_query(_smi(run, ("nvidia-smi", "-q", "-x"), check))
    except ET.ParseError as exc:
        check.differences.append(f"nvidia-smi -q -x printed no XML this script can read: {exc}")
        query = []
    listed = parse_list(_smi(run, ("nvidia-smi", "-L"), check))
    lgi = parse_lgi(_smi(run, ("nvidia-smi", "mig", "-lgi"), check))
    lgip: dict[int, dict[int, SmiProfile]] = {}
    lgipp: dict[int, dict[int, tuple[tuple[int, ...], int]]] = {}
    if not quick:
        lgip = parse_lgip(_smi(run, ("nvidia-smi", "mig", "-lgip"), check))
        lgipp = parse_lgipp(_smi(run, ("nvidia-smi", "mig", "-lgipp"), check))
    smi_by_uuid = {g.uuid: g for g in query}
    for smi in query:
        index, migs = listed.get(smi.uuid, (None, {}))
        smi.index = index
        for position, mig in enumerate(smi.migs):
            profile, mig_uuid = migs.get(mig.index, (None, None))
            smi.migs[position] = replace(mig, uuid=mig_uuid, profile=profile)
    ours = {g.uuid: g for g in gpus}
    for uuid in sorted(ours.keys() - smi_by_uuid.keys()):
        check.differences.append(f"GPU {uuid}: bcd lists it, nvidia-smi -q does not")
    for uuid in sorted(smi_by_uuid.keys() - ours.keys()):
        check.differences.append(f"GPU {uuid}: nvidia-smi -q lists it, bcd does not")
    for gpu in gpus:
        smi_gpu = smi_by_uuid.get(gpu.uuid)
        if smi_gpu is None:
            continue
        check.gpus += 1
        index = smi_gpu.index if smi_gpu.index is not None else -1
        compare_gpu(check, gpu, smi_gpu, lgi.get(index, []))
        if not quick and gpu.mig_current:
            compare_profiles(
                check, gpu, profiles.get(gpu.uuid, ()), lgip.get(index, {}), lgipp.get(index, {})
            )
    return check


def main(
    argv: Sequence[str] | None = None,
    *,
    backend: Callable[[], Backend] = nvml_backend,
    run: Runner = run_command,
    out: Any = None,
) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="GPUs and MIG instances only: no profiles or placements"
    )
    args = parser.parse_args(argv)
    stream = out if out is not None else sys.stdout
    summary: dict[str, Any] = {
        "gpus": 0,
        "mig_instances": 0,
        "profiles": 0,
        "differences": 0,
        "quick": args.quick,
    }
    try:
        check = check_node(backend(), run, quick=args.quick)
    except (ToolMissing, NvmlUnavailable) as exc:
        print(f"missing: {exc}", file=stream)
        print(json.dumps({**summary, "missing": str(exc)}), file=stream)
        return 2
    except GpuError as exc:
        print(f"bcd could not read the GPUs: {exc}", file=stream)
        print(json.dumps({**summary, "differences": 1, "error": str(exc)}), file=stream)
        return 1
    for line in check.notes:
        print(f"note: {line}", file=stream)
    for line in check.differences:
        print(f"differs: {line}", file=stream)
    print(
        f"{check.gpus} GPUs, {check.mig_instances} MIG devices, {check.profiles} profiles: "
        f"{check.fields} fields compared, {len(check.differences)} differ",
        file=stream,
    )
    summary.update(
        gpus=check.gpus,
        mig_instances=check.mig_instances,
        profiles=check.profiles,
        fields=check.fields,
        differences=len(check.differences),
    )
    print(json.dumps(summary), file=stream)
    return 1 if check.differences else 0


if __name__ == "__main__":
    sys.exit(main())
