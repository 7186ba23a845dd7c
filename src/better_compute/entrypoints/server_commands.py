"""`better-compute serve` and `better-compute admin ...`: commands that open the database themselves."""

from __future__ import annotations

from better_compute.cli.app import admin_app, app

__all__ = ["admin_app", "app"]
