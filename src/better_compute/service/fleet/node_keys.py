"""Ed25519 node keys on the server: reading a registered public key and checking a signature.

The only server module that uses `cryptography`: the domain stays standard-library only, so the
rules of what is signed live in `domain.fleet.node_reports` and this module only does the arithmetic.
A public key is accepted as the 32 raw bytes in standard base64, or as a PEM `PUBLIC KEY`
(SubjectPublicKeyInfo) block; it is stored as the base64 of the raw bytes, so one key has one
spelling.
"""

from __future__ import annotations

import base64
import binascii

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat, load_pem_public_key

from better_compute.domain.kernel.errors import InvalidInput

MAX_KEY_TEXT = 4096


def _bad_key(why: str) -> InvalidInput:
    return InvalidInput(
        f"publicKey must be an Ed25519 public key, as the base64 of its 32 raw bytes or a PEM"
        f" 'PUBLIC KEY' block: {why}",
        {"field": "publicKey"},
    )


def stored_key(text: str) -> str:
    """The key as stored (base64 of the raw 32 bytes), from either accepted spelling."""
    if len(text) > MAX_KEY_TEXT:
        raise _bad_key("too long")
    stripped = text.strip()
    if stripped.startswith("-----BEGIN"):
        try:
            loaded = load_pem_public_key(stripped.encode("ascii"))
        except (ValueError, UnsupportedAlgorithm, UnicodeEncodeError):
            raise _bad_key("the PEM block does not parse") from None
        if not isinstance(loaded, Ed25519PublicKey):
            raise _bad_key("the PEM block holds another kind of key")
        raw = loaded.public_bytes(Encoding.Raw, PublicFormat.Raw)
    else:
        try:
            raw = base64.b64decode(stripped, validate=True)
        except (binascii.Error, ValueError):
            raise _bad_key("not base64") from None
        if len(raw) != 32:
            raise _bad_key(f"{len(raw)} bytes, not 32")
    return base64.b64encode(raw).decode("ascii")


def verifies(public_key: str, signature: bytes, message: bytes) -> bool:
    """Whether `signature` is the stored key's Ed25519 signature of `message`."""
    try:
        key = Ed25519PublicKey.from_public_bytes(base64.b64decode(public_key))
        key.verify(signature, message)
    except (InvalidSignature, ValueError):
        return False
    return True
