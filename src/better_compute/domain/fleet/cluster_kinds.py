"""A cluster's kind: `local`, where our own admission picks the cards, or `slurm`, where a Slurm
controller does and every hold of ours is a Slurm job (docs/slurm.md, ADR 0015).

A `slurm` cluster's record says where its controller is, which of its partitions are ours to
submit to, the Slurm account our holding jobs run under, how we reach it (`commands`: `sbatch`,
`scontrol`, `scancel` on the server's host; `rest`, for `slurmrestd`, is named and refused until
it is built), and which Slurm account books as which of our tenants (a job submitted to Slurm
directly under an account no one mapped is booked for the `external` tenant). Its nodes still run
`bcd`, which owns the hardware.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.tenancy.tenancy import check_ref

LOCAL: Final = "local"
SLURM: Final = "slurm"
KINDS: Final = (LOCAL, SLURM)

COMMANDS: Final = "commands"
REST: Final = "rest"
ACCESS: Final = (COMMANDS, REST)
"""How a Slurm controller is reached; only `commands` is built."""

EXTERNAL_TENANT: Final = "external"
"""The tenant a job submitted to Slurm directly is booked for when its account maps to none."""

MAX_PARTITIONS: Final = 16
MAX_ACCOUNTS: Final = 1000
"""Limits of one cluster record: partitions that are ours, and Slurm accounts mapped to tenants."""

_SLURM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
"""A name handed to Slurm as one word (partition, account): as `domain.fleet.slurm.check_name`."""

_CONTROLLER = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})(:[0-9]{1,5})?$")
"""A host name (or address), with an optional port: `slurmctld.example:6817`."""


@dataclass(frozen=True, slots=True)
class SlurmSettings:
    """How a `slurm` cluster is reached and what of it is ours."""

    controller: str
    partitions: tuple[str, ...]
    account: str
    """The Slurm account our holding jobs are submitted under: with the job's name, how a job is
    known to be ours."""
    access: str = COMMANDS
    accounts: tuple[tuple[str, str], ...] = ()
    """(Slurm account, tenant) pairs, by account: whose a job submitted directly is."""

    def tenant_of(self, slurm_account: str) -> str:
        """The tenant a direct job of `slurm_account` is booked for: the mapped one, else `external`."""
        return dict(self.accounts).get(slurm_account, EXTERNAL_TENANT)


def _slurm_name(value: object, field: str) -> str:
    if not isinstance(value, str) or not _SLURM_NAME.fullmatch(value):
        raise InvalidInput(
            f"{field} must be 1-64 letters, digits, '.', '_' or '-' (one Slurm word), not {value!r}"[:200],
            {"field": field},
        )
    return value


def _slurm_account(value: object, field: str) -> str:
    """An account name as Slurm keeps it: Slurm stores account names in lower case and prints a
    job's `Account=` so, so a name with capitals would never match a job read back (every holding job
    would read as submitted directly)."""
    name = _slurm_name(value, field)
    if name != name.lower():
        raise InvalidInput(
            f"{field} {name!r}: Slurm keeps account names in lower case; write {name.lower()!r}"[:200],
            {"field": field},
        )
    return name


def check_kind(value: object, field: str = "kind") -> str:
    if not isinstance(value, str) or value not in KINDS:
        raise InvalidInput(
            f"{field} must be one of {', '.join(KINDS)}, not {value!r}"[:200],
            {"field": field, "allowed": list(KINDS)},
        )
    return value


def check_slurm(raw: Mapping[str, object], field: str = "slurm") -> SlurmSettings:
    """A Slurm cluster's settings from a request; each refusal names the field at fault. Access
    `rest` is INVALID_INPUT with `details.reason` `not_supported` until slurmrestd is built."""
    controller = raw.get("controller")
    if not isinstance(controller, str) or not _CONTROLLER.fullmatch(controller):
        raise InvalidInput(
            f"{field}.controller must be a host name or address, with an optional :port, not {controller!r}"[
                :200
            ],
            {"field": f"{field}.controller"},
        )
    access = raw.get("access", COMMANDS)
    if access not in ACCESS:
        raise InvalidInput(
            f"{field}.access must be one of {', '.join(ACCESS)}, not {access!r}"[:200],
            {"field": f"{field}.access", "allowed": list(ACCESS)},
        )
    if access == REST:
        raise InvalidInput(
            f"{field}.access rest (slurmrestd) is not supported yet; use commands",
            {"field": f"{field}.access", "reason": "not_supported"},
        )
    partitions = raw.get("partitions")
    if not isinstance(partitions, list | tuple) or not 1 <= len(partitions) <= MAX_PARTITIONS:
        raise InvalidInput(
            f"{field}.partitions must list 1-{MAX_PARTITIONS} partitions",
            {"field": f"{field}.partitions", "max": MAX_PARTITIONS},
        )
    names = tuple(_slurm_name(p, f"{field}.partitions[{i}]") for i, p in enumerate(partitions))
    if len(set(names)) != len(names):
        raise InvalidInput(f"{field}.partitions names a partition twice", {"field": f"{field}.partitions"})
    account = _slurm_account(raw.get("account"), f"{field}.account")
    accounts_raw = raw.get("accounts") or {}
    if not isinstance(accounts_raw, Mapping) or len(accounts_raw) > MAX_ACCOUNTS:
        raise InvalidInput(
            f"{field}.accounts must map at most {MAX_ACCOUNTS} Slurm accounts to tenants",
            {"field": f"{field}.accounts", "max": MAX_ACCOUNTS},
        )
    accounts = []
    for slurm_account, tenant in sorted(accounts_raw.items(), key=lambda kv: str(kv[0])):
        name = _slurm_account(slurm_account, f"{field}.accounts")
        if name == account:
            raise InvalidInput(
                f"{field}.accounts maps {name}, the account our own holding jobs run under",
                {"field": f"{field}.accounts"},
            )
        accounts.append((name, check_ref(tenant, f"{field}.accounts.{name}")))
    return SlurmSettings(
        controller=controller, partitions=names, account=account, access=access, accounts=tuple(accounts)
    )


def check_cluster_kind(
    kind: object, slurm: Mapping[str, object] | None, where: str = ""
) -> tuple[str, SlurmSettings | None]:
    """A cluster's kind and its Slurm settings: a `slurm` cluster needs them, a `local` one takes
    none. `where` prefixes the fields refusals name (`clusters[0]` in a fleet file)."""
    at = f"{where}." if where else ""
    checked = check_kind(kind, f"{at}kind")
    if checked == SLURM:
        if slurm is None:
            raise InvalidInput("a slurm cluster needs slurm settings", {"field": f"{at}slurm"})
        return checked, check_slurm(slurm, f"{at}slurm")
    if slurm is not None:
        raise InvalidInput(f"a {checked} cluster takes no slurm settings", {"field": f"{at}slurm"})
    return checked, None


def settings_from_stored(raw: Mapping[str, object]) -> SlurmSettings:
    """Settings as storage kept them (`settings_to_stored`), read without checks: they were checked
    when written."""
    partitions = raw.get("partitions")
    accounts = raw.get("accounts")
    return SlurmSettings(
        controller=str(raw["controller"]),
        partitions=tuple(str(p) for p in partitions) if isinstance(partitions, list) else (),
        account=str(raw["account"]),
        access=str(raw.get("access", COMMANDS)),
        accounts=tuple((str(k), str(v)) for k, v in accounts.items()) if isinstance(accounts, dict) else (),
    )


def settings_to_stored(settings: SlurmSettings) -> dict[str, object]:
    return {
        "controller": settings.controller,
        "partitions": list(settings.partitions),
        "account": settings.account,
        "access": settings.access,
        "accounts": dict(settings.accounts),
    }
