"""`tenants update ID --name NAME` through the CLI against the real app on both stores, at 80 columns
and piped: the admin renames a tenant, a tenant token is refused, a bad name names the option."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from tests.cli.test_pools_update_dry_run import World, cli, world  # noqa: F401  (fixture)


def test_tenants_update_renames_and_says_so(runner: CliRunner, world: World) -> None:  # noqa: F811
    done = cli(runner, world.admin, "tenants", "update", "acme", "--name", "Acme Research")
    assert done.exit_code == 0, done.output
    assert done.stdout.strip() == "tenant acme is now named 'Acme Research'"
    piped = cli(
        runner, world.admin, "tenants", "update", "acme", "--name", "Acme R&D", "--json", columns=None
    )
    assert piped.exit_code == 0, piped.output
    assert json.loads(piped.stdout)["name"] == "Acme R&D"
    shown = json.loads(cli(runner, world.admin, "tenants", "show", "acme", "--json").stdout)
    assert shown["name"] == "Acme R&D"
    events = cli(runner, world.admin, "events", "--type", "tenant.updated", "--json", columns=None)
    payloads = [json.loads(line)["payload"] for line in events.stdout.splitlines()]
    assert payloads == [
        {"name": "Acme Research", "previousName": "acme"},
        {"name": "Acme R&D", "previousName": "Acme Research"},
    ]


def test_tenants_update_refusals(runner: CliRunner, world: World) -> None:  # noqa: F811
    tenant = cli(runner, world.platform, "tenants", "update", "acme", "--name", "Mine")
    assert tenant.exit_code == 1 and "FORBIDDEN" in tenant.stderr
    missing = cli(runner, world.admin, "tenants", "update", "nobody", "--name", "X")
    assert missing.exit_code == 1 and "tenant nobody not found" in missing.stderr
    blank = cli(runner, world.admin, "tenants", "update", "acme", "--name", "   ")
    assert blank.exit_code == 1 and "--name must be a non-empty string" in blank.stderr
    usage = cli(runner, world.admin, "tenants", "update", "acme")
    assert usage.exit_code == 2 and "--name" in usage.output
