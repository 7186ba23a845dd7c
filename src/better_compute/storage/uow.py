"""One transaction's repositories, bound to its connection, and the hooks bound to it (the service's `Tx`)."""

from __future__ import annotations

from functools import cached_property

from sqlalchemy import Connection

from better_compute.service.hooks import Hooks
from better_compute.storage.endpoints.components import SqlComponents
from better_compute.storage.endpoints.endpoints import SqlEndpoints
from better_compute.storage.fleet.atoms import SqlAtoms
from better_compute.storage.fleet.bindings import SqlBindings
from better_compute.storage.fleet.clusters import SqlClusters
from better_compute.storage.fleet.gpu_states import SqlGpuStates
from better_compute.storage.fleet.gpus import SqlGpus
from better_compute.storage.fleet.join_tokens import SqlJoinTokens
from better_compute.storage.fleet.node_agents import SqlNodeAgents
from better_compute.storage.fleet.nodes import SqlNodes
from better_compute.storage.fleet.pools import SqlPools
from better_compute.storage.fleet.replica_states import SqlReplicaStates
from better_compute.storage.fleet.slurm_jobs import SqlSlurmJobs
from better_compute.storage.gate.mig_layouts import SqlMigLayouts
from better_compute.storage.kernel.events import SqlEvents
from better_compute.storage.ledger.ledger import SqlLedger
from better_compute.storage.ledger.reservations import SqlReservations
from better_compute.storage.metering.prices import SqlPrices
from better_compute.storage.metering.usage import SqlUsage
from better_compute.storage.placement.class_quotas import SqlClassQuotas
from better_compute.storage.placement.device_classes import SqlDeviceClasses
from better_compute.storage.placement.priority_classes import SqlPriorityClasses
from better_compute.storage.placement.workloads import SqlWorkloads
from better_compute.storage.tenancy.credentials import SqlCredentials
from better_compute.storage.tenancy.policies import SqlPolicies
from better_compute.storage.tenancy.quotas import SqlQuotas
from better_compute.storage.tenancy.tenants import SqlTenants


class SqlTx:
    """The repositories of one transaction; also exposes the raw connection to storage-side code.

    Repositories are made on first use: the hot admission path touches two of them."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.reservations = SqlReservations(conn)
        self.ledger = SqlLedger(conn)
        self.events = SqlEvents(conn)

    @cached_property
    def tenants(self) -> SqlTenants:
        return SqlTenants(self.conn)

    @cached_property
    def credentials(self) -> SqlCredentials:
        return SqlCredentials(self.conn)

    @cached_property
    def clusters(self) -> SqlClusters:
        return SqlClusters(self.conn)

    @cached_property
    def nodes(self) -> SqlNodes:
        return SqlNodes(self.conn)

    @cached_property
    def gpus(self) -> SqlGpus:
        return SqlGpus(self.conn)

    @cached_property
    def atoms(self) -> SqlAtoms:
        return SqlAtoms(self.conn)

    @cached_property
    def gpu_states(self) -> SqlGpuStates:
        return SqlGpuStates(self.conn)

    @cached_property
    def mig_layouts(self) -> SqlMigLayouts:
        return SqlMigLayouts(self.conn)

    @cached_property
    def pools(self) -> SqlPools:
        return SqlPools(self.conn)

    @cached_property
    def quotas(self) -> SqlQuotas:
        return SqlQuotas(self.conn)

    @cached_property
    def class_quotas(self) -> SqlClassQuotas:
        return SqlClassQuotas(self.conn)

    @cached_property
    def policies(self) -> SqlPolicies:
        return SqlPolicies(self.conn)

    @cached_property
    def usage(self) -> SqlUsage:
        return SqlUsage(self.conn)

    @cached_property
    def prices(self) -> SqlPrices:
        return SqlPrices(self.conn)

    @cached_property
    def join_tokens(self) -> SqlJoinTokens:
        return SqlJoinTokens(self.conn)

    @cached_property
    def bindings(self) -> SqlBindings:
        return SqlBindings(self.conn)

    @cached_property
    def replica_states(self) -> SqlReplicaStates:
        return SqlReplicaStates(self.conn)

    @cached_property
    def node_agents(self) -> SqlNodeAgents:
        return SqlNodeAgents(self.conn)

    @cached_property
    def slurm_jobs(self) -> SqlSlurmJobs:
        return SqlSlurmJobs(self.conn)

    @cached_property
    def device_classes(self) -> SqlDeviceClasses:
        return SqlDeviceClasses(self.conn)

    @cached_property
    def endpoints(self) -> SqlEndpoints:
        return SqlEndpoints(self.conn)

    @cached_property
    def components(self) -> SqlComponents:
        return SqlComponents(self.conn)

    @cached_property
    def priority_classes(self) -> SqlPriorityClasses:
        return SqlPriorityClasses(self.conn)

    @cached_property
    def workloads(self) -> SqlWorkloads:
        return SqlWorkloads(self.conn)

    @cached_property
    def hooks(self) -> Hooks:
        """What fleet and the gate tell the contexts above them, answered in this transaction
        (service/hooks.py): every store's transactions carry the one wiring."""
        return Hooks(self)
