"""What runs on an atom: a container a workload replica or an endpoint copy asks its node to start
(docs/placement.md#what-runs).

One checked value, `ContainerSpec`, shared by workloads and endpoint components and carried in the
node's spec to `bcd`, which runs it through the node's container runtime. Everything a client
controls is bounded here (the limits below are documented in docs/placement.md#what-runs), and the image
reference is parsed by the grammar of the distribution spec's references, never executed: a
reference that would read as an option to a runtime (`--privileged`) or hold a space is refused.
Environment names the node sets itself (the device's `NVIDIA_*`, `CUDA_MPS_*`, `BC_*`) are refused,
so a container can never be told to see a device other than its own.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from better_compute.domain.kernel.errors import InvalidInput

MAX_IMAGE = 255
"""The longest image reference (the distribution spec's limit on a repository name)."""
MAX_ARGV = 64
"""The most items of `command`, and of `args`."""
MAX_ARG = 4096
"""The longest one item of `command` or `args`."""
MAX_ARGV_BYTES = 32 * 1024
"""The most characters of `command` and `args` together."""
MAX_ENV = 128
"""The most environment variables."""
MAX_ENV_NAME = 256
MAX_ENV_VALUE = 32 * 1024
MAX_ENV_BYTES = 64 * 1024
"""The most characters of names and values together."""
MAX_PORTS = 16
MAX_PROBE_PATH = 1024
MAX_PROBE_EXEC = 32
MAX_CPU = 1024.0
MIN_CPU = 0.01
MIN_MEMORY_MIB = 16
MAX_MEMORY_MIB = 16 * 1024 * 1024

RESERVED_ENV_PREFIXES = ("NVIDIA_", "CUDA_MPS_", "BC_")
"""Environment names the node sets for the device it hands over: never a client's."""
RESERVED_ENV = frozenset({"CUDA_VISIBLE_DEVICES"})

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(
    rf"^(?:(?P<domain>{_DOMAIN})/)?(?P<path>{_COMPONENT}(?:/{_COMPONENT})*)"
    rf"(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?$"
)
_CPU = re.compile(r"^(?:[0-9]{1,7}m|[0-9]{1,4}(?:\.[0-9]{1,3})?)$")
"""Cores as Kubernetes writes them: `2`, `0.5`, or millicores `500m` (no signs, exponents or `_`)."""
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PROBE_PATH = re.compile(r"^/[!-~]*$")
"""A path of printable ASCII without spaces, from the root."""


@dataclass(frozen=True, slots=True)
class ImageReference:
    """An image reference as parsed: what `check_image` read of it (docs only; the node hands the
    reference to its runtime as it was written)."""

    domain: str | None
    path: str
    tag: str | None
    digest: str | None


@dataclass(frozen=True, slots=True)
class Probe:
    """A readiness probe: an HTTP GET of `http_path` on `http_port` (a 2xx or 3xx answer passes), or
    `exec` run in the container (exit 0 passes). Ready after one pass; not ready after
    `failure_threshold` failures in a row."""

    http_path: str | None = None
    http_port: int | None = None
    exec: tuple[str, ...] = ()
    period_seconds: int = 5
    timeout_seconds: int = 1
    failure_threshold: int = 3
    initial_delay_seconds: int = 0

    def document(self) -> dict[str, Any]:
        out: dict[str, Any] = (
            {"httpGet": {"path": self.http_path, "port": self.http_port}}
            if self.http_path is not None
            else {"exec": {"command": list(self.exec)}}
        )
        out.update(
            periodSeconds=self.period_seconds,
            timeoutSeconds=self.timeout_seconds,
            failureThreshold=self.failure_threshold,
            initialDelaySeconds=self.initial_delay_seconds,
        )
        return out


@dataclass(frozen=True, slots=True)
class ContainerSpec:
    """What a replica or a copy runs: checked (`parse_container`), the same on every node."""

    image: str
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    ports: tuple[int, ...] = ()
    readiness: Probe | None = None
    cpu: float | None = None
    memory_mib: int | None = None

    def document(self) -> dict[str, Any]:
        """The container as `parse_container` takes it back: what is stored, shown and sent to the
        node (fixed key order, so the node spec's digest is stable)."""
        out: dict[str, Any] = {
            "image": self.image,
            "command": list(self.command),
            "args": list(self.args),
            "env": dict(sorted(self.env.items())),
            "ports": [{"containerPort": p} for p in self.ports],
        }
        if self.readiness is not None:
            out["readinessProbe"] = self.readiness.document()
        resources: dict[str, Any] = {}
        if self.cpu is not None:
            resources["cpu"] = self.cpu
        if self.memory_mib is not None:
            resources["memoryMiB"] = self.memory_mib
        if resources:
            out["resources"] = resources
        return out


def _refuse(message: str, field_: str) -> InvalidInput:
    return InvalidInput(message[:300], {"field": field_})


TRANSPORTS = frozenset(
    {
        "docker-archive",
        "docker-daemon",
        "oci",
        "oci-archive",
        "dir",
        "containers-storage",
        "sif",
        "tarball",
        "ostree",
    }
)
"""containers-image's transports that read the node's files or daemons (`docker:` needs `//`, which
the grammar refuses, so `docker:24` stays Docker Hub's image): `oci-archive:foo` parses as the name
`oci-archive` tagged `foo`, but a runtime reads it as a file on the node (even with `--pull=never`),
so a bare name spelt like a transport is refused: an image comes from a registry or the node's
image store, never a path."""


def check_image(raw: object, field_: str = "container.image") -> ImageReference:
    """The parsed image reference, or INVALID_INPUT saying what is wrong with it (a bare name spelt
    like a transport, `oci-archive:...`, included: `TRANSPORTS`)."""
    if not isinstance(raw, str) or not raw:
        raise _refuse(f"{field_} must be an image reference such as registry.example/team/model:1.2", field_)
    if len(raw) > MAX_IMAGE:
        raise _refuse(f"{field_} is longer than {MAX_IMAGE} characters", field_)
    m = _REFERENCE.match(raw)
    if m is None:
        raise _refuse(
            f"{field_} {raw!r} is not an image reference ([registry/]name[:tag][@digest],"
            " lowercase name components)",
            field_,
        )
    if m["domain"] is None and m["path"] in TRANSPORTS:
        raise _refuse(
            f"{field_} {raw!r} names a {m['path']}: transport, which reads images from the node's"
            " files; name an image in a registry or the node's image store",
            field_,
        )
    return ImageReference(m["domain"], m["path"], m["tag"], m["digest"])


def _argv(raw: object, field_: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list | tuple) or not all(isinstance(a, str) for a in raw):
        raise _refuse(f"{field_} must be a list of strings", field_)
    if len(raw) > MAX_ARGV:
        raise _refuse(f"{field_} has {len(raw)} items; at most {MAX_ARGV}", field_)
    for a in raw:
        if len(a) > MAX_ARG:
            raise _refuse(f"{field_} has an item longer than {MAX_ARG} characters", field_)
        if "\x00" in a:
            raise _refuse(f"{field_} has an item holding a NUL character", field_)
    return tuple(raw)


def _env(raw: object, field_: str) -> dict[str, str]:
    if raw is None:
        return {}
    if isinstance(raw, list):
        # Kubernetes' spelling: [{name, value}].
        pairs: dict[str, object] = {}
        for item in raw:
            if not isinstance(item, Mapping) or set(item) - {"name", "value"} or "name" not in item:
                raise _refuse(f"{field_} items must be {{name, value}}", field_)
            pairs[str(item["name"])] = item.get("value", "")
        raw = pairs
    if not isinstance(raw, Mapping):
        raise _refuse(f"{field_} must be an object of names to strings", field_)
    if len(raw) > MAX_ENV:
        raise _refuse(f"{field_} has {len(raw)} variables; at most {MAX_ENV}", field_)
    total = 0
    out: dict[str, str] = {}
    for name, value in raw.items():
        if not isinstance(name, str) or len(name) > MAX_ENV_NAME or not _ENV_NAME.match(name):
            raise _refuse(
                f"{field_} name {str(name)[:80]!r} is not a variable name ([A-Za-z_][A-Za-z0-9_]*,"
                f" at most {MAX_ENV_NAME} characters)",
                field_,
            )
        if name in RESERVED_ENV or name.startswith(RESERVED_ENV_PREFIXES):
            raise _refuse(
                f"{field_} name {name!r} is set by the node for the device it hands over"
                f" ({', '.join(p + '*' for p in RESERVED_ENV_PREFIXES)}, CUDA_VISIBLE_DEVICES)",
                field_,
            )
        if not isinstance(value, str):
            raise _refuse(f"{field_} {name} must be a string", field_)
        if len(value) > MAX_ENV_VALUE or "\x00" in value:
            raise _refuse(f"{field_} {name} is longer than {MAX_ENV_VALUE} characters or holds a NUL", field_)
        total += len(name) + len(value)
        out[name] = value
    if total > MAX_ENV_BYTES:
        raise _refuse(f"{field_} holds {total} characters; at most {MAX_ENV_BYTES}", field_)
    return out


def _int(raw: object, field_: str, low: int, high: int, default: int | None = None) -> int:
    if raw is None and default is not None:
        return default
    if isinstance(raw, bool) or not isinstance(raw, int) or not low <= raw <= high:
        raise InvalidInput(
            f"{field_} must be an integer from {low} to {high:,}, not {raw!r}"[:200],
            {"field": field_, "min": low, "max": high},
        )
    return raw


def _ports(raw: object, field_: str) -> tuple[int, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list | tuple):
        raise _refuse(f"{field_} must be a list of {{containerPort}}", field_)
    if len(raw) > MAX_PORTS:
        raise _refuse(f"{field_} has {len(raw)} ports; at most {MAX_PORTS}", field_)
    out: list[int] = []
    for item in raw:
        if isinstance(item, Mapping):
            unknown = set(item) - {"containerPort", "name", "protocol"}
            if unknown or item.get("protocol", "TCP") != "TCP":
                raise _refuse(f"{field_} items are {{containerPort, name?, protocol: TCP}}", field_)
        value = item.get("containerPort") if isinstance(item, Mapping) else item
        port = _int(value, f"{field_}.containerPort", 1, 65535)
        if port in out:
            raise _refuse(f"{field_} names port {port} twice", field_)
        out.append(port)
    return tuple(out)


def _probe(raw: object, field_: str) -> Probe | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise _refuse(f"{field_} must be an object with httpGet or exec", field_)
    known = {"httpGet", "exec", "periodSeconds", "timeoutSeconds", "failureThreshold", "initialDelaySeconds"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise _refuse(f"{field_} has an unknown field {unknown[0]!r}", f"{field_}.{unknown[0]}")
    if ("httpGet" in raw) == ("exec" in raw):
        raise _refuse(f"{field_} must have exactly one of httpGet and exec", field_)
    timing = Probe(
        period_seconds=_int(raw.get("periodSeconds"), f"{field_}.periodSeconds", 1, 300, 5),
        timeout_seconds=_int(raw.get("timeoutSeconds"), f"{field_}.timeoutSeconds", 1, 60, 1),
        failure_threshold=_int(raw.get("failureThreshold"), f"{field_}.failureThreshold", 1, 30, 3),
        initial_delay_seconds=_int(
            raw.get("initialDelaySeconds"), f"{field_}.initialDelaySeconds", 0, 3600, 0
        ),
    )
    if "httpGet" in raw:
        get = raw["httpGet"]
        if not isinstance(get, Mapping) or set(get) - {"path", "port"} or "port" not in get:
            raise _refuse(f"{field_}.httpGet must be {{path, port}}", f"{field_}.httpGet")
        path = get.get("path", "/")
        if not isinstance(path, str) or len(path) > MAX_PROBE_PATH or not _PROBE_PATH.match(path):
            raise _refuse(
                f"{field_}.httpGet.path must start with / and hold printable characters without spaces"
                f" (at most {MAX_PROBE_PATH})",
                f"{field_}.httpGet.path",
            )
        port = _int(get["port"], f"{field_}.httpGet.port", 1, 65535)
        return replace(timing, http_path=path, http_port=port)
    ex = raw["exec"]
    command = ex.get("command") if isinstance(ex, Mapping) and set(ex) <= {"command"} else None
    argv = _argv(command, f"{field_}.exec.command")
    if not argv or len(argv) > MAX_PROBE_EXEC:
        raise _refuse(
            f"{field_}.exec.command must have 1 to {MAX_PROBE_EXEC} items", f"{field_}.exec.command"
        )
    return replace(timing, exec=argv)


def _resources(raw: object, field_: str) -> tuple[float | None, int | None]:
    if raw is None:
        return None, None
    if not isinstance(raw, Mapping) or set(raw) - {"cpu", "memoryMiB"}:
        raise _refuse(f"{field_} must be {{cpu?, memoryMiB?}}", field_)
    cpu_raw = raw.get("cpu")
    cpu: float | None = None
    if cpu_raw is not None:
        if isinstance(cpu_raw, str):
            if not _CPU.match(cpu_raw):
                raise _refuse(
                    f"{field_}.cpu {cpu_raw[:40]!r} is not a number of cores (2, 0.5 or 500m)",
                    f"{field_}.cpu",
                )
            cpu_raw = int(cpu_raw[:-1]) / 1000 if cpu_raw.endswith("m") else float(cpu_raw)
        if (
            isinstance(cpu_raw, bool)
            or not isinstance(cpu_raw, int | float)
            or not (MIN_CPU <= cpu_raw <= MAX_CPU)
        ):
            raise _refuse(f"{field_}.cpu must be from {MIN_CPU} to {MAX_CPU:g} cores", f"{field_}.cpu")
        cpu = round(float(cpu_raw), 3)
    mem_raw = raw.get("memoryMiB")
    memory = None if mem_raw is None else _int(mem_raw, f"{field_}.memoryMiB", MIN_MEMORY_MIB, MAX_MEMORY_MIB)
    return cpu, memory


CONTAINER_FIELDS = frozenset({"image", "command", "args", "env", "ports", "readinessProbe", "resources"})


def parse_container(raw: object, field_: str = "container") -> ContainerSpec:
    """A container request (camelCase, as `ContainerSpec.document` writes it), checked: every
    refusal is INVALID_INPUT naming the field."""
    if not isinstance(raw, Mapping):
        raise _refuse(f"{field_} must be an object with at least an image", field_)
    unknown = sorted(set(raw) - CONTAINER_FIELDS)
    if unknown:
        raise _refuse(f"{field_} has an unknown field {unknown[0]!r}", f"{field_}.{unknown[0]}")
    image = raw.get("image")
    check_image(image, f"{field_}.image")
    assert isinstance(image, str)
    command = _argv(raw.get("command"), f"{field_}.command")
    args = _argv(raw.get("args"), f"{field_}.args")
    if sum(map(len, command)) + sum(map(len, args)) > MAX_ARGV_BYTES:
        raise _refuse(f"{field_}.command and args hold more than {MAX_ARGV_BYTES} characters", field_)
    cpu, memory = _resources(raw.get("resources"), f"{field_}.resources")
    return ContainerSpec(
        image=image,
        command=command,
        args=args,
        env=_env(raw.get("env"), f"{field_}.env"),
        ports=_ports(raw.get("ports"), f"{field_}.ports"),
        readiness=_probe(raw.get("readinessProbe"), f"{field_}.readinessProbe"),
        cpu=cpu,
        memory_mib=memory,
    )


def container_of(doc: Mapping[str, Any] | None) -> ContainerSpec | None:
    """A stored container document read back (None stays None)."""
    return None if doc is None else parse_container(doc)


def argv_of(spec: ContainerSpec) -> Sequence[str]:
    """What the container runs: `command` then `args` (the image's own entrypoint when both are
    empty; its entrypoint with `args` when only `command` is)."""
    return (*spec.command, *spec.args)
