"""A node's identity on disk: its Ed25519 key, who it is, where its server is, its next sequence.

`bcd join` writes it under the state directory:

- `node.key`: the private key, PEM (PKCS #8, unencrypted), mode 0600, never sent anywhere;
- `identity.json`: `{"node", "server", "publicKey", "joinedAt"}`;
- `sequence`: the sequence number the next signed report carries, as decimal text.

Each file is written to a temporary name and renamed, so a crash leaves the old file or the new one.
The sequence is advanced on disk before the report that uses it is sent: a number is never used
twice, even across a crash (a report lost that way is sent again with a new number).
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
    load_pem_private_key,
)

KEY_FILE = "node.key"
IDENTITY_FILE = "identity.json"
SEQUENCE_FILE = "sequence"


def _write(path: Path, data: bytes, mode: int) -> None:
    """Write `data` to `path` atomically, the file created with `mode` from the start."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def public_key_text(key: Ed25519PrivateKey) -> str:
    """The public half as the server takes it: PEM `PUBLIC KEY`."""
    return key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo).decode("ascii")


@dataclass
class Identity:
    """A joined node's identity, read from (and advancing its sequence in) `state_dir`."""

    state_dir: Path
    node: str
    server: str
    key: Ed25519PrivateKey

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    @classmethod
    def create(
        cls, state_dir: Path, node: str, server: str, key: Ed25519PrivateKey, joined_at: str
    ) -> Identity:
        """Write a fresh identity (a new key starts the sequence at 1 again)."""
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
        _write(state_dir / KEY_FILE, pem, 0o600)
        record = {"node": node, "server": server, "publicKey": public_key_text(key), "joinedAt": joined_at}
        _write(state_dir / IDENTITY_FILE, (json.dumps(record, indent=2) + "\n").encode(), 0o600)
        _write(state_dir / SEQUENCE_FILE, b"1\n", 0o600)
        return cls(state_dir, node, server, key)

    @classmethod
    def load(cls, state_dir: Path) -> Identity:
        record = json.loads((state_dir / IDENTITY_FILE).read_text())
        key = load_pem_private_key((state_dir / KEY_FILE).read_bytes(), password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise ValueError(f"{state_dir / KEY_FILE} is not an Ed25519 key")
        return cls(state_dir, str(record["node"]), str(record["server"]), key)

    def next_sequence(self) -> int:
        """The sequence number the next report carries (read from disk)."""
        return int((self.state_dir / SEQUENCE_FILE).read_text().strip() or "1")

    def take_sequence(self) -> int:
        """The next sequence number, already advanced on disk past it."""
        with self._lock:
            number = self.next_sequence()
            _write(self.state_dir / SEQUENCE_FILE, f"{number + 1}\n".encode(), 0o600)
            return number
