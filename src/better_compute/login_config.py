"""Where a client of the API finds its server and token: the CLI and `Compute.from_env()` alike.

Each is resolved on its own, first match wins:

1. what the caller passed (the CLI's `--server` / `--token` option);
2. the `BC_SERVER` / `BC_TOKEN` environment variable;
3. the config file written by `better-compute login`: `$BC_CONFIG`, else
   `$XDG_CONFIG_HOME/better-compute/config.json`, else `~/.config/better-compute/config.json`;
4. the CLI's server defaults to http://127.0.0.1:8000 (`Compute.from_env()` has no default); the
   token to none.

The file's token belongs to the file's server: it is used only when the resolved server is that one,
so a token is never sent to a server it was not issued by.

This module is the standard library alone, outside `better_compute.client` and `better_compute.cli`:
both use it, and importing it loads neither httpx and the wire models (a catalog command of the CLI
must start without them) nor typer (the client must not need the CLI's libraries).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_SERVER = "http://127.0.0.1:8000"


@dataclass(frozen=True)
class Settings:
    server: str
    token: str | None


@dataclass(frozen=True)
class Found:
    """A server and token as resolved, each with where it came from (for messages), or None."""

    server: str | None
    server_source: str | None
    token: str | None
    other_token_server: str | None
    """The config file's server when the file holds a token that was not used because `server` is
    another server (so a message can say why no token was found)."""
    path: Path


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


def find(server: str | None, token: str | None, env: Mapping[str, str] | None = None) -> Found:
    """Server and token by the order in this module's docstring, without a default server.

    A server URL that cannot be the server's root (no `http://` or `https://`, or ending in `/v1`) is
    a ValueError saying where it came from and what to write instead: the first would fail every call
    with a transport error, the second with NOT_FOUND for `/v1/v1/...`."""
    env = os.environ if env is None else env
    path = config_path(env)
    stored = read_config(path)
    stored_server = stored.get("server") if isinstance(stored.get("server"), str) else None
    stored_token = stored.get("token") if isinstance(stored.get("token"), str) else None
    source: str | None
    if server:
        found_server, source = server, "--server"
    elif env.get("BC_SERVER"):
        found_server, source = env["BC_SERVER"], "BC_SERVER"
    elif stored_server:
        found_server, source = stored_server, f"the server in {path}"
    else:
        found_server, source = None, None
    if found_server is not None and source is not None:
        check_server(found_server, source)
    found_token = token or env.get("BC_TOKEN") or None
    other = None
    if found_token is None and stored_token:
        if _same_server(found_server, stored_server):
            found_token = stored_token
        elif stored_server is not None:
            other = stored_server
    return Found(found_server, source, found_token, other, path)


def resolve(server: str | None, token: str | None, env: Mapping[str, str] | None = None) -> Settings:
    """The CLI's server and token: `find`, with the default server when none is named anywhere."""
    found = find(server, token, env)
    return Settings(server=found.server or DEFAULT_SERVER, token=found.token)


def check_server(url: str, source: str) -> None:
    """Refuse a server URL that is not a server's root, naming `source` and the URL to write instead."""
    stripped = url.strip().rstrip("/")
    if not stripped.lower().startswith(("http://", "https://")):
        raise ValueError(
            f"{source} is {url!r}: a server URL starts with http:// or https:// "
            f"(such as https://{stripped.split('://')[-1]})"
        )
    if stripped.lower().endswith("/v1"):
        raise ValueError(
            f"{source} is {url!r}: name the server's root, without /v1 ({stripped[:-3]}); "
            "the client adds /v1 to every path"
        )


def _same_server(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and a.rstrip("/") == b.rstrip("/")
