"""The API's own pages: `/docs` (Swagger UI) with every asset served by this process, and `/`.

FastAPI's default `/docs` page loads Swagger UI's script and stylesheet from a public CDN, so on a host
without internet access (the usual place for a GPU fleet's control plane) it renders blank. The assets
ship with the package instead (`better_compute.web.SWAGGER_UI`, a Swagger UI 5 release: the
`swagger-ui-bundle` package's 4.15 cannot render an OpenAPI 3.1 document, which is what this API
publishes), mounted under `/docs/assets`, and ReDoc (CDN only) is not offered. The online validator
badge is turned off (`validatorUrl: null`): it would send the document's URL to a public service.

`GET /` is where a browser pointed at the server lands: it is sent to `/docs` (and,
once there is one, to the console).
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

from better_compute.web import SWAGGER_UI

DOCS_PATH = "/docs"
ASSETS_PATH = "/docs/assets"
OAUTH2_REDIRECT_PATH = "/docs/oauth2-redirect"


def install(app: FastAPI) -> None:
    """Serve `/docs` from local assets and send `/` there. `app` must be built with `docs_url=None`
    and `redoc_url=None`, so that FastAPI's CDN pages are not registered first."""
    app.mount(ASSETS_PATH, StaticFiles(directory=str(SWAGGER_UI)), name="docs-assets")
    openapi_url = app.openapi_url or "/openapi.json"
    title = f"{app.title} API"

    @app.get(DOCS_PATH, include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=title,
            swagger_js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_PATH}/favicon-32x32.png",
            oauth2_redirect_url=OAUTH2_REDIRECT_PATH,
            swagger_ui_parameters={"validatorUrl": None},
        )

    @app.get(OAUTH2_REDIRECT_PATH, include_in_schema=False)
    def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/", include_in_schema=False)
    def root(request: Request) -> RedirectResponse:
        """A browser (it asks for HTML) goes to the console; anything else to the API's docs."""
        wants_html = "text/html" in request.headers.get("accept", "")
        return RedirectResponse("/console" if wants_html else DOCS_PATH, status_code=307)


__all__ = ["install"]
