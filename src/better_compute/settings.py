"""The server's settings, read once, from `BC_*` environment variables, by the composition roots only.

Everything a server process may be told from outside (its database, the limits on what a client may
send) is one field here, so that there is one place to look for a knob and one spelling of each
variable. Only `entrypoints/` read settings (an import-linter contract says so): `serve` builds them
from its options over the environment, and hands them down as values; a use case never looks at the
environment, so a test sees exactly what it passes in.

`serve --workers N` starts its workers with the parent's settings in their environment
(`Settings.environment`), so every process of one server runs with the same values.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from better_compute.defaults import (
    DEFAULT_DATABASE_URL,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_TIMEOUT_KEEP_ALIVE,
    DEFAULT_TIMEOUT_REQUEST,
)


class Settings(BaseSettings):
    """What a server process is configured with: each field is `BC_<FIELD>` in the environment."""

    model_config = SettingsConfigDict(env_prefix="BC_", extra="ignore", frozen=True)

    database_url: str = Field(DEFAULT_DATABASE_URL, min_length=1)
    """SQLAlchemy or libpq URL of the one database (`BC_DATABASE_URL`)."""
    max_body_bytes: int = Field(DEFAULT_MAX_BODY_BYTES, ge=1)
    """Largest request body taken, in bytes; a larger one is refused, 413 (`BC_MAX_BODY_BYTES`)."""
    timeout_request: float = Field(DEFAULT_TIMEOUT_REQUEST, gt=0)
    """Seconds a client has to send a request's head, and each next part of its body; past it, 408
    (`BC_TIMEOUT_REQUEST`)."""
    timeout_keep_alive: int = Field(DEFAULT_TIMEOUT_KEEP_ALIVE, ge=1)
    """Seconds an idle connection (no request under way) is kept open (`BC_TIMEOUT_KEEP_ALIVE`)."""
    metrics_auth: Literal["none", "admin"] = "none"
    """Who may read `/metrics`: anyone who reaches the server (`none`), or only a fleet-admin token
    (`admin`) (`BC_METRICS_AUTH`)."""
    metrics_allocations: bool = False
    """Whether `/metrics` also answers `better_compute_allocation_info`, which names tenants and
    allocations beside DCGM's GPU labels (`BC_METRICS_ALLOCATIONS`; docs/metrics.md)."""
    slurm_conf_dir: str | None = None
    """Where each Slurm cluster's `slurm.conf` is: `<dir>/<cluster id>/slurm.conf`, handed to the
    Slurm commands as `SLURM_CONF`; unset, or no file there, the host's own (`BC_SLURM_CONF_DIR`;
    docs/slurm.md)."""

    def environment(self) -> dict[str, str]:
        """These settings as the environment variables that give them back: what a worker process
        started by this one reads, so that both run with the same values."""
        return {
            f"BC_{name.upper()}": str(value) for name, value in self.model_dump().items() if value is not None
        }


__all__ = [
    "DEFAULT_DATABASE_URL",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_TIMEOUT_KEEP_ALIVE",
    "DEFAULT_TIMEOUT_REQUEST",
    "Settings",
]
