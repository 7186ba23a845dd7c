"""The API's pages work on a host without internet access: `/docs` names no asset it does not serve."""

from __future__ import annotations

import re

from better_compute.storage.store import Store
from better_compute.web import SWAGGER_UI
from tests.builders import api_client


def test_defect_11_docs_load_no_asset_from_a_cdn(store: Store) -> None:
    client = api_client(store)
    page = client.get("/docs")
    assert page.status_code == 200
    urls = re.findall(r"""(?:src|href|url)\s*[:=]\s*['"]([^'"]+)['"]""", page.text)
    assert urls, page.text
    for url in urls:
        assert not re.match(r"(https?:)?//", url), f"/docs loads {url} from another host"
        assert client.get(url).status_code == 200, url
    assert "swagger-ui-bundle.js" in page.text
    assert client.get("/docs/oauth2-redirect").status_code == 200
    assert client.get("/redoc").status_code == 404  # ReDoc exists only on a CDN: not offered


def test_defect_11_the_root_sends_a_browser_to_the_docs(store: Store) -> None:
    response = api_client(store).get("/", follow_redirects=False)
    assert response.status_code in (302, 307)
    assert response.headers["location"] == "/docs"


def test_docs_serve_a_swagger_ui_that_renders_openapi_3_1(store: Store) -> None:
    """Regression: the assets were swagger-ui-bundle's Swagger UI 4.15, which refuses an OpenAPI 3.1
    document ("does not specify a valid version field"); 3.1 renders from Swagger UI 5 on."""
    client = api_client(store)
    assert client.get("/openapi.json").json()["openapi"].startswith("3.1")
    version = (SWAGGER_UI / "VERSION").read_text(encoding="utf-8").strip()
    assert int(version.split(".")[0]) >= 5
    bundle = client.get("/docs/assets/swagger-ui-bundle.js")
    assert bundle.status_code == 200 and f'"{version}"' in bundle.text
    page = client.get("/docs").text
    assert '"validatorUrl": null' in page  # no badge fetched from validator.swagger.io
    assert (SWAGGER_UI / "LICENSE").exists() and (SWAGGER_UI / "NOTICE").exists()
