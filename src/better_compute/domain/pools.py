"""Pools: one owner, one sharing mode fixed at creation, and the policy that shapes their atoms."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from better_compute.domain.errors import InvalidInput

SharingMode = Literal["exclusive", "mig", "timeslice", "mps"]
SHARING_MODES: tuple[SharingMode, ...] = get_args(SharingMode)

MIN_REPLICAS = 1
MAX_REPLICAS = 48
"""MPS serves at most 48 clients per GPU; time slicing is held to the same bound."""


@dataclass(frozen=True)
class PoolSharing:
    """The part of a pool that decides how its GPUs become atoms."""

    pool_id: str
    mode: SharingMode
    replicas: int = 1


def check_mode(mode: str) -> SharingMode:
    if mode not in SHARING_MODES:
        raise InvalidInput(
            f"sharing mode must be one of {', '.join(SHARING_MODES)}, not {mode!r}",
            {"field": "mode", "value": mode},
        )
    return mode


def check_replicas(replicas: object) -> int:
    """Replicas split one GPU into slots; 1 to 48 is what MPS can serve."""
    if isinstance(replicas, bool) or not isinstance(replicas, int):
        raise InvalidInput("policy.replicas must be an integer", {"field": "policy.replicas"})
    if not MIN_REPLICAS <= replicas <= MAX_REPLICAS:
        raise InvalidInput(
            f"policy.replicas must be between {MIN_REPLICAS} and {MAX_REPLICAS}, not {replicas}",
            {"field": "policy.replicas", "value": replicas},
        )
    return replicas


def mps_units(replicas: int) -> int:
    """Each MPS slot's share of the GPU's 100 MPS units."""
    return 100 // check_replicas(replicas)
