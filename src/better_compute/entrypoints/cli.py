"""The `better-compute` console script: the client CLI plus the server-side commands."""

from __future__ import annotations

from better_compute.cli.app import app
from better_compute.entrypoints import server_commands  # noqa: F401  (registers serve, admin bootstrap)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
