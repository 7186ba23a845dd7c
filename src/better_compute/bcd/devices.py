"""The devices converger: hand each assignment of the node's spec its devices, and take them back.

An assignment names atoms; the node resolves each to a device from what its own GPUs show now (the
spec's `NVIDIA_VISIBLE_DEVICES` is the server's view, which may lag a repartition): a `gpu.mig` atom
to its MIG instance's `MIG-…` uuid, matched by GPU uuid and the instance's shape, its profile and
placement (`domain.fleet.atoms.mig_key`, never the driver's GI/CI ids, which another slice can have
after a reboot or a re-partition: such a slice is another atom and is never handed for this one), a
whole GPU or a slot to the GPU's uuid. An atom with no device yet (an instance not created) leaves
its allocation `device-missing`, tried again on the next pass; so does one the node cannot name the
device nodes or driver files of (`bcd.node_tree.Unresolvable`: a GPU with no minor, an instance
with no mig-minors line), since a spec that lacks a node gives a container nothing it can use.
`domain.ledger.handoff.refusals` keeps the whole-against-part rule on the node; a refused
allocation gets nothing. A bound allocation has a CDI spec under the CDI root
(`bcd.container_edits`: its device nodes, the driver, its environment) and an env file under the
state directory; the env files are the record of what is handed over, so a restarted daemon knows
it without asking anyone. Each pass compares the spec it would write with the one on disk and
writes it again where they differ (a re-cut gave the instance another capability minor, a driver
upgrade changed its libraries, a reboot emptied the CDI root).

A bound allocation whose device is gone (a reboot took its MIG instance: the GPU came back MIG-off
or at another layout) is what the hardware says, not an error: its CDI spec and env file are
withdrawn at once, so no container starts on a device that is not there, and it is `device-missing`
(a `<allocation>.lost` marker beside the env files keeps the why across a restart) until its
instance is back, when it is handed over again like any other.

Not knowing is not gone. A bound allocation keeps its last spec and env file, untouched, while the
node cannot tell (logged `cdi.kept` once per reason; the pass is not settled, so it is looked at
again): when an atom of it is on a GPU whose MIG state NVML did not read whole (`Gpu.partial`: NVML
refused its MIG mode, its instances or their MIG devices), which the converger tells by the atoms it
last saw on that GPU while it read whole (kept in memory: a daemon restarted meanwhile has never
seen them, and withdraws, the safe side); and when the node cannot name what any device needs
(`Unresolvable.node_wide`: the driver's files, the mig-minors table or the nvidia-ctk spec unread,
`nvidia-uvm` not loaded yet). A reason that is the allocation's own (its GPU has no minor, its
instance no mig-minors line) withdraws it. An allocation not bound yet is `device-missing` either
way.

Between tenants (`bcd.scrub`): an atom released in a pool whose spec says `scrub` is scrubbed at
once and reported `ScrubDone`; an allocation whose atoms still hold another tenant's data is not
handed over (it stays pending) until that scrub has succeeded.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from better_compute.bcd import cdi
from better_compute.bcd.container_edits import UUIDS, container_edits
from better_compute.bcd.gpu import Gpu, GpuError
from better_compute.bcd.inventory import mig_instances
from better_compute.bcd.logs import Log
from better_compute.bcd.mps import MpsPaths, client_env
from better_compute.bcd.node_tree import NodeTree, NodeView, Unresolvable
from better_compute.bcd.scrub import Scrubber, Target
from better_compute.domain.fleet.atoms import atom_id_for, legacy_mig_key, mig_atom_key
from better_compute.domain.fleet.pools import mps_units
from better_compute.domain.gate.node_spec import VISIBLE_DEVICES
from better_compute.domain.ledger.handoff import Held, refusals
from better_compute.wire.nodes import AssignmentPublic, NodeSpecPublic

SLOT_MODES = ("timeslice", "mps")
"""Pools whose GPUs are booked in slots."""

SCRUB_REPORT_ATOMS = 1024
"""The most atoms one `ScrubDone` report names (the server's limit)."""


def slots_of(spec: NodeSpecPublic) -> int:
    """How many slots each GPU of the node is booked in (0 outside timeslice and mps pools)."""
    return spec.sharing.replicas if spec.sharing.mode in SLOT_MODES else 0


@dataclass(frozen=True, slots=True)
class Device:
    """What one atom of this node is on the hardware now."""

    atom_id: str
    gpu_uuid: str
    whole: bool
    uuid: str
    """What `NVIDIA_VISIBLE_DEVICES` names: the `MIG-…` uuid of a MIG atom, else the GPU's."""
    slot: bool = False
    gi_id: int | None = None
    """The GPU instance of a MIG atom (None for a whole GPU or a slot)."""
    ci_id: int | None = None
    """The compute instance of a MIG atom."""
    minor: int | None = None
    """The GPU's device minor (`/dev/nvidia<minor>`); None where the backend did not say."""


def legacy_ids(gpus: Iterable[Gpu]) -> dict[str, str]:
    """{the id a MIG atom had before atoms were named by their slice (`mig:<gi>.<ci>`, the driver's
    ids): its id now}, for the instances the GPUs have now. A scrub record written by a daemon of
    that time names its atoms so; read under the new ids, an atom left unclean then would go to the
    next tenant unscrubbed. An instance now at a recorded pair of ids takes the record: at worst it
    is scrubbed once more than needed, never handed over unclean."""
    aliases: dict[str, str] = {}
    for gpu in gpus:
        if gpu.mig_current:
            for gi in gpu.instances:
                for m in mig_instances(gi):
                    legacy = atom_id_for(gpu.uuid, legacy_mig_key(m.gi_id, m.ci_id))
                    aliases[legacy] = atom_id_for(gpu.uuid, mig_atom_key(m))
    return aliases


def device_index(gpus: Iterable[Gpu], slots: int) -> dict[str, Device]:
    """Every atom id this node's GPUs can answer for now, derived as the server derives them
    (`domain.fleet.atoms.atom_id_for`): the whole GPU, each MIG device while MIG mode is on, and `slots`
    slots of each GPU (a timeslice or mps pool's replicas; 0 elsewhere)."""
    index: dict[str, Device] = {}
    for gpu in gpus:
        whole = atom_id_for(gpu.uuid, "gpu")
        index[whole] = Device(whole, gpu.uuid, True, gpu.uuid, minor=gpu.minor_number)
        if gpu.mig_current:
            for gi in gpu.instances:
                for m in mig_instances(gi):
                    atom = atom_id_for(gpu.uuid, mig_atom_key(m))
                    index[atom] = Device(
                        atom, gpu.uuid, False, m.uuid, gi_id=m.gi_id, ci_id=m.ci_id, minor=gpu.minor_number
                    )
        for slot in range(slots):
            atom = atom_id_for(gpu.uuid, f"slot:{slot}")
            index[atom] = Device(atom, gpu.uuid, False, gpu.uuid, slot=True, minor=gpu.minor_number)
    return index


@dataclass
class DevicesPass:
    """What one pass did: the reports to send, the GPUs a bound allocation uses, and whether
    every assignment got its devices or a final answer (`refused`)."""

    reports: list[dict[str, Any]] = field(default_factory=list)
    held_gpus: set[str] = field(default_factory=set)
    settled: bool = True


def _resolved(a: AssignmentPublic, index: dict[str, Device]) -> list[Device]:
    return [index[atom] for atom in a.atoms if atom in index]


def _gpu_atoms(index: dict[str, Device], gpus: Iterable[Gpu]) -> dict[str, dict[str, Device]]:
    """{GPU uuid: {atom id: device}} of the GPUs read whole, from the pass's index."""
    whole: dict[str, dict[str, Device]] = {g.uuid: {} for g in gpus if not g.partial}
    for atom, device in index.items():
        if device.gpu_uuid in whole:
            whole[device.gpu_uuid][atom] = device
    return whole


def _unread_reason(atoms: Sequence[str], unread: dict[str, Device]) -> str:
    gpus = ", ".join(sorted({unread[atom].gpu_uuid for atom in atoms}))
    return (
        f"the MIG state of GPU {gpus} is not read whole (its health says why), so whether atoms"
        f" {', '.join(atoms)} are there is unknown"
    )


@dataclass(frozen=True, slots=True)
class Handover:
    """What an allocation is to be handed: its CDI `containerEdits`, its env file's text, and, for an
    MPS slot, the directories its container mounts from the MPS daemon."""

    edits: dict[str, Any]
    env_text: str
    mps: MpsPaths | None = None


class DevicesConverger:
    """Keeps the CDI specs (under `cdi_root`) and env files (under `env_dir`) equal to the spec's
    assignments; `mps` is where the node's MPS daemon meets its clients, for slots of an mps pool;
    `node` is the node's driver tree (`/` on a GPU node), which the specs' host paths name.

    `node_name`, when given, is written in each spec (`cdi.node_of`), and a spec another node wrote
    under the same name is neither overwritten nor removed (logged `cdi.other-node`): where nodes
    share a CDI directory, an endpoint copy that moved keeps its allocation id, and the node it left
    must not take the spec of the node it joined. The node it joined waits (`device-missing`) while
    the one it left still has its spec there."""

    def __init__(
        self,
        cdi_root: Path,
        env_dir: Path,
        mps: MpsPaths | None = None,
        scrubber: Scrubber | None = None,
        log: Log | None = None,
        node: NodeTree | None = None,
        node_name: str | None = None,
    ) -> None:
        self.cdi_root = cdi_root
        self.node_name = node_name
        self.env_dir = env_dir
        self.mps = mps
        self.scrubber = scrubber
        self.log = log
        self.node = node if node is not None else NodeTree()
        env_dir.mkdir(parents=True, exist_ok=True)
        self._reported: dict[str, tuple[str, str | None]] = dict.fromkeys(self.bound(), ("bound", None))
        self._seen: dict[str, dict[str, Device]] = {}
        """{GPU uuid: its atoms}, as this daemon last read the GPU whole: which atoms a GPU read in
        part may still have (memory only: see the module's docstring)."""
        self._kept: dict[str, str] = {}
        """Bound allocations whose spec is kept unchanged for want of a reading, with why (logged
        once per reason)."""
        self._others: dict[str, str] = {}
        """{allocation: the node} whose spec under the allocation's name is another node's, as last
        found (logged once per node)."""

    def env_path(self, allocation_id: str) -> Path:
        return self.env_dir / f"{cdi.device_name(allocation_id)}.env"

    def lost_path(self, allocation_id: str) -> Path:
        """The marker of an allocation handed over once whose device has gone since."""
        return self.env_dir / f"{cdi.device_name(allocation_id)}.lost"

    def lost(self) -> set[str]:
        """The allocations withdrawn because their device went (`_withdraw`), not handed over since."""
        return {p.name.removesuffix(".lost") for p in self.env_dir.glob("*.lost")}

    def bound(self) -> set[str]:
        """The allocations handed over now (those with an env file)."""
        return {p.name.removesuffix(".env") for p in self.env_dir.glob("*.env")}

    def _unread(self, gpus: Sequence[Gpu], index: dict[str, Device]) -> dict[str, Device]:
        """The atoms not in `index` that were on a GPU read in part now, when it last read whole:
        they may be there still. The GPUs read whole now are remembered as they are."""
        partial = {g.uuid for g in gpus if g.partial}
        unread = {
            atom: device
            for uuid in partial
            for atom, device in self._seen.get(uuid, {}).items()
            if atom not in index
        }
        self._seen = {**{u: self._seen[u] for u in partial if u in self._seen}, **_gpu_atoms(index, gpus)}
        return unread

    def converge(
        self,
        spec: NodeSpecPublic,
        gpus: Sequence[Gpu],
        lingering: Mapping[str, Sequence[str]] | None = None,
    ) -> DevicesPass:
        """One pass. `lingering` ({allocation: atoms}) are the allocations whose container is still
        there (its removal failed or is pending): each is held as if still assigned, neither
        released, nor its atoms scrubbed or handed to another allocation, until a pass without it."""
        done = DevicesPass()
        lingering = lingering or {}
        busy = {atom: allocation for allocation, atoms in lingering.items() for atom in atoms}
        index = device_index(gpus, slots_of(spec))
        unread = self._unread(gpus, index)
        if self.scrubber is not None:
            self.scrubber.state.rekey(legacy_ids(gpus))
        bound = self.bound()
        wanted = {a.allocation_id: a for a in spec.assignments}
        for allocation_id in sorted(bound - set(wanted) - set(lingering)):
            self._release(allocation_id, done)
        for allocation_id in sorted(
            (set(self._reported) | self.lost()) - set(wanted) - bound - set(lingering)
        ):
            self._release(allocation_id, done)
        # What each assignment whose atoms all have a device is to be handed, from one reading of
        # the node for the whole pass; or why the node cannot say (`unresolved`: device-missing) or
        # will not (`unfit`: refused).
        view = self.node.read()
        plans: dict[str, Handover] = {}
        unresolved: dict[str, str] = {}
        node_wide: set[str] = set()
        unfit: dict[str, str] = {}
        for a in spec.assignments:
            if not a.atoms or any(atom not in index for atom in a.atoms):
                continue
            try:
                plans[a.allocation_id] = self._plan(a, _resolved(a, index), spec, view)
            except Unresolvable as exc:
                unresolved[a.allocation_id] = f"the node cannot hand over atoms {', '.join(a.atoms)}: {exc}"
                if exc.node_wide:
                    node_wide.add(a.allocation_id)
            except cdi.CdiError as exc:
                unfit[a.allocation_id] = f"the assignment's environment cannot be handed over: {exc}"
        # A bound allocation the node cannot read for keeps what it was handed; one whose device is
        # gone, or that the node can no longer name the devices of, is withdrawn.
        kept: dict[str, str] = {}
        for a in spec.assignments:
            if a.allocation_id not in bound:
                continue
            absent = [atom for atom in a.atoms if atom not in index]
            if absent and all(atom in unread for atom in absent):
                kept[a.allocation_id] = _unread_reason(absent, unread)
            elif absent:
                self._withdraw(a.allocation_id)
            elif a.allocation_id in node_wide:
                kept[a.allocation_id] = unresolved[a.allocation_id]
            elif a.allocation_id in unresolved:
                self._withdraw(a.allocation_id)
        self._keep(kept)
        bound = self.bound()
        lost = self.lost()
        scrub = spec.sharing.scrub
        if self.scrubber is not None and scrub != "none":
            self._scrub(spec, index, self.bound(), scrub, done, set(busy))
        waiting: set[str] = set()
        held: list[Held] = []
        new: list[Held] = []
        missing: dict[str, str] = {}
        for a in spec.assignments:
            absent = [atom for atom in a.atoms if atom not in index]
            # A kept allocation's atoms on a GPU read in part hold it as they last were.
            known = [index.get(atom) or unread.get(atom) for atom in a.atoms]
            items = [Held(a.allocation_id, d.atom_id, d.gpu_uuid, d.whole) for d in known if d is not None]
            if a.allocation_id in bound:
                held.extend(items)
            elif absent:
                atoms = ", ".join(absent)
                if a.allocation_id in lost:
                    why = (
                        f"the device of atoms {atoms} is gone since it was handed over (a reboot or a"
                        " repartition took it): its CDI spec is withdrawn until it is back"
                    )
                elif all(atom in unread for atom in absent):
                    why = f"no device yet: {_unread_reason(absent, unread)}"
                else:
                    why = f"no device yet for atoms {atoms}"
                missing[a.allocation_id] = why
            elif a.allocation_id in unresolved:
                missing[a.allocation_id] = unresolved[a.allocation_id]
            elif scrub != "none" and self._unclean_for(a):
                waiting.add(a.allocation_id)
            elif any(busy.get(atom, a.allocation_id) != a.allocation_id for atom in a.atoms):
                # Another allocation's container is still there on an atom of it: no hand-over
                # until a pass has removed it.
                waiting.add(a.allocation_id)
            else:
                new.extend(items)
        refused = refusals(held, new)
        for a in spec.assignments:
            plan = plans.get(a.allocation_id)
            if a.allocation_id in kept:
                # Handed over, and neither handed again nor withdrawn: the next pass looks again.
                done.settled = False
                done.held_gpus.update(h.gpu_uuid for h in held if h.allocation_id == a.allocation_id)
            elif a.allocation_id in missing:
                self._report(a.allocation_id, "device-missing", missing[a.allocation_id], done)
                done.settled = False
            elif a.allocation_id in waiting:
                # Another tenant's data is on an atom until its scrub succeeds, or its container
                # is there still: no hand-over, and no report (the allocation stays pending); the
                # next pass tries again.
                done.settled = False
            elif a.allocation_id in refused:
                self._report(a.allocation_id, "refused", refused[a.allocation_id], done)
            elif a.allocation_id in unfit:
                self._report(a.allocation_id, "refused", unfit[a.allocation_id], done)
            else:
                if not cdi.valid_device_name(a.allocation_id):
                    # One allocation the node cannot name must not stop the others' hand-over.
                    detail = f"allocation id {a.allocation_id!r} is not a valid CDI device name"
                    self._report(a.allocation_id, "refused", detail, done)
                    continue
                devices = _resolved(a, index)
                if not devices or plan is None:
                    # Nothing to make visible (an assignment naming no atom): a spec the node
                    # cannot carry out is refused, never a reason for the daemon to stop.
                    self._report(a.allocation_id, "refused", "the assignment names no atom", done)
                    continue
                if self.scrubber is not None:
                    self.scrubber.state.hold(a.atoms, a.tenant_id, a.allocation_id)
                try:
                    self._hand_over(a, plan)
                except cdi.SpecOfAnotherNode as exc:
                    # The node it left has not released it yet (a shared CDI directory); a bound one
                    # is the node it left, whose spec from the server has not caught up yet.
                    done.settled = False
                    if a.allocation_id not in bound:
                        detail = f"{exc}: waiting for node {exc.node} to release it"
                        self._report(a.allocation_id, "device-missing", detail, done)
                    continue
                self._report(a.allocation_id, "bound", None, done)
                done.held_gpus.update(d.gpu_uuid for d in devices)
        return done

    def _plan(
        self, a: AssignmentPublic, devices: Sequence[Device], spec: NodeSpecPublic, view: NodeView
    ) -> Handover:
        """What `a` is to be handed on `devices`; `Unresolvable` when the node cannot say, `CdiError`
        when its environment cannot be written."""
        uuids = ",".join(sorted({d.uuid for d in devices}))
        env: dict[str, str] = {k: v for k, v in a.env.items() if k not in (VISIBLE_DEVICES, UUIDS)}
        mps: MpsPaths | None = None
        slots = sum(1 for d in devices if d.slot)
        if slots and spec.sharing.mode == "mps" and self.mps is not None:
            units = min(100, mps_units(spec.sharing.replicas) * slots)
            env.update(client_env(self.mps, units))
            mps = self.mps
        edits = container_edits(devices, view, env, mps)
        # The env file is for a runtime that takes one instead of CDI (the NVIDIA runtime's legacy
        # mode), which makes the devices `NVIDIA_VISIBLE_DEVICES` names visible itself.
        text = cdi.env_file_text({**env, VISIBLE_DEVICES: uuids, UUIDS: uuids})
        return Handover(edits, text, mps)

    def _unclean_for(self, a: AssignmentPublic) -> list[str]:
        """The assignment's atoms that still hold another tenant's data."""
        if self.scrubber is None:
            return []
        return [atom for atom in a.atoms if self.scrubber.state.blocks(atom, a.tenant_id)]

    def _scrub(
        self,
        spec: NodeSpecPublic,
        index: dict[str, Device],
        bound: set[str],
        mode: str,
        done: DevicesPass,
        busy: Collection[str] = (),
    ) -> None:
        """Scrub every unclean atom no bound allocation holds and no lingering container is on
        (`busy`), unless the tenant that left it takes it back now; report those cleaned in one
        `ScrubDone` (a failure is logged and tried again on the next pass; an atom with no device
        now waits for it)."""
        assert self.scrubber is not None
        returning = {
            (atom, a.tenant_id) for a in spec.assignments if a.allocation_id not in bound for atom in a.atoms
        }
        cleaned: list[str] = []
        for atom, holder in self.scrubber.state.unclean().items():
            if holder.allocation in bound or atom in busy or (atom, holder.tenant) in returning:
                continue
            device = index.get(atom)
            if device is None:
                continue
            target = Target(atom, device.gpu_uuid, device.gi_id, device.whole)
            try:
                self.scrubber.scrub(target, mode)
            except GpuError as exc:
                done.settled = False
                if self.log is not None:
                    self.log.error(
                        "scrub.failed", atom=atom, gpu=device.gpu_uuid, scrub=mode, reason=str(exc)
                    )
                continue
            cleaned.append(atom)
        if not cleaned:
            return
        self.scrubber.state.mark_clean(cleaned)
        if self.log is not None:
            self.log.info("scrub.done", atoms=cleaned, scrub=mode)
        for i in range(0, len(cleaned), SCRUB_REPORT_ATOMS):
            done.reports.append({"kind": "ScrubDone", "atoms": cleaned[i : i + SCRUB_REPORT_ATOMS]})

    def _hand_over(self, a: AssignmentPublic, plan: Handover) -> None:
        """Write the allocation's CDI spec and env file where they differ from `plan`: the spec is
        compared whole, since what reaches the container (a capability minor, a driver library) can
        change while its environment stays, and the CDI root is a tmpfs a reboot empties while the
        env files on the state directory stay."""
        spec = json.loads(json.dumps(cdi.spec_for(a.allocation_id, plan.edits, self.node_name)))
        written = cdi.read_spec(self.cdi_root, a.allocation_id)
        path = self.env_path(a.allocation_id)
        env_same = path.exists() and path.read_text(encoding="utf-8") == plan.env_text
        if plan.mps is not None:
            # What the container mounts must exist before a runtime reads the spec.
            plan.mps.pipe_directory.mkdir(parents=True, exist_ok=True)
            plan.mps.shm_directory.mkdir(parents=True, exist_ok=True)
        if written != spec:
            self._write_own(a.allocation_id, spec)
            if written is not None and self.log is not None:
                self.log.info("cdi.rewritten", allocation=a.allocation_id)
        self._others.pop(a.allocation_id, None)
        if not env_same:
            partial = path.with_name(f".{path.name}.partial")
            partial.write_text(plan.env_text, encoding="utf-8")
            partial.replace(path)
        self.lost_path(a.allocation_id).unlink(missing_ok=True)

    def _keep(self, kept: dict[str, str]) -> None:
        """Log each allocation kept for a new reason (`cdi.kept`), and forget those kept no more."""
        for allocation_id, why in sorted(kept.items()):
            if self._kept.get(allocation_id) != why and self.log is not None:
                self.log.warning("cdi.kept", allocation=allocation_id, reason=why)
        self._kept = dict(kept)

    def _withdraw(self, allocation_id: str) -> None:
        """Take back the hand-over of a bound allocation whose device is gone: the lost marker first,
        then the CDI spec, then the env file (the record that it is handed over), so a crash
        half-way leaves it still bound (withdrawn again on the next pass) or lost, never neither."""
        marker = self.lost_path(allocation_id)
        marker.touch()
        self.remove_spec(allocation_id)
        self.env_path(allocation_id).unlink(missing_ok=True)
        if self.log is not None:
            self.log.warning("device.lost", allocation=allocation_id)

    def _release(self, allocation_id: str, done: DevicesPass) -> None:
        if cdi.valid_device_name(allocation_id):  # one it could not name has no files
            self.remove_spec(allocation_id)
            self.env_path(allocation_id).unlink(missing_ok=True)
            self.lost_path(allocation_id).unlink(missing_ok=True)
        self._reported.pop(allocation_id, None)
        done.reports.append({"kind": "AllocationReleased", "allocationId": allocation_id})

    def remove_spec(self, allocation_id: str) -> None:
        """Remove the allocation's CDI spec unless another node wrote the one there (left alone)."""
        try:
            cdi.remove_spec(self.cdi_root, allocation_id, self.node_name)
        except cdi.SpecOfAnotherNode as exc:
            self._other_node(exc)
        self._others.pop(allocation_id, None)

    def _write_own(self, allocation_id: str, spec: dict[str, Any]) -> None:
        """Write the allocation's spec; `SpecOfAnotherNode` (logged once per node) when it is another's."""
        try:
            cdi.write_spec(self.cdi_root, allocation_id, spec, self.node_name)
        except cdi.SpecOfAnotherNode as exc:
            if self._others.get(allocation_id) != exc.node:
                self._other_node(exc)
            self._others[allocation_id] = exc.node
            raise

    def _other_node(self, exc: cdi.SpecOfAnotherNode) -> None:
        if self.log is not None:
            self.log.warning("cdi.other-node", allocation=exc.allocation_id, node=exc.node)

    def _report(self, allocation_id: str, binding: str, detail: str | None, done: DevicesPass) -> None:
        if self._reported.get(allocation_id) == (binding, detail):
            return
        self._reported[allocation_id] = (binding, detail)
        body: dict[str, Any] = {"kind": "AllocationBound", "allocationId": allocation_id, "binding": binding}
        if detail is not None:
            body["detail"] = detail[:1000]
        done.reports.append(body)
