"""Name-based (version 5) uuids, made fast: atom ids and a simulated node's GPU and MIG uuids are
derived from names by the hundred for every node of a fleet, and `uuid.uuid5` spent most of each
one building and checking a `UUID` object."""

from __future__ import annotations

import hashlib
import uuid


def uuid5_hex(namespace: uuid.UUID, name: str) -> str:
    """The 32 hex digits of `uuid.uuid5(namespace, name)`: its SHA-1, with the version nibble (byte 6)
    and the variant bits (byte 8) set as RFC 4122 sets them."""
    digest = bytearray(hashlib.sha1(namespace.bytes + name.encode()).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50
    digest[8] = (digest[8] & 0x3F) | 0x80
    return digest.hex()


def uuid5_text(namespace: uuid.UUID, name: str) -> str:
    """`str(uuid.uuid5(namespace, name))`: the hex digits grouped 8-4-4-4-12."""
    h = uuid5_hex(namespace, name)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
