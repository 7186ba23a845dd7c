"""What the operators' use cases (doctor, console, fleet files, the events stream) read in a transaction."""

from __future__ import annotations

from typing import Protocol

from better_compute.service.endpoints.ports import EndpointsTx


class OpsTx(EndpointsTx, Protocol):
    """The slice of a transaction the operators' use cases (doctor, console, fleet files, the events
    stream) use: every context's."""
