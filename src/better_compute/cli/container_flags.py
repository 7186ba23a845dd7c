"""What a workload replica or an endpoint copy runs, from the command line: `--image` and the flags
that shape its container (`--command`, `--arg`, `--env`, `--port`, `--ready-path`, `--cpu`,
`--memory-mib`), or a whole container object from `--container-file` (JSON or YAML).

These options only spell the request's `container` object (docs/placement.md#what-runs): what an
image reference, an environment name or a port may be is the server's rule, checked once there, and
a refusal naming one of these body fields names the option that filled it (`options_of`). What the
command line itself cannot mean (a flag without `--image`, `--env` without `=`, a probe with no port)
is a usage error, exit status 2, before anything is sent.
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from better_compute.wire.containers import ContainerPublic

PANEL = "Container (what runs)"
MAX_CONTAINER_FILE = 256 * 1024
"""A container file is read up to this many characters: the server's own limits (64 arguments,
64 KiB of environment) fit well inside it."""

ImageOption = Annotated[
    str | None,
    typer.Option(
        "--image",
        help="The image each one runs, e.g. registry.example/team/server:1.2 (never pulled by the server).",
        show_default=False,
        rich_help_panel=PANEL,
    ),
]
CommandOption = Annotated[
    str | None,
    typer.Option(
        "--command",
        help='"CMD ARGS", split as a shell would: replaces the image\'s entrypoint.',
        show_default=False,
        rich_help_panel=PANEL,
    ),
]
ArgOption = Annotated[
    list[str] | None,
    typer.Option("--arg", help="An argument (repeat, in order).", show_default=False, rich_help_panel=PANEL),
]
EnvOption = Annotated[
    list[str] | None,
    typer.Option(
        "--env",
        help="NAME=VALUE in its environment (repeat; a name given twice keeps the last).",
        show_default=False,
        rich_help_panel=PANEL,
    ),
]
PortOption = Annotated[
    list[int] | None,
    typer.Option(
        "--port",
        min=1,
        max=65535,
        help="A port it listens on (repeat; the first is probed and served).",
        show_default=False,
        rich_help_panel=PANEL,
    ),
]
ReadyPathOption = Annotated[
    str | None,
    typer.Option(
        "--ready-path",
        help="Ready when GET /PATH on the first --port answers 2xx or 3xx.",
        show_default=False,
        rich_help_panel=PANEL,
    ),
]
CpuOption = Annotated[
    str | None,
    typer.Option(
        "--cpu",
        help="CPU cores it may use: 2, 0.5 or 500m.",
        show_default=False,
        rich_help_panel=PANEL,
    ),
]
MemoryOption = Annotated[
    int | None,
    typer.Option("--memory-mib", help="Memory it may use, MiB.", show_default=False, rich_help_panel=PANEL),
]
ContainerFileOption = Annotated[
    Path | None,
    typer.Option(
        "--container-file",
        help="Instead of --image and its flags: a container object, JSON or YAML (- reads stdin).",
        show_default=False,
        rich_help_panel=PANEL,
    ),
]


@dataclass(frozen=True)
class ContainerFlags:
    """The container options as given on the command line (None or empty: not given)."""

    image: str | None = None
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    ports: tuple[int, ...] = ()
    ready_path: str | None = None
    cpu: str | None = None
    memory_mib: int | None = None
    container_file: Path | None = None

    def given(self) -> list[str]:
        """The flags given besides --image and --container-file, by name, in help order."""
        flags = {
            "--command": self.command is not None,
            "--arg": bool(self.args),
            "--env": bool(self.env),
            "--port": bool(self.ports),
            "--ready-path": self.ready_path is not None,
            "--cpu": self.cpu is not None,
            "--memory-mib": self.memory_mib is not None,
        }
        return [flag for flag, on in flags.items() if on]


def container_of(flags: ContainerFlags) -> dict[str, Any] | None:
    """The request's `container` object (camelCase), or None when neither --image nor
    --container-file is given. Usage errors (typer.BadParameter, exit status 2) for what the
    command line cannot mean."""
    others = flags.given()
    if flags.container_file is not None:
        if flags.image is not None or others:
            extra = (["--image"] if flags.image is not None else []) + others
            raise typer.BadParameter(
                f"give --container-file or --image and its flags, not both ({', '.join(extra)} given)",
                param_hint="--container-file",
            )
        return read_container_file(flags.container_file)
    if flags.image is None:
        if others:
            which = (
                "needs --image (the container it shapes), or put it"
                if len(others) == 1
                else (f"({', '.join(others)}) need --image (the container they shape), or put them")
            )
            raise typer.BadParameter(
                f"{which} in --container-file",
                param_hint=others[0],
            )
        return None
    container: dict[str, Any] = {"image": flags.image}
    if flags.command is not None:
        container["command"] = _split_command(flags.command)
    if flags.args:
        container["args"] = list(flags.args)
    if flags.env:
        container["env"] = _env(flags.env)
    if flags.ports:
        container["ports"] = [{"containerPort": port} for port in flags.ports]
    if flags.ready_path is not None:
        if not flags.ports:
            raise typer.BadParameter("probes the first --port: give --port too", param_hint="--ready-path")
        container["readinessProbe"] = {"httpGet": {"path": flags.ready_path, "port": flags.ports[0]}}
    resources: dict[str, Any] = {}
    if flags.cpu is not None:
        resources["cpu"] = flags.cpu
    if flags.memory_mib is not None:
        resources["memoryMiB"] = flags.memory_mib
    if resources:
        container["resources"] = resources
    return container


def options_of(prefix: str, flags: ContainerFlags) -> dict[str, str]:
    """The body fields these options fill, under `prefix` (`shape.container`, `container`), each
    to its option, so a refusal naming one names the option. None for a container file: there the
    refusal's field is the file's own path to the fault."""
    if flags.container_file is not None or flags.image is None:
        return {}
    fields = {
        "image": "--image",
        "command": "--command",
        "args": "--arg",
        "env": "--env",
        "ports": "--port",
        "ports.containerPort": "--port",
        "readinessProbe.httpGet.path": "--ready-path",
        "resources.cpu": "--cpu",
        "resources.memoryMiB": "--memory-mib",
    }
    return {f"{prefix}.{field}": option for field, option in fields.items()}


def _split_command(command: str) -> list[str]:
    try:
        argv = shlex.split(command)
    except ValueError as exc:  # an unclosed quote, a trailing escape
        raise typer.BadParameter(
            f"{command!r} cannot be split as a shell would: {exc}", param_hint="--command"
        ) from None
    if not argv:
        raise typer.BadParameter(
            "is empty: leave it out to run the image's own entrypoint", param_hint="--command"
        )
    return argv


def _env(pairs: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise typer.BadParameter(f"NAME=VALUE, not {pair!r}", param_hint="--env")
        out[name] = value
    return out


def read_container_file(path: Path) -> dict[str, Any]:
    """A container object from a JSON or YAML file (JSON is tried first; YAML is read safely, as
    data only). Unreadable, too long, not JSON or YAML, or not an object: a usage error."""
    hint = "--container-file"
    try:
        if str(path) == "-":
            text = sys.stdin.read(MAX_CONTAINER_FILE + 1)
        else:
            with path.open(encoding="utf-8") as f:  # never more than the limit, whatever the file
                text = f.read(MAX_CONTAINER_FILE + 1)
    except (OSError, UnicodeDecodeError) as exc:
        raise typer.BadParameter(f"{path}: {exc}", param_hint=hint) from None
    if len(text) > MAX_CONTAINER_FILE:
        raise typer.BadParameter(f"{path} is over {MAX_CONTAINER_FILE} characters", param_hint=hint)
    try:
        raw = json.loads(text)
    except ValueError:
        import yaml  # only for a file that is not JSON: most commands never load it

        try:
            raw = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise typer.BadParameter(f"{path} is not JSON or YAML: {exc}", param_hint=hint) from None
    if not isinstance(raw, dict):
        raise typer.BadParameter(
            f"{path} must hold a container object, e.g. {{image: ..., ports: [{{containerPort: 8080}}]}}",
            param_hint=hint,
        )
    return raw


def container_rows(container: ContainerPublic | None) -> list[tuple[str, str]]:
    """What runs, as `show` rows: the image, its command and arguments (as a shell would take
    them), ports, readiness and resources; none when nothing is started."""
    if container is None:
        return []
    rows = [("image", container.image)]
    if container.command:
        rows.append(("command", shlex.join(container.command)))
    if container.args:
        rows.append(("args", shlex.join(container.args)))
    if container.env:
        rows.append(("env", ", ".join(sorted(container.env))))  # names only: values may be secrets
    if container.ports:
        rows.append(("ports", ", ".join(str(p.container_port) for p in container.ports)))
    probe = container.readiness_probe
    if probe is not None and probe.http_get is not None:
        rows.append(("ready when", f"GET {probe.http_get.path} on {probe.http_get.port} answers"))
    elif probe is not None and probe.exec is not None:
        rows.append(("ready when", f"{shlex.join(probe.exec.command)} exits 0"))
    resources = container.resources
    if resources is not None and (resources.cpu is not None or resources.memory_mib is not None):
        cpu = "-" if resources.cpu is None else f"{resources.cpu:g} cores"
        memory = "-" if resources.memory_mib is None else f"{resources.memory_mib} MiB"
        rows.append(("resources", f"{cpu}, {memory}"))
    return rows


def print_what_runs(container: ContainerPublic | None, extra: list[tuple[str, str]]) -> None:
    """`container_rows` and `extra` as a grid under a `runs` heading; nothing without a container."""
    if container is None:
        return
    from better_compute.cli.output import stdout
    from better_compute.cli.tables import print_details, sentence

    console = stdout()
    console.print()
    console.print("runs", markup=False, style="bold")
    print_details(console, [(sentence(key), value) for key, value in [*container_rows(container), *extra]])
