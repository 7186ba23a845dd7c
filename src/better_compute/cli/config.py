"""Where the CLI finds its server and token.

Each is resolved on its own, first match wins:

1. the command's `--server` / `--token` option;
2. the `BC_SERVER` / `BC_TOKEN` environment variable;
3. the config file written by `better-compute login`: `$BC_CONFIG`, else
   `$XDG_CONFIG_HOME/better-compute/config.json`, else `~/.config/better-compute/config.json`;
4. the server defaults to http://127.0.0.1:8000; the token to none.

The file's token belongs to the file's server: it is used only when the resolved server is that one,
so a token is never sent to a server it was not issued by.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from better_compute.client import Compute

DEFAULT_SERVER = "http://127.0.0.1:8000"

ServerOption = Annotated[
    str | None,
    typer.Option(
        "--server",
        help="Server URL (default: $BC_SERVER, the login config, or http://127.0.0.1:8000).",
        show_default=False,
    ),
]
TokenOption = Annotated[
    str | None,
    typer.Option(
        "--token", help="Bearer token (default: $BC_TOKEN or the login config).", show_default=False
    ),
]


@dataclass(frozen=True)
class Settings:
    server: str
    token: str | None
    server_source: str = field(default="--server", compare=False)
    """Where `server` came from, in the words a user sets it with (`--server`, `BC_SERVER`, the
    config file's path, or `default`), so a hint about a malformed URL names what to change."""


def config_path(env: Mapping[str, str] | None = None) -> Path:
    """The config file's path (it may not exist)."""
    env = os.environ if env is None else env
    if env.get("BC_CONFIG"):
        return Path(env["BC_CONFIG"]).expanduser()
    base = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else Path.home() / ".config"
    return base / "better-compute" / "config.json"


def read_config(path: Path) -> dict[str, Any]:
    """The config file's content; `{}` when it does not exist. A malformed file is a ValueError."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object")
    return data


def write_config(path: Path, server: str, token: str) -> None:
    """Write server and token to `path`, readable by its owner only (mode 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        os.fchmod(handle.fileno(), 0o600)
        json.dump({"server": server, "token": token}, handle, indent=2)
        handle.write("\n")


def forget_token(path: Path) -> None:
    """Drop the token from the config file at `path`, keeping the rest (the server)."""
    kept = {k: v for k, v in read_config(path).items() if k != "token"}
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(kept, handle, indent=2)
        handle.write("\n")


def resolve(server: str | None, token: str | None, env: Mapping[str, str] | None = None) -> Settings:
    """Server and token by the order in this module's docstring."""
    env = os.environ if env is None else env
    stored = read_config(config_path(env))
    stored_server = stored.get("server") if isinstance(stored.get("server"), str) else None
    stored_token = stored.get("token") if isinstance(stored.get("token"), str) else None
    sources = (
        (server, "--server"),
        (env.get("BC_SERVER"), "BC_SERVER"),
        (stored_server, str(config_path(env))),
        (DEFAULT_SERVER, "default"),
    )
    resolved_server, source = next((value, name) for value, name in sources if value)
    resolved_token = token or env.get("BC_TOKEN")
    if resolved_token is None and stored_token and _same_server(resolved_server, stored_server):
        resolved_token = stored_token
    settings = Settings(server=resolved_server, token=resolved_token or None, server_source=source)
    check_server(settings)
    return settings


def check_server(settings: Settings) -> None:
    """Refuse a server URL without a scheme, naming where it came from: `host:8000` is a common way
    to write an address, but HTTP needs `http://` or `https://`, and the client would otherwise fail
    with the transport library's words. A ValueError, which commands report as a usage error."""
    server = settings.server
    if server.lower().startswith(("http://", "https://")):
        return
    source = settings.server_source
    where = {"--server": f"--server {server}", "BC_SERVER": f"BC_SERVER={server}"}.get(
        source, f"the server {server} in {source}"
    )
    bare = server.split("://", 1)[-1]
    raise ValueError(
        f"{where} has no http:// or https:// before the host: write http://{bare} or https://{bare}"
    )


def server_hint(server: str) -> str | None:
    """What is wrong with a server URL that names the API's path: the client adds `/v1` itself, so
    `http://host:8000/v1` sends every call to `/v1/v1/...`. None for a URL without the mistake."""
    base = server.rstrip("/")
    if base.endswith("/v1"):
        return f"the server URL ends in /v1, which the CLI adds itself: use {base[: -len('/v1')]}"
    return None


def _same_server(a: str, b: str | None) -> bool:
    return b is not None and a.rstrip("/") == b.rstrip("/")


def connect(settings: Settings) -> Compute:
    """The client for resolved settings (tests replace this to use a mock transport).

    The client (httpx, the wire models) is imported here, by the commands that talk to a server, so
    that the catalog commands start without it."""
    from better_compute.client import Compute

    return Compute(settings.server, settings.token)
