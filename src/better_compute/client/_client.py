"""`Compute`: the typed client of the better-compute API, over httpx.

Every call goes through the method table (`better_compute.wire.methods`), so the client and the server
agree on verbs, paths and models by construction. Answers are read with the wire's answer models,
which ignore fields they do not know: a newer server that adds a field does not break this client.
Every request carries `BC-API-Version` (`wire.API_VERSION`). Tests pass
`transport=httpx.MockTransport(handler)`.
"""

from __future__ import annotations

import functools
import inspect
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import date, datetime
from typing import Any, Literal, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError

from better_compute import __version__, login_config
from better_compute.client._errors import ComputeError, InvalidInputError, TransportError, error_from_answer
from better_compute.wire import API_VERSION, API_VERSION_HEADER, codes
from better_compute.wire.billing import (
    BillPublic,
    BillQuery,
    PriceListQuery,
    PricePublic,
    PriceSet,
    UsageListQuery,
    UsageReportPublic,
    UsageReportQuery,
    UsageRowPublic,
)
from better_compute.wire.capacity import (
    CapacityAccounting,
    CapacityAccountingQuery,
    CapacityByPool,
    CapacityByPoolQuery,
    CapacityFree,
    CapacityFreeQuery,
    CapacitySummary,
    CapacitySummaryQuery,
    CapacityTimeline,
    CapacityTimelineQuery,
)
from better_compute.wire.common import Page
from better_compute.wire.container_exec import EndpointExecRequest, ExecPublic, WorkloadExecRequest
from better_compute.wire.device_classes import DeviceClassCreate, DeviceClassListQuery, DeviceClassPublic
from better_compute.wire.doctor import DoctorQuery, DoctorReport
from better_compute.wire.endpoints import (
    ComponentCreate,
    ComponentListQuery,
    ComponentPublic,
    ComponentScale,
    EndpointCreate,
    EndpointDelete,
    EndpointListQuery,
    EndpointPublic,
    EndpointUpdate,
    NameRequest,
)
from better_compute.wire.events import EventListQuery, EventPublic
from better_compute.wire.inventory import (
    ClusterCreate,
    ClusterPublic,
    ClusterUpdate,
    GpuPublic,
    GpuRelease,
    NodePublic,
    NodeUpdate,
    SlurmSettings,
)
from better_compute.wire.invocations import COMPONENT_HEADER, INVOKED_COPY_HEADER
from better_compute.wire.logs import EndpointLogsRequest, LogsPublic, WorkloadLogsRequest
from better_compute.wire.methods import METHODS, Method, unknown_method
from better_compute.wire.node_detail import NodeDetailPublic, NodeGet
from better_compute.wire.nodes import (
    JoinTokenCreate,
    JoinTokenIssued,
    NodeJoin,
    NodeJoined,
    NodeReportSend,
    NodeSpecPublic,
    NodeSpecQuery,
    ReportAccepted,
)
from better_compute.wire.partitions import (
    PartitionBook,
    PartitionBookingPublic,
    PartitionRelease,
    PartitionReleasedPublic,
)
from better_compute.wire.policies import (
    PolicyCreate,
    PolicyLimits,
    PolicyListQuery,
    PolicyPublic,
    PolicyUpdate,
    SubjectType,
)
from better_compute.wire.pools import (
    PoolCreate,
    PoolLayoutPreview,
    PoolLayoutPreviewRequest,
    PoolListQuery,
    PoolOffer,
    PoolOfferPublic,
    PoolPolicy,
    PoolPublic,
    PoolUpdate,
    SharingMode,
)
from better_compute.wire.priority_classes import (
    PriorityClassCreate,
    PriorityClassListQuery,
    PriorityClassPublic,
)
from better_compute.wire.quotas import AtomClass, QuotaListQuery, QuotaPublic, QuotaSet
from better_compute.wire.replay import ReplayReport, ReplayRun
from better_compute.wire.reservations import (
    DeviceRequest,
    IdRequest,
    ReservationCreate,
    ReservationExtend,
    ReservationListQuery,
    ReservationPublic,
    ReservationStatus,
    Selector,
)
from better_compute.wire.slurm_gres import NodeSlurmGresGet, NodeSlurmGresPublic
from better_compute.wire.tenants import (
    CredentialCreate,
    CredentialCreated,
    CredentialListQuery,
    CredentialPublic,
    TenantCreate,
    TenantListQuery,
    TenantPublic,
    TenantUpdate,
    WhoAmI,
    WhoAmIQuery,
)
from better_compute.wire.workloads import (
    DeploymentListQuery,
    DeploymentPublic,
    DomainKind,
    OperationCreate,
    OperationPublic,
    PlacementPreview,
    PlacementPreviewRequest,
    Strategy,
    WorkloadCreate,
    WorkloadListQuery,
    WorkloadPublic,
    WorkloadScale,
)

M = TypeVar("M", bound=BaseModel)
JsonObject = dict[str, Any]

DEFAULT_TIMEOUT = 30.0
DEFAULT_RETRIES = 3
DEFAULT_BACKOFF = 0.2

_RETRYABLE = (httpx.NetworkError, httpx.TimeoutException, httpx.RemoteProtocolError)
"""Failures where the request may not have reached the server, or its answer was lost."""


class Compute:
    """A client of one better-compute server.

    ``Compute("http://127.0.0.1:8000", token)`` then ``compute.reservations.create(...)``. Methods take
    keyword arguments in snake_case and return the wire models; lists return ``Page[...]``.

    Calls that are safe to repeat (GET, PUT, and a POST carrying an idempotency key) are retried up to
    ``retries`` times on connection failures, with a short exponential ``backoff`` (seconds).
    ``reservations.create`` gets a generated idempotency key when the caller gives none, so a retry
    never books twice. Other calls are sent once.
    """

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        transport: httpx.BaseTransport | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        backoff: float = DEFAULT_BACKOFF,
        sleep: Callable[[float], None] = time.sleep,
        auth: httpx.Auth | None = None,
    ) -> None:
        headers = {
            "User-Agent": f"better-compute-client/{__version__}",
            "Accept": "application/json",
            API_VERSION_HEADER: API_VERSION,
        }
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(
            base_url=base_url, headers=headers, transport=transport, timeout=timeout, auth=auth
        )
        self._retries = max(0, retries)
        self._backoff = backoff
        self._sleep = sleep
        self.tenants = Tenants(self)
        self.credentials = Credentials(self)
        self.pools = Pools(self)
        self.quotas = Quotas(self)
        self.policies = Policies(self)
        self.device_classes = DeviceClasses(self)
        self.priority_classes = PriorityClasses(self)
        self.reservations = Reservations(self)
        self.workloads = Workloads(self)
        self.endpoints = Endpoints(self)
        self.components = Components(self)
        self.deployments = Deployments(self)
        self.placement = Placement(self)
        self.operations = Operations(self)
        self.clusters = Clusters(self, "clusters.list")
        self.nodes = Nodes(self, "nodes.list")
        self.gpus = Inventory(self, "gpus.list")
        self.atoms = Atoms(self)
        self.capacity = Capacity(self)
        self.events = Events(self)
        self.usage = Usage(self)
        self.bills = Bills(self)
        self.prices = Prices(self)
        self.partitions = Partitions(self)
        self.doctor = Doctor(self)
        self.replay = Replay(self)

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        *,
        transport: httpx.BaseTransport | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        backoff: float = DEFAULT_BACKOFF,
    ) -> Compute:
        """A client for the server and token the CLI would use: `BC_SERVER` / `BC_TOKEN`, else the
        config file `better-compute login` wrote (`BC_CONFIG`, else the XDG path), each on its own,
        the file's token only for the file's server (`better_compute.login_config`).

        Unlike the CLI it has no default server: a program that finds none is more likely
        misconfigured than meant for 127.0.0.1. Nothing found, a server URL that is not a server's
        root (no `http://`, or ending in `/v1`), or a malformed config file is a ValueError saying
        what is missing and how to give it. `env` defaults to `os.environ`."""
        found = login_config.find(None, None, env)
        if found.server is None:
            raise ValueError(
                f"no server: set BC_SERVER (such as https://compute.example.org) or run "
                f"`better-compute login --server URL` (no login config at {found.path})"
            )
        if found.token is None:
            elsewhere = (
                f"; the token in {found.path} is for {found.other_token_server}, "
                "and is sent to no other server"
                if found.other_token_server is not None
                else ""
            )
            raise ValueError(
                f"no token for {found.server} (from {found.server_source}): set BC_TOKEN or run "
                f"`better-compute login --server {found.server}`{elsewhere}"
            )
        return cls(
            found.server, found.token, transport=transport, timeout=timeout, retries=retries, backoff=backoff
        )

    @property
    def base_url(self) -> str:
        return str(self._http.base_url)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Compute:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, method_name: str, body: Mapping[str, Any] | None = None) -> Any:
        """Call an API method by name with a camelCase JSON body; returns the JSON answer as is.

        An unknown method name is a KeyError naming the valid ones; a missing path parameter is a
        ValueError. Refusals raise the ComputeError subclass of their code.
        """
        try:
            method = METHODS[method_name]
        except KeyError:
            raise KeyError(unknown_method(method_name)) from None
        return self._send(method, dict(body or {}))

    def _send(self, method: Method, body: JsonObject, timeout: float | None = None) -> Any:
        if method.idempotency_key and not body.get("idempotencyKey"):
            body = {**body, "idempotencyKey": str(uuid.uuid4())}
        call = method.render(body)
        attempts = 1 + self._retries if method.retry_safe(body) else 1
        for attempt in range(attempts):
            try:
                response = self._http.request(
                    call.verb,
                    call.path,
                    params=tuple(call.query),
                    json=call.json,
                    timeout=httpx.USE_CLIENT_DEFAULT if timeout is None else timeout,
                )
            except _RETRYABLE as exc:
                if attempt + 1 < attempts:
                    self._sleep(self._backoff * 2**attempt)
                    continue
                raise self._transport_error(method, exc, attempt + 1) from exc
            except httpx.TransportError as exc:
                raise self._transport_error(method, exc, attempt + 1) from exc
            return _answer(response)
        raise AssertionError("unreachable")  # pragma: no cover

    def _transport_error(self, method: Method, exc: httpx.TransportError, attempts: int) -> TransportError:
        """No answer, naming the server tried: a wrong URL is the usual cause, and the reader must see
        which one was used."""
        server = self.base_url.rstrip("/")
        return TransportError(
            f"{method.name}: no answer from {server} ({type(exc).__name__}: {exc})",
            details={"method": method.name, "attempts": attempts, "server": server},
        )

    def _typed(self, name: str, request: BaseModel | None, out: type[M], timeout: float | None = None) -> M:
        body = request.model_dump(mode="json", exclude_unset=True) if request is not None else {}
        raw = self._send(METHODS[name], body, timeout)
        try:
            return out.model_validate(raw)
        except ValidationError as exc:
            raise ComputeError(
                f"{name}: the server's answer does not match {out.__name__}",
                code=codes.UNEXPECTED_RESPONSE,
                details={"errors": exc.errors(include_url=False, include_context=False)},
            ) from exc

    def _raw(self, name: str, body: JsonObject) -> Any:
        return self._send(METHODS[name], body)


INVOKE_CLIENT_TIMEOUT_S = 65.0
"""How long `endpoints.invoke` waits: the model server's 60 s, and the server's own time around it."""
EXEC_CLIENT_SLACK_S = 20.0
"""How much longer than its command's timeout an exec waits: the node's and the server's own time."""


def _exec_timeout(compute: Compute, timeout_seconds: int | None) -> float:
    """What an exec waits for its answer: at least the client's timeout, and the command's (10 s by
    default) with the server's and the node's own time around it."""
    return max(compute._http.timeout.read or 0.0, (timeout_seconds or 10) + EXEC_CLIENT_SLACK_S)


def _answer(response: httpx.Response) -> Any:
    payload: Any
    try:
        payload = response.json() if response.content else None
    except ValueError:
        payload = None
    if response.is_success:
        if payload is None and response.content:
            raise ComputeError(
                "the server answered with something other than JSON",
                code=codes.UNEXPECTED_RESPONSE,
                details={"body": response.text[:2000]},
                status_code=response.status_code,
            )
        return payload
    raise error_from_answer(response.status_code, payload, response.text)


def _fields(**fields: Any) -> JsonObject:
    """Keyword arguments the caller gave (not None), so defaults stay the server's."""
    return {key: value for key, value in fields.items() if value is not None}


class _Resource:
    def __init__(self, compute: Compute) -> None:
        self._compute = compute


R = TypeVar("R", bound=type[_Resource])


def _invalid_input(method: str, exc: ValidationError) -> InvalidInputError:
    """The client's own INVALID_INPUT for arguments the wire models refuse, shaped like the server's
    (`details.field` names the first field at fault), so callers catch one error tree."""
    errors = exc.errors(include_url=False, include_context=False, include_input=False)
    field = ""
    for part in errors[0]["loc"] if errors else ():
        field += f"[{part}]" if isinstance(part, int) else (f".{part}" if field else str(part))
    message = errors[0]["msg"] if errors else str(exc)
    return InvalidInputError(
        f"{method}: {field}: {message}" if field else f"{method}: {message}",
        details={"field": field, "errors": errors},
    )


def _refusing_bad_arguments(cls: R) -> R:
    """Every public method of the resource raises InvalidInputError, not pydantic's ValidationError,
    for arguments its request model refuses. Answers are read in `Compute._typed`, which turns a
    mismatch into UNEXPECTED_RESPONSE first, so what reaches here is always the caller's input."""
    resource = cls.__name__.lower()
    for name, fn in list(vars(cls).items()):
        if name.startswith("_") or not inspect.isfunction(fn) or inspect.isgeneratorfunction(fn):
            continue

        def checked(*args: Any, __fn: Any = fn, __method: str = f"{resource}.{name}", **kw: Any) -> Any:
            try:
                return __fn(*args, **kw)
            except ValidationError as exc:
                raise _invalid_input(__method, exc) from None

        setattr(cls, name, functools.wraps(fn)(checked))
    return cls


@_refusing_bad_arguments
class Tenants(_Resource):
    def create(self, *, id: str, name: str) -> TenantPublic:
        return self._compute._typed("tenants.create", TenantCreate(id=id, name=name), TenantPublic)

    def list(self, *, limit: int | None = None, cursor: str | None = None) -> Page[TenantPublic]:
        query = TenantListQuery(**_fields(limit=limit, cursor=cursor))
        return self._compute._typed("tenants.list", query, Page[TenantPublic])

    def update(self, id: str, *, name: str) -> TenantPublic:
        """Change a tenant's display name (admin only); `tenant.updated` is logged."""
        return self._compute._typed("tenants.update", TenantUpdate(id=id, name=name), TenantPublic)

    def delete(self, id: str) -> TenantPublic:
        """Delete a tenant (admin only) that owns no pool and holds no reservation not over; its
        credentials stop working. Answers it with `deleted_at` set."""
        return self._compute._typed("tenants.delete", IdRequest(id=id), TenantPublic)


@_refusing_bad_arguments
class Credentials(_Resource):
    def create(self, *, tenant_id: str | None, name: str | None = None) -> CredentialCreated:
        """A credential for `tenant_id`, or for the whole fleet when it is None; the token shows once."""
        request = CredentialCreate(tenant_id=tenant_id, **_fields(name=name))
        return self._compute._typed("credentials.create", request, CredentialCreated)

    def list(self, *, limit: int | None = None, cursor: str | None = None) -> Page[CredentialPublic]:
        """Credentials without their tokens; a tenant's token sees only its tenant's."""
        query = CredentialListQuery(**_fields(limit=limit, cursor=cursor))
        return self._compute._typed("credentials.list", query, Page[CredentialPublic])

    def revoke(self, id: str) -> CredentialPublic:
        """Revoke a credential (admin only): its token stops working at once."""
        return self._compute._typed("credentials.revoke", IdRequest(id=id), CredentialPublic)

    def whoami(self) -> WhoAmI:
        """Who this client's token is: its credential and the tenant it acts for."""
        return self._compute._typed("credentials.whoami", WhoAmIQuery(), WhoAmI)


@_refusing_bad_arguments
class Pools(_Resource):
    def create(
        self,
        *,
        name: str,
        cluster_id: str,
        mode: SharingMode,
        owner_tenant_id: str,
        nodes: Sequence[str] = (),
        policy: PoolPolicy | Mapping[str, Any] | None = None,
        owner_quota: Mapping[AtomClass, int] | None = None,
        meter: str | None = None,
    ) -> PoolPublic:
        request = PoolCreate.model_validate(
            _fields(
                name=name,
                cluster_id=cluster_id,
                mode=mode,
                owner_tenant_id=owner_tenant_id,
                nodes=list(nodes),
                policy=policy,
                owner_quota=dict(owner_quota) if owner_quota is not None else None,
                meter=meter,
            )
        )
        return self._compute._typed("pools.create", request, PoolPublic)

    def list(
        self,
        *,
        cluster_id: str | None = None,
        owner_tenant_id: str | None = None,
        mode: SharingMode | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Page[PoolPublic]:
        query = PoolListQuery.model_validate(
            _fields(
                cluster_id=cluster_id, owner_tenant_id=owner_tenant_id, mode=mode, limit=limit, cursor=cursor
            )
        )
        return self._compute._typed("pools.list", query, Page[PoolPublic])

    def get(self, id: str) -> PoolPublic:
        return self._compute._typed("pools.get", IdRequest(id=id), PoolPublic)

    def update(
        self,
        id: str,
        *,
        policy: PoolPolicy | Mapping[str, Any] | None = None,
        nodes: Sequence[str] | None = None,
        generation: int | None = None,
        dry_run: bool = False,
    ) -> PoolPublic:
        """Change a pool's policy or nodes (admin). `dry_run` answers the pool as the update would
        leave it and the layout changes it would put under way (`layout_changes`), changing nothing."""
        request = PoolUpdate.model_validate(
            _fields(
                id=id,
                policy=policy,
                nodes=list(nodes) if nodes is not None else None,
                generation=generation,
                dry_run=dry_run or None,
            )
        )
        return self._compute._typed("pools.update", request, PoolPublic)

    def delete(self, id: str) -> PoolPublic:
        """Delete an empty pool (admin only); answers it as it was."""
        return self._compute._typed("pools.delete", IdRequest(id=id), PoolPublic)

    def offer(self, pool_id: str, *, tenant_id: str, quota: Mapping[AtomClass, int]) -> PoolOfferPublic:
        request = PoolOffer(pool_id=pool_id, tenant_id=tenant_id, quota=dict(quota))
        return self._compute._typed("pools.offer", request, PoolOfferPublic)

    def preview_layout(self, id: str, mig_layout: str) -> PoolLayoutPreview:
        """What `mig_layout` would do to the pool, node by node (admin or owner); writes nothing."""
        request = PoolLayoutPreviewRequest(id=id, mig_layout=mig_layout)
        return self._compute._typed("pools.previewLayout", request, PoolLayoutPreview)


@_refusing_bad_arguments
class Quotas(_Resource):
    def set(self, *, tenant_id: str, pool_id: str, cls: AtomClass, limit: int) -> QuotaPublic:
        request = QuotaSet(tenant_id=tenant_id, pool_id=pool_id, cls=cls, limit=limit)
        return self._compute._typed("quotas.set", request, QuotaPublic)

    def set_class(
        self,
        *,
        tenant_id: str,
        device_class: str,
        scope: Literal["cluster", "fleet"],
        guaranteed_devices: int,
        cluster_id: str | None = None,
        floor_devices: int | None = None,
        over_quota_weight: float | None = None,
    ) -> QuotaPublic:
        """Set one device-class row (admin): at most `guaranteed_devices` of the class in `cluster_id`
        (scope cluster) or across the fleet; the server fills in floor 0 and weight 1 when not given."""
        request = QuotaSet.model_validate(
            _fields(
                tenant_id=tenant_id,
                device_class=device_class,
                scope=scope,
                cluster_id=cluster_id,
                guaranteed_devices=guaranteed_devices,
                floor_devices=floor_devices,
                over_quota_weight=over_quota_weight,
            )
        )
        return self._compute._typed("quotas.set", request, QuotaPublic)

    def list(
        self,
        *,
        tenant_id: str | None = None,
        pool_id: str | None = None,
        device_class: str | None = None,
        scope: Literal["pool", "cluster", "fleet"] | None = None,
        cluster_id: str | None = None,
        start: datetime | None = None,
        end: datetime | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Page[QuotaPublic]:
        """Quota rows of both kinds with `used`: held now, or for pool rows with `start` (and `end`)
        the most held at once then."""
        query = QuotaListQuery.model_validate(
            _fields(
                tenant_id=tenant_id,
                pool_id=pool_id,
                device_class=device_class,
                scope=scope,
                cluster_id=cluster_id,
                from_=start,
                to=end,
                limit=limit,
                cursor=cursor,
            )
        )
        return self._compute._typed("quotas.list", query, Page[QuotaPublic])


@_refusing_bad_arguments
class Policies(_Resource):
    """Policies: per-reservation limits (a tenant's), placement constraints (any subject's), or both."""

    def create(
        self,
        *,
        name: str,
        tenant_id: str | None = None,
        limits: PolicyLimits | Mapping[str, Any] | None = None,
        pool_id: str | None = None,
        subject_type: SubjectType | None = None,
        subject_id: str | None = None,
        allowed_regions: Sequence[str] | None = None,
        allowed_residencies: Sequence[str] | None = None,
        allowed_device_classes: Sequence[str] | None = None,
        allowed_clusters: Sequence[str] | None = None,
        denied_clusters: Sequence[str] | None = None,
        cost_ceiling: str | None = None,
    ) -> PolicyPublic:
        """Create a policy (admin only). Without `subject_type` it is `tenant_id`'s; a workload's or
        an endpoint's names it (`subject_id`) and its tenant; a cluster's names the cluster only."""
        request = PolicyCreate.model_validate(
            _fields(
                name=name,
                tenant_id=tenant_id,
                limits=limits,
                pool_id=pool_id,
                subject_type=subject_type,
                subject_id=subject_id,
                **_constraint_fields(
                    allowed_regions,
                    allowed_residencies,
                    allowed_device_classes,
                    allowed_clusters,
                    denied_clusters,
                    cost_ceiling,
                ),
            )
        )
        return self._compute._typed("policies.create", request, PolicyPublic)

    def list(
        self,
        *,
        tenant_id: str | None = None,
        pool_id: str | None = None,
        subject_type: SubjectType | None = None,
        subject: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Page[PolicyPublic]:
        query = PolicyListQuery.model_validate(
            _fields(
                tenant_id=tenant_id,
                pool_id=pool_id,
                subject_type=subject_type,
                subject=subject,
                limit=limit,
                cursor=cursor,
            )
        )
        return self._compute._typed("policies.list", query, Page[PolicyPublic])

    def get(self, id: str) -> PolicyPublic:
        """One policy (a tenant token reads its own tenant's and the clusters')."""
        return self._compute._typed("policies.get", IdRequest(id=id), PolicyPublic)

    def update(
        self,
        id: str,
        *,
        limits: PolicyLimits | Mapping[str, Any] | None = None,
        remove_limits: bool = False,
        allowed_regions: Sequence[str] | None = None,
        allowed_residencies: Sequence[str] | None = None,
        allowed_device_classes: Sequence[str] | None = None,
        allowed_clusters: Sequence[str] | None = None,
        denied_clusters: Sequence[str] | None = None,
        cost_ceiling: str | None = None,
        generation: int | None = None,
    ) -> PolicyPublic:
        """Replace a policy's limits and/or constraints (admin only): what is given replaces, what is
        not is kept; an empty list removes a constraint and `remove_limits` every limit. With
        `generation`, only if the policy is still at it (else CONFLICT)."""
        body = _fields(
            id=id,
            limits=limits,
            generation=generation,
            **_constraint_fields(
                allowed_regions,
                allowed_residencies,
                allowed_device_classes,
                allowed_clusters,
                denied_clusters,
                cost_ceiling,
            ),
        )
        if remove_limits:
            if limits is not None:
                raise ValueError("give limits or remove_limits, not both")
            body["limits"] = None
        request = PolicyUpdate.model_validate(body)
        return self._compute._typed("policies.update", request, PolicyPublic)

    def delete(self, id: str) -> PolicyPublic:
        """Delete a policy (admin only); answers it as it was."""
        return self._compute._typed("policies.delete", IdRequest(id=id), PolicyPublic)


def _constraint_fields(
    allowed_regions: Sequence[str] | None,
    allowed_residencies: Sequence[str] | None,
    allowed_device_classes: Sequence[str] | None,
    allowed_clusters: Sequence[str] | None,
    denied_clusters: Sequence[str] | None,
    cost_ceiling: str | None,
) -> JsonObject:
    lists = {
        "allowed_regions": allowed_regions,
        "allowed_residencies": allowed_residencies,
        "allowed_device_classes": allowed_device_classes,
        "allowed_clusters": allowed_clusters,
        "denied_clusters": denied_clusters,
    }
    return {
        **{k: list(v) for k, v in lists.items() if v is not None},
        **_fields(cost_ceiling=cost_ceiling),
    }


@_refusing_bad_arguments
class DeviceClasses(_Resource):
    def create(
        self, *, name: str, cls: AtomClass, selector: Selector | Mapping[str, Any] | None = None
    ) -> DeviceClassPublic:
        """Create a device class (admin only): atoms of `cls` that match `selector` (a device
        request's selector, e.g. `{"matchExpressions": [{"key": "gpuModel", "op": "In", "values":
        ["H100-80GB"]}]}`); no selector: every atom of the class."""
        request = DeviceClassCreate.model_validate(_fields(name=name, cls=cls, selector=selector))
        return self._compute._typed("deviceClasses.create", request, DeviceClassPublic)

    def list(self, *, limit: int | None = None, cursor: str | None = None) -> Page[DeviceClassPublic]:
        query = DeviceClassListQuery(**_fields(limit=limit, cursor=cursor))
        return self._compute._typed("deviceClasses.list", query, Page[DeviceClassPublic])

    def get(self, id: str) -> DeviceClassPublic:
        return self._compute._typed("deviceClasses.get", IdRequest(id=id), DeviceClassPublic)


@_refusing_bad_arguments
class PriorityClasses(_Resource):
    def create(self, *, name: str, priority: int, preemptible: bool = False) -> PriorityClassPublic:
        """Create a priority class (admin only): `priority` from -1,000,000 to 1,000,000, higher wins."""
        request = PriorityClassCreate(name=name, priority=priority, preemptible=preemptible)
        return self._compute._typed("priorityClasses.create", request, PriorityClassPublic)

    def list(self, *, limit: int | None = None, cursor: str | None = None) -> Page[PriorityClassPublic]:
        query = PriorityClassListQuery(**_fields(limit=limit, cursor=cursor))
        return self._compute._typed("priorityClasses.list", query, Page[PriorityClassPublic])

    def get(self, id: str) -> PriorityClassPublic:
        return self._compute._typed("priorityClasses.get", IdRequest(id=id), PriorityClassPublic)


class Endpoints(_Resource):
    def create(
        self,
        *,
        name: str,
        variants: Sequence[Mapping[str, Any]],
        tenant_id: str | None = None,
    ) -> EndpointPublic:
        """Create an inference endpoint. Each variant, in the seed's field names: `{name, poolId,
        instanceCount, acceleratorPartitionLayouts: [{acceleratorPartitionTypes: [...]}],
        pricePerInstanceHour?}`. Without `tenant_id` the endpoint is the credential's tenant's (an
        admin must give one). It answers `Creating` (or `Failed` with the reason) at once; `get`
        shows it `InService` once every instance is cut."""
        request = EndpointCreate.model_validate(
            _fields(name=name, tenantId=tenant_id, variants=[dict(v) for v in variants])
        )
        return self._compute._typed("endpoints.create", request, EndpointPublic)

    def list(
        self, *, tenant_id: str | None = None, limit: int | None = None, cursor: str | None = None
    ) -> Page[EndpointPublic]:
        query = EndpointListQuery(**_fields(tenant_id=tenant_id, limit=limit, cursor=cursor))
        return self._compute._typed("endpoints.list", query, Page[EndpointPublic])

    def get(self, name: str) -> EndpointPublic:
        return self._compute._typed("endpoints.get", NameRequest(name=name), EndpointPublic)

    def logs(
        self, name: str, component: str, *, copy: int | None = None, tail: int | None = None
    ) -> LogsPublic:
        """The newest `tail` lines (default 100, at most 10,000 and 1 MiB) of the container log of
        `component`'s copy `copy` (default: its first copy on a node), read through the node's agent.
        UNAVAILABLE: the node serves no logs (`bcd run --listen`) or does not answer."""
        request = EndpointLogsRequest.model_validate(
            _fields(name=name, component=component, copy=copy, tail=tail)
        )
        return self._compute._typed("endpoints.logs", request, LogsPublic)

    def exec(
        self,
        name: str,
        component: str,
        command: Sequence[str],
        *,
        copy: int | None = None,
        timeout_seconds: int | None = None,
    ) -> ExecPublic:
        """Run `command` (argv: 1 to 64 arguments; never a shell line) in the container of
        `component`'s copy `copy` (default: its first copy on a node) through the node's agent, for
        at most `timeout_seconds` (1 to 60, default 10): its exit code, stdout and stderr (1 MiB
        each). No TTY, no stdin. Logged as a `replica.exec` event. Never resent."""
        try:
            request = EndpointExecRequest.model_validate(
                _fields(
                    name=name,
                    component=component,
                    copy=copy,
                    command=list(command),
                    timeoutSeconds=timeout_seconds,
                )
            )
        except ValidationError as exc:  # this resource's methods are not all wrapped to say so
            raise _invalid_input("endpoints.exec", exc) from None
        compute = self._compute
        return compute._typed("endpoints.exec", request, ExecPublic, _exec_timeout(compute, timeout_seconds))

    def update(self, name: str, layouts: Mapping[str, Sequence[str]]) -> EndpointPublic:
        """Change the layouts of some variants live (`{variant: ["mig-2g.20gb", ...]}`): checked up
        front, then re-cut instance by instance (`Updating`, then `InService`)."""
        request = EndpointUpdate.model_validate(
            {
                "name": name,
                "variants": [
                    {"name": v, "acceleratorPartitionLayouts": [{"acceleratorPartitionTypes": list(t)}]}
                    for v, t in layouts.items()
                ],
            }
        )
        return self._compute._typed("endpoints.update", request, EndpointPublic)

    def delete(self, name: str, *, dry_run: bool = False) -> EndpointPublic:
        """Delete the endpoint: its nodes go back to their pool's layout through the layout gate.
        `dry_run` answers what the delete would do (`dryRun` true, its `deletion`) and changes
        nothing."""
        request = EndpointDelete(name=name, dry_run=True) if dry_run else EndpointDelete(name=name)
        return self._compute._typed("endpoints.delete", request, EndpointPublic)

    def invoke(
        self,
        name: str,
        component: str,
        body: bytes,
        *,
        content_type: str = "application/octet-stream",
        accept: str | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        """Send `body` (up to 6 MiB) to a ready copy of the endpoint's `component`; the model server's
        answer as it sent it: (status, headers, body), whatever its status (`BC-Invoked-Copy` names
        the copy). A refusal of the server's own (no ready copy, not found, too large) raises its
        error. Never resent: a model server may have acted on it. The model server has 60 s."""
        headers = {COMPONENT_HEADER: component, "Content-Type": content_type}
        if accept is not None:
            headers["Accept"] = accept
        compute = self._compute
        timeout = max(compute._http.timeout.read or 0.0, INVOKE_CLIENT_TIMEOUT_S)
        try:
            response = compute._http.post(
                f"/v1/endpoints/{quote(name, safe='')}/invoke", content=body, headers=headers, timeout=timeout
            )
        except httpx.TransportError as exc:
            raise compute._transport_error(METHODS["endpoints.invoke"], exc, 1) from exc
        if INVOKED_COPY_HEADER not in response.headers and not response.is_success:
            _answer(response)  # the server's own refusal: raises its error
        return response.status_code, dict(response.headers), response.content


class Components(_Resource):
    def create(
        self,
        *,
        name: str,
        endpoint_name: str,
        model: str,
        partition_type: str,
        variant_name: str = "AllTraffic",
        copies: int | None = None,
        min_copies: int | None = None,
        cpu_cores: float | str | None = None,
        memory_mib: int | None = None,
        container: Mapping[str, Any] | None = None,
        invoke_path: str | None = None,
    ) -> ComponentPublic:
        """Deploy `model` on `partition_type` partitions of an endpoint's variant: each of `copies`
        takes a free partition of that type on a node whose host has its `cpu_cores` and
        `memory_mib`; the rest wait (`pending`) and are placed as partitions free up. `container`
        (camelCase, as `wire.containers.Container`) is the model server each copy runs, served on
        `invoke_path` (default `/invocations`)."""
        request = ComponentCreate.model_validate(
            _fields(
                name=name,
                endpointName=endpoint_name,
                variantName=variant_name,
                model=model,
                partitionType=partition_type,
                copies=copies,
                minCopies=min_copies,
                cpuCores=cpu_cores,
                memoryMiB=memory_mib,
                container=None if container is None else dict(container),
                invokePath=invoke_path,
            )
        )
        return self._compute._typed("components.create", request, ComponentPublic)

    def list(
        self, *, endpoint_name: str | None = None, limit: int | None = None, cursor: str | None = None
    ) -> Page[ComponentPublic]:
        query = ComponentListQuery(**_fields(endpoint_name=endpoint_name, limit=limit, cursor=cursor))
        return self._compute._typed("components.list", query, Page[ComponentPublic])

    def get(self, name: str) -> ComponentPublic:
        """The component and each copy's node, GPU, partition and `MIG-…` uuid: the routing table."""
        return self._compute._typed("components.get", NameRequest(name=name), ComponentPublic)

    def scale(self, name: str, copies: int, *, min_copies: int | None = None) -> ComponentPublic:
        request = ComponentScale(**_fields(name=name, copies=copies, min_copies=min_copies))
        return self._compute._typed("components.scale", request, ComponentPublic)

    def delete(self, name: str) -> ComponentPublic:
        return self._compute._typed("components.delete", NameRequest(name=name), ComponentPublic)


def _placing(
    *,
    device_class: str | None,
    device_count: int | None,
    replicas: int | None,
    strategy: Strategy | None,
    cluster_floors: Mapping[str, int] | None,
    max_clusters: int | None,
    cluster: str | None,
    requires_single_topology_domain: bool | None,
    topology_domain_kind: DomainKind | None,
    min_memory_gib: float | None = None,
    min_compute_slices: int | None = None,
    nvlink_peer: bool | None = None,
) -> JsonObject:
    """The placement fields `workloads.create` and `placement.preview` share, as given: a shape by
    `device_class`, or by capability (`min_memory_gib`, `min_compute_slices`, `nvlink_peer`)."""
    shape = None
    capability = _fields(
        memory_gib=None if min_memory_gib is None else {"min": min_memory_gib},
        compute_slices=None if min_compute_slices is None else {"min": min_compute_slices},
        nvlink_peer=nvlink_peer,
    )
    if device_class is not None or capability:
        shape = _fields(device_class=device_class, device_count=device_count, capability=capability or None)
    return _fields(
        shape=shape,
        replicas=replicas,
        strategy=strategy,
        cluster_floors=dict(cluster_floors) if cluster_floors is not None else None,
        max_clusters=max_clusters,
        cluster=cluster,
        requires_single_topology_domain=requires_single_topology_domain,
        topology_domain_kind=topology_domain_kind,
    )


@_refusing_bad_arguments
class Workloads(_Resource):
    def create(
        self,
        *,
        name: str,
        device_class: str | None = None,
        device_count: int = 1,
        replicas: int = 1,
        tenant_id: str | None = None,
        strategy: Strategy | None = None,
        cluster_floors: Mapping[str, int] | None = None,
        max_clusters: int | None = None,
        cluster: str | None = None,
        priority_class: str | None = None,
        allowed_regions: Sequence[str] | None = None,
        allowed_clusters: Sequence[str] | None = None,
        requires_single_topology_domain: bool | None = None,
        topology_domain_kind: DomainKind | None = None,
        min_memory_gib: float | None = None,
        min_compute_slices: int | None = None,
        nvlink_peer: bool | None = None,
        container: Mapping[str, Any] | None = None,
    ) -> WorkloadPublic:
        """Create a workload: `replicas` of `device_count` devices of `device_class` (or of the
        cheapest kind of device that gives `min_memory_gib`, `min_compute_slices` and an NVLink peer
        when `nvlink_peer`: the answer's `resolution` says which, and why cheaper kinds were not),
        placed across clusters by `strategy` (pack or spread). `cluster` pins it there;
        `allowed_regions` or `allowed_clusters` make its `<name>-placement` policy. Without
        `tenant_id` the server takes the credential's tenant (an admin must give one). `container`
        (camelCase, as `wire.containers.Container`) is what each replica runs: its `shape.container`.
        The answer carries a verdict per cluster."""
        placing = _placing(
            device_class=device_class,
            device_count=device_count,
            replicas=replicas,
            strategy=strategy,
            cluster_floors=cluster_floors,
            max_clusters=max_clusters,
            cluster=cluster,
            requires_single_topology_domain=requires_single_topology_domain,
            topology_domain_kind=topology_domain_kind,
            min_memory_gib=min_memory_gib,
            min_compute_slices=min_compute_slices,
            nvlink_peer=nvlink_peer,
        )
        if container is not None:
            placing["shape"] = {**placing.get("shape", {}), "container": dict(container)}
        request = WorkloadCreate.model_validate(
            _fields(
                name=name,
                tenant_id=tenant_id,
                priority_class=priority_class,
                allowed_regions=list(allowed_regions) if allowed_regions is not None else None,
                allowed_clusters=list(allowed_clusters) if allowed_clusters is not None else None,
                **placing,
            )
        )
        return self._compute._typed("workloads.create", request, WorkloadPublic)

    def list(
        self, *, tenant_id: str | None = None, limit: int | None = None, cursor: str | None = None
    ) -> Page[WorkloadPublic]:
        query = WorkloadListQuery.model_validate(_fields(tenant_id=tenant_id, limit=limit, cursor=cursor))
        return self._compute._typed("workloads.list", query, Page[WorkloadPublic])

    def get(self, id: str) -> WorkloadPublic:
        """A workload by id or name, with its deployments."""
        return self._compute._typed("workloads.get", IdRequest(id=id), WorkloadPublic)

    def logs(
        self, id: str, *, replica: int | None = None, cluster: str | None = None, tail: int | None = None
    ) -> LogsPublic:
        """The newest `tail` lines (default 100, at most 10,000 and 1 MiB) of replica `replica`'s
        container log (its number in its deployment; default: the first replica on a node), read
        through the node's agent. UNAVAILABLE: the node serves no logs (`bcd run --listen`) or does
        not answer."""
        request = WorkloadLogsRequest.model_validate(
            _fields(id=id, replica=replica, cluster=cluster, tail=tail)
        )
        return self._compute._typed("workloads.logs", request, LogsPublic)

    def exec(
        self,
        id: str,
        command: Sequence[str],
        *,
        replica: int | None = None,
        cluster: str | None = None,
        timeout_seconds: int | None = None,
    ) -> ExecPublic:
        """Run `command` (argv: 1 to 64 arguments; never a shell line) in replica `replica`'s
        container (default: the first replica on a node) through the node's agent, for at most
        `timeout_seconds` (1 to 60, default 10): its exit code, stdout and stderr (1 MiB each). No
        TTY, no stdin. Logged as a `replica.exec` event. Never resent."""
        request = WorkloadExecRequest.model_validate(
            _fields(
                id=id, replica=replica, cluster=cluster, command=list(command), timeoutSeconds=timeout_seconds
            )
        )
        compute = self._compute
        return compute._typed("workloads.exec", request, ExecPublic, _exec_timeout(compute, timeout_seconds))

    def scale(self, id: str, replicas: int, *, generation: int | None = None) -> WorkloadPublic:
        """Set the workload's replicas; with `generation`, only if it is still the current one
        (else CONFLICT). Replicas no cluster can take show as `unplaced_replicas`."""
        request = WorkloadScale.model_validate(_fields(id=id, replicas=replicas, generation=generation))
        return self._compute._typed("workloads.scale", request, WorkloadPublic)

    def delete(self, id: str) -> WorkloadPublic:
        """Delete the workload: its replicas' devices are freed; answers it as it was."""
        return self._compute._typed("workloads.delete", IdRequest(id=id), WorkloadPublic)

    def drain(self, id: str, *, cluster: str, dry_run: bool = False, force: bool = False) -> OperationPublic:
        """Move the workload out of `cluster`: `operations.create` of a `workload.drain`. Replicas no
        other cluster can take refuse it (`INVALID_STATE`, reason `nowhere_to_go`) unless `force`;
        `dry_run` answers what it would do (status `planned`) and changes nothing."""
        return self._compute.operations.create(
            workload_id=id, payload={"cluster": cluster}, dry_run=dry_run, force=force
        )

    def release_replica(self, allocation: str) -> OperationPublic:
        """End a terminating replica whose node will not release it (admin): `operations.create`
        of a `replica.release`."""
        return self._compute.operations.create(type="replica.release", payload={"allocation": allocation})


@_refusing_bad_arguments
class Deployments(_Resource):
    def list(
        self, *, workload_id: str | None = None, limit: int | None = None, cursor: str | None = None
    ) -> Page[DeploymentPublic]:
        """Deployments (a workload's share in one cluster) the token may see, of `workload_id`."""
        query = DeploymentListQuery.model_validate(
            _fields(workload_id=workload_id, limit=limit, cursor=cursor)
        )
        return self._compute._typed("deployments.list", query, Page[DeploymentPublic])


@_refusing_bad_arguments
class Placement(_Resource):
    def preview(
        self,
        *,
        workload_id: str | None = None,
        tenant_id: str | None = None,
        device_class: str | None = None,
        device_count: int | None = None,
        replicas: int | None = None,
        strategy: Strategy | None = None,
        cluster_floors: Mapping[str, int] | None = None,
        max_clusters: int | None = None,
        cluster: str | None = None,
        requires_single_topology_domain: bool | None = None,
        topology_domain_kind: DomainKind | None = None,
        priority_class: str | None = None,
        min_memory_gib: float | None = None,
        min_compute_slices: int | None = None,
        nvlink_peer: bool | None = None,
    ) -> PlacementPreview:
        """What placement would choose now, writing nothing: for the workload `workload_id` as it
        stands, or for a shape (`device_class`, `device_count`, `replicas` and the other placement
        fields of `workloads.create`). A verdict per cluster, the shares, the replicas left over,
        and the replicas of other workloads it would evict (`priority_class` decides whom)."""
        request = PlacementPreviewRequest.model_validate(
            _fields(
                workload_id=workload_id,
                tenant_id=tenant_id,
                priority_class=priority_class,
                **_placing(
                    device_class=device_class,
                    device_count=device_count,
                    replicas=replicas,
                    strategy=strategy,
                    cluster_floors=cluster_floors,
                    max_clusters=max_clusters,
                    cluster=cluster,
                    requires_single_topology_domain=requires_single_topology_domain,
                    topology_domain_kind=topology_domain_kind,
                    min_memory_gib=min_memory_gib,
                    min_compute_slices=min_compute_slices,
                    nvlink_peer=nvlink_peer,
                ),
            )
        )
        return self._compute._typed("placement.preview", request, PlacementPreview)


@_refusing_bad_arguments
class Operations(_Resource):
    def create(
        self,
        *,
        workload_id: str | None = None,
        payload: Mapping[str, str],
        type: Literal["workload.drain", "replica.release"] = "workload.drain",
        dry_run: bool = False,
        force: bool = False,
    ) -> OperationPublic:
        """Start an operation: `workload.drain` with `payload={"cluster": ...}` removes the workload's
        deployment there and places its replicas elsewhere (`force`: even when some would have
        nowhere to go; `dry_run`: only answer what it would do); `replica.release` with
        `payload={"allocation": ...}` (admin) ends a terminating replica whose node will not release
        it."""
        flags = {"dry_run": True} if dry_run else {}
        if force:
            flags["force"] = True
        request = OperationCreate(type=type, workload_id=workload_id, payload=dict(payload), **flags)
        return self._compute._typed("operations.create", request, OperationPublic)

    def get(self, id: str) -> OperationPublic:
        return self._compute._typed("operations.get", IdRequest(id=id), OperationPublic)


@_refusing_bad_arguments
class Reservations(_Resource):
    def create(
        self,
        *,
        pool_id: str,
        devices: Sequence[DeviceRequest | Mapping[str, Any]],
        duration: str,
        tenant_id: str | None = None,
        start: datetime | None = None,
        idempotency_key: str | None = None,
    ) -> ReservationPublic:
        """Book atoms of a pool, e.g. ``devices=[{"class": "gpu", "count": 2}]``, ``duration="4h"``.

        Without ``tenant_id`` the server takes the credential's tenant. Without ``idempotency_key`` one
        is generated, so a retried call returns the first reservation instead of booking twice.
        A key used before answers that first reservation as it stands now, with ``replayed`` True: a
        reused key whose reservation was released since gets ``status`` ``released``, not a new booking.
        """
        request = ReservationCreate.model_validate(
            _fields(
                tenant_id=tenant_id,
                pool_id=pool_id,
                # Validated as part of the request, so a refusal names the device (`devices[1].count`).
                devices=[device if isinstance(device, DeviceRequest) else dict(device) for device in devices],
                start=start,
                duration=duration,
                idempotency_key=idempotency_key,
            )
        )
        return self._compute._typed("reservations.create", request, ReservationPublic)

    def get(self, id: str) -> ReservationPublic:
        return self._compute._typed("reservations.get", IdRequest(id=id), ReservationPublic)

    def list(
        self,
        *,
        tenant_id: str | None = None,
        pool_id: str | None = None,
        status: ReservationStatus | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Page[ReservationPublic]:
        query = ReservationListQuery.model_validate(
            _fields(tenant_id=tenant_id, pool_id=pool_id, status=status, limit=limit, cursor=cursor)
        )
        return self._compute._typed("reservations.list", query, Page[ReservationPublic])

    def iter(
        self,
        *,
        tenant_id: str | None = None,
        pool_id: str | None = None,
        status: ReservationStatus | None = None,
        page_size: int | None = None,
    ) -> Iterator[ReservationPublic]:
        """Every matching reservation, following `nextCursor` page by page."""
        cursor: str | None = None
        while True:
            page = self.list(
                tenant_id=tenant_id, pool_id=pool_id, status=status, limit=page_size, cursor=cursor
            )
            yield from page.items
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def cancel(self, id: str) -> ReservationPublic:
        return self._compute._typed("reservations.cancel", IdRequest(id=id), ReservationPublic)

    def release(self, id: str) -> ReservationPublic:
        return self._compute._typed("reservations.release", IdRequest(id=id), ReservationPublic)

    def extend(self, id: str, duration: str) -> ReservationPublic:
        """Move the reservation's end later by `duration` (`30m`, `4h`); BookingConflict when one
        of its atoms is booked by someone else in the added time."""
        return self._compute._typed(
            "reservations.extend", ReservationExtend(id=id, duration=duration), ReservationPublic
        )


Bound = str | date | datetime | None
"""One end of a period: `"2030-01-01"`, a date, or an aware datetime (sent as ISO 8601)."""


def _bound(value: Bound) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return value.isoformat()


@_refusing_bad_arguments
class Usage(_Resource):
    def list(
        self,
        *,
        from_: Bound = None,
        to: Bound = None,
        tenant_id: str | None = None,
        pool_id: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
        slurm_job_ids: bool = False,
    ) -> Page[UsageRowPublic]:
        """GPU-hours per booking in `[from_, to)` (both None: this calendar month), a page at a time;
        a tenant's token sees its own. `slurm_job_ids`: each row with the Slurm job that held it."""
        query = UsageListQuery.model_validate(
            _fields(
                tenant_id=tenant_id,
                pool_id=pool_id,
                **{"from": _bound(from_)},
                to=_bound(to),
                limit=limit,
                cursor=cursor,
                slurm_job_ids=slurm_job_ids or None,
            )
        )
        return self._compute._typed("usage.list", query, Page[UsageRowPublic])

    def report(self, *, month: str | None = None) -> UsageReportPublic:
        """Every tenant's GPU-hours, share of the fleet and cost for the calendar month `month`
        (`YYYY-MM`; None: the current one), as one table (admin)."""
        query = UsageReportQuery.model_validate(_fields(month=month))
        return self._compute._typed("usage.report", query, UsageReportPublic)

    def iter(
        self,
        *,
        from_: Bound = None,
        to: Bound = None,
        tenant_id: str | None = None,
        pool_id: str | None = None,
        page_size: int | None = None,
        slurm_job_ids: bool = False,
    ) -> Iterator[UsageRowPublic]:
        """Every usage row of the period, following `nextCursor`: one page in memory at a time."""
        cursor: str | None = None
        while True:
            page = self.list(
                from_=from_,
                to=to,
                tenant_id=tenant_id,
                pool_id=pool_id,
                limit=page_size,
                cursor=cursor,
                slurm_job_ids=slurm_job_ids,
            )
            yield from page.items
            if not page.next_cursor:
                return
            cursor = page.next_cursor


@_refusing_bad_arguments
class Bills(_Resource):
    def get(self, tenant_id: str, *, from_: Bound = None, to: Bound = None) -> BillPublic:
        """The tenant's bill for `[from_, to)` (both None: this calendar month)."""
        query = BillQuery.model_validate(
            _fields(tenant_id=tenant_id, **{"from": _bound(from_)}, to=_bound(to))
        )
        return self._compute._typed("bills.get", query, BillPublic)


@_refusing_bad_arguments
class Prices(_Resource):
    def set(self, *, meter: str, per_hour: str, currency: str) -> PricePublic:
        """Set what one hour of `meter` costs (admin only): `per_hour` a decimal string (`"2.50"`)."""
        request = PriceSet(meter=meter, per_hour=per_hour, currency=currency)
        return self._compute._typed("prices.set", request, PricePublic)

    def list(self, *, limit: int | None = None, cursor: str | None = None) -> Page[PricePublic]:
        query = PriceListQuery(**_fields(limit=limit, cursor=cursor))
        return self._compute._typed("prices.list", query, Page[PricePublic])


@_refusing_bad_arguments
class Partitions(_Resource):
    """Partition bookings (admin only): a GPU's whole family of atoms held for a window, as a MIG
    layout change holds it; for maintenance."""

    def book(
        self,
        gpu_id: str,
        *,
        start: datetime | None = None,
        end: datetime | None = None,
        duration: str | None = None,
    ) -> PartitionBookingPublic:
        """Hold every atom of GPU `gpu_id` from `start` (None: now) to `end`, or for `duration` (like
        `"4h"`): exactly one of the two, at most 30 days. Answers `status="booked"` with its
        `booking_id`, or `status="conflict"` with `free_from` (None: never free) when something of
        the GPU is booked in the window; a conflict is an answer, not an error."""
        request = PartitionBook.model_validate(
            _fields(gpu_id=gpu_id, start=start, end=end, duration=duration)
        )
        return self._compute._typed("partitions.book", request, PartitionBookingPublic)

    def release(self, booking_id: str) -> PartitionReleasedPublic:
        """End the partition booking `booking_id` now: the GPU takes new bookings again. Releasing
        one already over changes nothing (`ended` 0)."""
        request = PartitionRelease(booking_id=booking_id)
        return self._compute._typed("partitions.release", request, PartitionReleasedPublic)


class Inventory(_Resource):
    """A read-only inventory listing (clusters, nodes, GPUs); items are JSON objects."""

    def __init__(self, compute: Compute, method_name: str) -> None:
        super().__init__(compute)
        self._method_name = method_name

    def list(
        self, *, limit: int | None = None, cursor: str | None = None, **filters: Any
    ) -> Page[JsonObject]:
        """Filters are passed as query parameters by their names: ``cluster="c1"`` for nodes, ``node=``
        for GPUs. A name the server does not take is refused (InvalidInputError), not ignored."""
        body = _fields(limit=limit, cursor=cursor, **filters)
        return Page[JsonObject].model_validate(self._compute._raw(self._method_name, body))


@_refusing_bad_arguments
class Clusters(Inventory):
    """Clusters: the inventory listing, one cluster, and its phase (admin)."""

    def get(self, id: str) -> ClusterPublic:
        return self._compute._typed("clusters.get", IdRequest(id=id), ClusterPublic)

    def create(
        self,
        id: str,
        *,
        region: str,
        residency: Sequence[str] = (),
        kind: str = "local",
        slurm: SlurmSettings | None = None,
    ) -> ClusterPublic:
        """Create an empty cluster (admin): `local`, or `slurm` with `slurm` saying how to reach it."""
        body = ClusterCreate(id=id, region=region, residency=list(residency), kind=kind, slurm=slurm)
        return self._compute._typed("clusters.create", body, ClusterPublic)

    def update(self, id: str, *, phase: str) -> ClusterPublic:
        """Set the cluster's phase (admin): `active` takes new work; `cordoned` and `draining` take
        no new placements and keep what runs."""
        return self._compute._typed("clusters.update", ClusterUpdate(id=id, phase=phase), ClusterPublic)


@_refusing_bad_arguments
class Nodes(Inventory):
    """Nodes: the inventory listing, cordons (admin), joining, and what a node itself sends and
    reads (signed by the `auth` the client was made with: `bcd.signing.ReportSigner`)."""

    def update(self, node: str, *, cordoned: bool) -> NodePublic:
        """Cordon (`cordoned=True`) or uncordon a node (admin): a cordoned node's atoms take no new
        booking; those it holds stay."""
        return self._compute._typed("nodes.update", NodeUpdate(node=node, cordoned=cordoned), NodePublic)

    def get(self, node: str) -> NodeDetailPublic:
        """One node (admin): its state, its GPUs and the MIG layout each is told, every atom with
        the bookings holding it, and its layout change under way. An unknown node is
        `NotFoundError`."""
        return self._compute._typed("nodes.get", NodeGet(node=node), NodeDetailPublic)

    def slurm_gres(self, node: str) -> NodeSlurmGresPublic:
        """What Slurm is told of one node (admin): `gresConf`, its gres.conf lines, and `nodeLine`,
        its slurm.conf node line. An unknown node is `NotFoundError`; a node Slurm cannot be told
        exactly (a MIG change waiting for its reset) `InvalidStateError`."""
        return self._compute._typed("nodes.slurmGres", NodeSlurmGresGet(node=node), NodeSlurmGresPublic)

    def release_gpu(self, gpu: str) -> GpuPublic:
        """Let GPU `gpu` (its uuid) go from the node that has it (admin): the next node to report
        it takes it. Refused (`InvalidStateError`) while a tenant's booking holds it."""
        return self._compute._typed("nodes.releaseGpu", GpuRelease(gpu=gpu), GpuPublic)

    def join_token(self, node: str, *, ttl_seconds: int | None = None) -> JoinTokenIssued:
        request = JoinTokenCreate.model_validate(_fields(node=node, ttl_seconds=ttl_seconds))
        return self._compute._typed("nodes.joinToken", request, JoinTokenIssued)

    def join(self, node: str, *, token: str, public_key: str) -> NodeJoined:
        request = NodeJoin(node=node, token=token, public_key=public_key)
        return self._compute._typed("nodes.join", request, NodeJoined)

    def report(self, node: str, report: Mapping[str, Any], *, report_id: str | None = None) -> ReportAccepted:
        """Send one report (`{"kind": "Inventory", ...}`) about `node`, signed by the client's `auth`;
        `report_id` makes a resent copy of it take effect once."""
        request = NodeReportSend.model_validate({"node": node, "report": dict(report), "reportId": report_id})
        return self._compute._typed("nodes.report", request, ReportAccepted)

    def spec(self, node: str, *, after: int | None = None, wait: float | None = None) -> NodeSpecPublic:
        """The node's spec; with `after`, waits up to `wait` seconds for another generation (the
        client's timeout must be longer than `wait`)."""
        request = NodeSpecQuery.model_validate(_fields(node=node, after=after, wait=wait))
        return self._compute._typed("nodes.spec", request, NodeSpecPublic)


class Atoms(_Resource):
    def list(
        self,
        *,
        pool: str | None = None,
        cls: AtomClass | None = None,
        attrs: Mapping[str, str] | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Page[JsonObject]:
        """Atoms, filtered by pool, class and attribute values (``attrs={"migProfile": "3g.40gb"}``)."""
        body = _fields(pool=pool, limit=limit, cursor=cursor)
        if cls is not None:
            body["class"] = cls
        if attrs:
            body["attr"] = [f"{key}={value}" for key, value in attrs.items()]
        return Page[JsonObject].model_validate(self._compute._raw("atoms.list", body))


@_refusing_bad_arguments
class Capacity(_Resource):
    def free(
        self,
        *,
        pool: str,
        cls: AtomClass | None = None,
        start: datetime | None = None,
        end: datetime | None = None,
        count: int = 1,
    ) -> CapacityFree:
        """What `pool` could book from `start` (default now) to `end` (default an hour later), per
        kind of atom, with the earliest start at which `count` of a kind are free for that long."""
        query = CapacityFreeQuery.model_validate(
            _fields(pool=pool, cls=cls, from_=start, to=end, count=count)
        )
        return self._compute._typed("capacity.free", query, CapacityFree)

    def accounting(
        self, *, start: datetime, end: datetime, bucket: str | None = None, pool_id: str | None = None
    ) -> CapacityAccounting:
        """Every GPU-hour from `start` to `end` of `pool_id` (default: every pool the token may
        see), per `bucket` (default 1h, at most 1000 buckets), in exactly one state."""
        query = CapacityAccountingQuery.model_validate(
            _fields(pool_id=pool_id, from_=start, to=end, bucket=bucket)
        )
        return self._compute._typed("capacity.accounting", query, CapacityAccounting)

    def summary(self, *, pool_id: str | None = None) -> CapacitySummary:
        """Whole GPUs per model now: total, bookable, booked, unhealthy."""
        query = CapacitySummaryQuery.model_validate(_fields(pool_id=pool_id))
        return self._compute._typed("capacity.summary", query, CapacitySummary)

    def timeline(
        self, *, start: datetime, end: datetime, bucket: str | None = None, pool_id: str | None = None
    ) -> CapacityTimeline:
        """Whole GPUs booked per `bucket` from `start` to `end`: the most at once, and their hours."""
        query = CapacityTimelineQuery.model_validate(
            _fields(pool_id=pool_id, from_=start, to=end, bucket=bucket)
        )
        return self._compute._typed("capacity.timeline", query, CapacityTimeline)

    def by_pool(self, *, pool_id: str | None = None) -> CapacityByPool:
        """Atoms per pool and class now (`gpu`, `gpu.mig`, `gpu.slot`): total, bookable, booked."""
        query = CapacityByPoolQuery.model_validate(_fields(pool_id=pool_id))
        return self._compute._typed("capacity.byPool", query, CapacityByPool)


@_refusing_bad_arguments
class Doctor(_Resource):
    def run(self, *, silent_minutes: int | None = None, mig_waiting_days: int | None = None) -> DoctorReport:
        """What in the fleet needs an operator (admin only): findings sorted by code and subject,
        none when all is well. A joined node with no report for `silent_minutes` (default 10) is
        `node.silent`; a layout change waiting more than `mig_waiting_days` (default 7) from its
        request is `capacity.mig.waiting`."""
        query = DoctorQuery.model_validate(
            _fields(silent_minutes=silent_minutes, mig_waiting_days=mig_waiting_days)
        )
        return self._compute._typed("doctor.run", query, DoctorReport)


REPLAY_CLIENT_TIMEOUT_S = 600.0
"""How long `replay.run` waits: the whole default openb trace (7,064 requests) replays in a few
minutes (docs/traces.md); a contended demand of workloads replays at a few requests a second
(docs/replay.md#how-long-it-takes)."""


@_refusing_bad_arguments
class Replay(_Resource):
    def run(
        self,
        *,
        since: datetime,
        until: datetime,
        demand: JsonObject | None = None,
        fleet: JsonObject | None = None,
        policy: JsonObject | None = None,
        against: JsonObject | None = None,
        fleet_changes: JsonObject | None = None,
    ) -> ReplayReport:
        """Replay `[since, until)` (admin only): `demand` (a demand file's object; None: the
        deployment's own history) over `fleet` (a fleet file's object; None: today's) with
        `fleet_changes` laid over it, under today's policy set with `policy`'s changes, and with
        `against`'s beside it (docs/replay.md)."""
        request = ReplayRun.model_validate(
            _fields(
                since=since,
                until=until,
                demand=demand,
                fleet=fleet,
                fleet_changes=fleet_changes,
                policy=policy,
                against=against,
            )
        )
        return self._compute._typed("replay.run", request, ReplayReport, timeout=REPLAY_CLIENT_TIMEOUT_S)


@_refusing_bad_arguments
class Events(_Resource):
    def list(
        self,
        *,
        type: str | None = None,
        subject: str | None = None,
        after: str | int | None = None,
        limit: int | None = None,
        since: str | datetime | None = None,
        last: int | None = None,
    ) -> Page[EventPublic]:
        """Events the token may read, oldest first, after the event id `after` (from the start
        without it); ``nextCursor`` is set when the page is full and more may follow. `since` (a
        timezone-aware time, or a duration such as ``"1h"`` back from the server's clock) keeps
        those logged at or after it; `last` (not with `limit`) asks for the newest `last`."""
        query = EventListQuery.model_validate(
            _fields(
                type=type,
                subject=subject,
                after=None if after is None else str(after),
                since=since.isoformat() if isinstance(since, datetime) else since,
                last=last,
                limit=limit,
            )
        )
        return self._compute._typed("events.list", query, Page[EventPublic])

    def iter(
        self,
        *,
        type: str | None = None,
        subject: str | None = None,
        after: str | int | None = None,
        page_size: int | None = None,
    ) -> Iterator[EventPublic]:
        """Every event after `after` that the stream holds now, following `nextCursor` page by page.
        To follow the stream, call it again with the id of the last event received."""
        cursor = None if after is None else str(after)
        while True:
            page = self.list(type=type, subject=subject, after=cursor, limit=page_size)
            yield from page.items
            if not page.next_cursor:
                return
            cursor = page.next_cursor
