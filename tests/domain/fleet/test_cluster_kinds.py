"""A cluster's kind and Slurm settings (domain.fleet.cluster_kinds), also as a fleet file declares them."""

from __future__ import annotations

import pytest

from better_compute.domain.fleet.cluster_kinds import SlurmSettings, check_cluster_kind
from better_compute.domain.kernel.errors import InvalidInput
from better_compute.domain.ops.fleet import parse_fleet

SLURM = {"controller": "ctl:6817", "partitions": ["ours"], "account": "bc", "accounts": {"ml": "acme"}}


def test_a_slurm_cluster_maps_accounts_to_tenants_and_the_rest_to_external() -> None:
    kind, settings = check_cluster_kind("slurm", SLURM)
    assert (kind, settings) == (
        "slurm",
        SlurmSettings("ctl:6817", ("ours",), "bc", "commands", (("ml", "acme"),)),
    )
    assert settings is not None
    assert (settings.tenant_of("ml"), settings.tenant_of("other")) == ("acme", "external")
    assert check_cluster_kind("local", None) == ("local", None)


def test_a_fleet_file_declares_a_slurm_cluster_and_its_refusals_name_the_place() -> None:
    fleet = {"clusters": [{"name": "s1", "region": "r1", "kind": "slurm", "slurm": SLURM}]}
    [cluster] = parse_fleet(fleet).clusters
    assert (cluster.kind, cluster.slurm and cluster.slurm.partitions) == ("slurm", ("ours",))
    bad = {
        "clusters": [{"name": "s1", "region": "r1", "kind": "slurm", "slurm": {**SLURM, "partitions": []}}]
    }
    with pytest.raises(InvalidInput) as refused:
        parse_fleet(bad)
    assert refused.value.details["field"] == "clusters[0].slurm.partitions"
    stray = {"clusters": [{"name": "s1", "region": "r1", "kind": "slurm", "slurm": {**SLURM, "host": "x"}}]}
    with pytest.raises(InvalidInput, match="unknown key 'host'"):
        parse_fleet(stray)
