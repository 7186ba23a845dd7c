"""Where the ids of new aggregates come from: handed to the use cases, never made by them.

A use case that mints an id takes it from an `Ids` its caller injects, so a test can name what it
will find (and a replay can repeat a run) without patching a module. The composition root wires the
production source (`entrypoints/ids.py`); tests wire a counting one.

Only a few aggregates are named by the server. The others are named otherwise, and need no source:
tenants, clusters, nodes and pools by whoever creates them (the API's caller, the fleet file); GPUs by
their NVML uuid; atoms by their physical identity (`domain.fleet.atoms.atom_id_for`); a reservation's
allocation by the reservation's id, a partition's by its GPU and start (`domain.ledger.ledger`); quota rows
by tenant, pool and class; bookings and events by the database's sequences (`bkg-<n>`). A bearer
token is a secret, not an id: it comes from `secrets` in `service.tenancy.credentials`, never from here.
"""

from __future__ import annotations

from typing import Protocol


class Ids(Protocol):
    """New ids, one method per aggregate the server names. Each call gives a fresh id, never given
    before by this process or another on the same database; calls may come from several threads at
    once."""

    def reservation(self) -> str:
        """A reservation's id (`rsv-...`), also its allocation's. Ids made later sort later, so that
        lists page by creation (newest first) and the index on them only appends."""
        ...

    def credential(self) -> str:
        """A credential's id (`cred-...`), how an admin names a token to revoke it."""
        ...

    def policy(self) -> str:
        """An IAM policy's id (`pol-...`)."""
        ...

    def workload(self) -> str:
        """A workload's id (`wkl-...`), time-ordered."""
        ...

    def deployment(self) -> str:
        """A deployment's id (`dep-...`); its replicas' allocations are `<id>.r<n>`."""
        ...

    def operation(self) -> str:
        """An operation's id (`op-...`)."""
        ...


__all__ = ["Ids"]
