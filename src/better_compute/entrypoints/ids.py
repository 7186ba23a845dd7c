"""The production id source: time-ordered reservation ids, random credential and policy ids."""

from __future__ import annotations

import random
import secrets
import time


class RandomIds:
    """`service.kernel.ids.Ids` for a server process.

    Ids need uniqueness, not secrecy: a generator seeded once per process from the system's
    randomness avoids a system call per id, and 64 bits of seed keep processes apart. Its
    `getrandbits` is one call into C, safe from several threads at once.
    """

    def __init__(self) -> None:
        self._random = random.Random(secrets.randbits(64))

    def reservation(self) -> str:
        """`rsv-<time><random>`: the time in microseconds first, so later ids sort later."""
        return f"rsv-{time.time_ns() // 1000:014x}{self._random.getrandbits(40):010x}"

    def credential(self) -> str:
        return f"cred-{self._random.getrandbits(64):016x}"

    def policy(self) -> str:
        return f"pol-{self._random.getrandbits(64):016x}"

    def workload(self) -> str:
        """`wkl-<time><random>`: time-ordered, so lists page by creation."""
        return f"wkl-{time.time_ns() // 1000:014x}{self._random.getrandbits(40):010x}"

    def deployment(self) -> str:
        return f"dep-{time.time_ns() // 1000:014x}{self._random.getrandbits(40):010x}"

    def operation(self) -> str:
        return f"op-{time.time_ns() // 1000:014x}{self._random.getrandbits(40):010x}"


__all__ = ["RandomIds"]
