"""The MIG layout gate's ports: its rows, compare-and-set and leased to reconcilers."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from better_compute.domain.gate.node_spec import NodeWork
from better_compute.domain.gate.records import MigLayoutGate
from better_compute.service.fleet.ports import FleetHooks
from better_compute.service.ledger.ports import LedgerTx


class MigLayoutRepo(Protocol):
    """The MIG layout gate's rows (storage.gate.mig_layouts): compare-and-set writes, reconciler leases."""

    def all_rows(self) -> list[MigLayoutGate]: ...

    def of_nodes(self, node_ids: Sequence[str]) -> dict[str, MigLayoutGate]: ...

    def add(self, gate: MigLayoutGate) -> None: ...

    def replace(self, gate: MigLayoutGate) -> bool:
        """Write `gate` over the row at `gate.version - 1`; False when another writer moved it."""
        ...

    def remove(self, node_id: str, version: int) -> bool: ...

    def lease(
        self,
        owner: str,
        now: datetime,
        until: datetime,
        limit: int,
        recheck: datetime | None = None,
        woken: Sequence[str] = (),
    ) -> list[str]:
        """Take or renew leases on up to `limit` free nodes that have something to do now (a node
        scheduled for later, only when it is in `woken` or once its last lease ran out before
        `recheck`); the nodes `owner` holds."""
        ...

    def leased_to(self, node_id: str, owner: str, now: datetime) -> bool: ...


class GateHooks(FleetHooks, Protocol):
    """Fleet's hooks, and what the gate tells the contexts above it inside its own transaction
    (wired as fleet's are, in `service/hooks.py`)."""

    def layout_applied(self, node_id: str, now: datetime) -> None:
        """The gate applied a node's new layout and let go of its atoms (its holds end at `now`);
        not called for a change undone."""
        ...

    def work_on(self, atom_ids: Sequence[str], allocation_ids: Sequence[str]) -> NodeWork:
        """What runs on a node, for its spec: the container of each of `allocation_ids` that is a
        workload replica, and the endpoint copies placed on `atom_ids` (the node's)."""
        ...


class GateTx(LedgerTx, Protocol):
    """The slice of a transaction the MIG layout gate's use cases use: the ledger's, and the gate's rows."""

    @property
    def mig_layouts(self) -> MigLayoutRepo: ...

    @property
    def hooks(self) -> GateHooks: ...
