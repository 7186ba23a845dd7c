"""One transaction's repositories, bound to its connection (the service's `Tx`)."""

from __future__ import annotations

from functools import cached_property

from sqlalchemy import Connection

from better_compute.storage.atoms import SqlAtoms
from better_compute.storage.bindings import SqlBindings
from better_compute.storage.class_quotas import SqlClassQuotas
from better_compute.storage.clusters import SqlClusters
from better_compute.storage.components import SqlComponents
from better_compute.storage.credentials import SqlCredentials
from better_compute.storage.device_classes import SqlDeviceClasses
from better_compute.storage.endpoints import SqlEndpoints
from better_compute.storage.events import SqlEvents
from better_compute.storage.gpu_states import SqlGpuStates
from better_compute.storage.gpus import SqlGpus
from better_compute.storage.join_tokens import SqlJoinTokens
from better_compute.storage.ledger import SqlLedger
from better_compute.storage.mig_layouts import SqlMigLayouts
from better_compute.storage.nodes import SqlNodes
from better_compute.storage.policies import SqlPolicies
from better_compute.storage.pools import SqlPools
from better_compute.storage.prices import SqlPrices
from better_compute.storage.priority_classes import SqlPriorityClasses
from better_compute.storage.quotas import SqlQuotas
from better_compute.storage.reservations import SqlReservations
from better_compute.storage.tenants import SqlTenants
from better_compute.storage.usage import SqlUsage
from better_compute.storage.workloads import SqlWorkloads


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
