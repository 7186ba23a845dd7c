"""The console's templates (Jinja2, server-rendered) and static files, served by `api/console/`
under `/console`, and Swagger UI's assets, served by `api/docs.py` under `/docs/assets`. Nothing here
is fetched from the internet at run time."""

from __future__ import annotations

from pathlib import Path

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"
SWAGGER_UI = Path(__file__).parent / "swagger-ui"
"""Swagger UI's prebuilt assets, as the swagger-ui-dist release named in `VERSION` ships them
(Apache-2.0: `LICENSE`, `NOTICE`): 5.x, the first line that renders OpenAPI 3.1 documents."""

__all__ = ["STATIC", "SWAGGER_UI", "TEMPLATES"]
