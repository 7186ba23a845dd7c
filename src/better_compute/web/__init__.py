"""The console's templates (Jinja2, server-rendered) and static files, served by `api/console/`
under `/console`. Nothing here is fetched from the internet at run time."""

from __future__ import annotations

from pathlib import Path

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"

__all__ = ["STATIC", "TEMPLATES"]
