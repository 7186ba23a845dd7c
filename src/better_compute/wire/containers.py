"""The wire of what runs: a container a workload replica or an endpoint copy asks its node to start
(docs/placement.md#what-runs). Limits are the server's (`domain.kernel.containers`, which checks
them, with the image reference and the environment names); these models give the shape."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from better_compute.wire.common import WireAnswer, WireRequest

MAX_IMAGE = 255
MAX_ARGV = 64
MAX_ENV = 128
MAX_PORTS = 16


class HttpGetPublic(WireAnswer):
    path: str = "/"
    port: int


class HttpGet(HttpGetPublic, WireRequest):
    path: str = Field(default="/", json_schema_extra={"maxLength": 1024})
    port: int = Field(strict=True, json_schema_extra={"minimum": 1, "maximum": 65535})


class ExecPublic(WireAnswer):
    command: list[str]


class Exec(ExecPublic, WireRequest):
    command: list[str] = Field(json_schema_extra={"minItems": 1, "maxItems": 32})


class ProbePublic(WireAnswer):
    """A readiness probe: `httpGet` (a 2xx or 3xx passes) or `exec` (exit 0 passes), exactly one."""

    http_get: HttpGetPublic | None = Field(default=None, exclude_if=lambda v: v is None)
    exec: ExecPublic | None = Field(default=None, exclude_if=lambda v: v is None)
    period_seconds: int = 5
    timeout_seconds: int = 1
    failure_threshold: int = 3
    initial_delay_seconds: int = 0


class Probe(ProbePublic, WireRequest):
    http_get: HttpGet | None = None
    exec: Exec | None = None
    period_seconds: int = Field(strict=True, default=5, json_schema_extra={"minimum": 1, "maximum": 300})
    timeout_seconds: int = Field(strict=True, default=1, json_schema_extra={"minimum": 1, "maximum": 60})
    failure_threshold: int = Field(strict=True, default=3, json_schema_extra={"minimum": 1, "maximum": 30})
    initial_delay_seconds: int = Field(
        strict=True, default=0, json_schema_extra={"minimum": 0, "maximum": 3600}
    )


class PortPublic(WireAnswer):
    container_port: int


class Port(PortPublic, WireRequest):
    container_port: int = Field(strict=True, json_schema_extra={"minimum": 1, "maximum": 65535})
    name: str | None = Field(default=None, max_length=63)
    protocol: Literal["TCP"] = "TCP"


class ResourcesPublic(WireAnswer):
    cpu: float | None = Field(default=None, exclude_if=lambda v: v is None)
    memory_mib: int | None = Field(default=None, alias="memoryMiB", exclude_if=lambda v: v is None)


class Resources(ResourcesPublic, WireRequest):
    cpu: float | str | None = Field(  # type: ignore[assignment]
        default=None, description="Cores (0.01 to 1024), as a number or Kubernetes' `500m`."
    )
    memory_mib: int | None = Field(
        strict=True,
        default=None,
        alias="memoryMiB",
        json_schema_extra={"minimum": 16, "maximum": 16 * 1024 * 1024},
    )


class ContainerPublic(WireAnswer):
    """What each replica (or copy) runs: `image` (a reference, never pulled by the server), `command`
    and `args` (the image's own when empty), `env`, `ports`, a `readinessProbe`, and `resources`."""

    image: str
    command: list[str] = Field(default_factory=list)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    ports: list[PortPublic] = Field(default_factory=list)
    readiness_probe: ProbePublic | None = Field(default=None, exclude_if=lambda v: v is None)
    resources: ResourcesPublic | None = Field(default=None, exclude_if=lambda v: v is None)


class Container(ContainerPublic, WireRequest):
    image: str = Field(json_schema_extra={"maxLength": MAX_IMAGE})
    command: list[str] = Field(default_factory=list, json_schema_extra={"maxItems": MAX_ARGV})
    args: list[str] = Field(default_factory=list, json_schema_extra={"maxItems": MAX_ARGV})
    env: dict[str, str] = Field(default_factory=dict, json_schema_extra={"maxProperties": MAX_ENV})
    ports: list[Port] = Field(default_factory=list, json_schema_extra={"maxItems": MAX_PORTS})  # type: ignore[assignment]
    readiness_probe: Probe | None = None
    resources: Resources | None = None
