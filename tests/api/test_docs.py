"""The API's pages work on a host without internet access: `/docs` names no asset it does not serve."""

from __future__ import annotations

import re

from better_compute.storage.store import Store
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
