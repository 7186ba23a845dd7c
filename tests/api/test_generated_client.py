"""A client generated from `openapi.json` by openapi-python-client works against the real API.

The generator runs from its own environment (`make codegen`: `.venv-codegen`), since it pins a typer
older than the CLI's; `BC_OPENAPI_PYTHON_CLIENT` may name another copy. The client it writes is
imported and driven in-process over the app (no sockets) with `raise_on_unexpected_status`, so an
answer whose status the document does not list fails the test rather than passing as `None`.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from better_compute.storage.store import Store
from tests.builders import admin_token, api_client, tenant_token
from tests.conftest import SERIAL

pytestmark = SERIAL  # the generator takes seconds

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "bc_generated_client"


def _generator() -> str | None:
    named = os.environ.get("BC_OPENAPI_PYTHON_CLIENT")
    if named:
        return named
    local = ROOT / ".venv-codegen" / "bin" / "openapi-python-client"
    if local.exists():
        return str(local)
    return shutil.which("openapi-python-client")


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ModuleType, str]]:
    """The generated package, imported, and what the generator printed."""
    generator = _generator()
    if generator is None:
        if os.environ.get("CI"):
            pytest.fail("openapi-python-client is not installed: `make codegen` installs it")
        pytest.skip("openapi-python-client is not installed: `make codegen` installs it")
    out = tmp_path_factory.mktemp("generated")
    args = [generator, "generate", "--path", str(ROOT / "openapi.json"), "--meta", "none"]
    done = subprocess.run(
        [*args, "--output-path", str(out / PACKAGE)],
        cwd=out,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    sys.path.insert(0, str(out))
    try:
        yield importlib.import_module(PACKAGE), done.stdout + done.stderr
    finally:
        sys.path.remove(str(out))
        for name in [n for n in sys.modules if n == PACKAGE or n.startswith(f"{PACKAGE}.")]:
            del sys.modules[name]


def _operations() -> list[str]:
    document = json.loads((ROOT / "openapi.json").read_text(encoding="utf-8"))
    return [
        op["operationId"]
        for item in document["paths"].values()
        for op in item.values()
        if isinstance(op, dict) and "operationId" in op
    ]


def _call(package: ModuleType, module: str, client: Any, **kwargs: Any) -> Any:
    return importlib.import_module(f"{PACKAGE}.api.{module}").sync_detailed(client=client, **kwargs)


def _client(package: ModuleType, store: Store, token: str) -> Any:
    client = package.AuthenticatedClient(
        base_url="http://testserver", token=token, raise_on_unexpected_status=True
    )
    client.set_httpx_client(api_client(store))
    client.get_httpx_client().headers["Authorization"] = f"Bearer {token}"
    return client


def test_the_generator_makes_every_operation(generated: tuple[ModuleType, str]) -> None:
    package, printed = generated
    assert "will not be generated" not in printed, printed
    made = {p.stem for p in (Path(package.__file__).parent / "api").glob("*/*.py") if p.stem != "__init__"}
    wanted = {re.sub(r"(?<=[a-z])(?=[A-Z])", "_", n).replace(".", "_").lower() for n in _operations()}
    assert wanted <= made, sorted(wanted - made)


def test_a_generated_client_creates_lists_and_reads_what_it_wrote(
    generated: tuple[ModuleType, str], store: Store
) -> None:
    package, _ = generated
    models = importlib.import_module(f"{PACKAGE}.models")
    admin = _client(package, store, admin_token(store))

    created = _call(
        package, "tenants.tenants_create", admin, body=models.TenantCreate(id="acme", name="Acme")
    )
    assert created.status_code == 201
    assert isinstance(created.parsed, models.TenantPublic)
    assert (created.parsed.id, created.parsed.name) == ("acme", "Acme")

    listed = _call(package, "tenants.tenants_list", admin, limit=10)
    assert listed.status_code == 200
    assert [t.id for t in listed.parsed.items] == ["acme"]

    who = _call(
        package, "credentials.credentials_whoami", _client(package, store, tenant_token(store, "acme"))
    )
    assert who.status_code == 200
    assert who.parsed.tenant_id == "acme"


def test_a_generated_client_reads_each_documented_refusal_as_the_error_body(
    generated: tuple[ModuleType, str], store: Store
) -> None:
    package, _ = generated
    models = importlib.import_module(f"{PACKAGE}.models")
    admin = _client(package, store, admin_token(store))

    missing = _call(package, "pools.pools_get", admin, id="nope")
    assert missing.status_code == 404
    assert isinstance(missing.parsed, models.ErrorBody)
    assert missing.parsed.error.code == "NOT_FOUND"

    _call(package, "tenants.tenants_create", admin, body=models.TenantCreate(id="acme", name="Acme"))
    taken = _call(package, "tenants.tenants_create", admin, body=models.TenantCreate(id="acme", name="Again"))
    assert taken.status_code == 409
    assert taken.parsed.error.code == "CONFLICT"

    tenant = _client(package, store, tenant_token(store, "acme"))
    refused = _call(package, "tenants.tenants_create", tenant, body=models.TenantCreate(id="other", name="O"))
    assert refused.status_code == 403
    assert refused.parsed.error.code == "FORBIDDEN"

    stranger = _client(package, store, "bc_not_a_token")
    unknown = _call(package, "credentials.credentials_whoami", stranger)
    assert unknown.status_code == 401
    assert unknown.parsed.error.code == "UNAUTHENTICATED"
