"""Node identity on node samples: each record carries an HMAC-SHA256 of its key and value
under its node's own key, in a Kafka header (pure: hashlib and hmac only).

Keys come in two forms (docs/security.md, "Node identity"):

- a **key ring**: named cluster secrets, one ``<key id> <secret>`` per line, the first
  one current. The scorer holds it and derives every node's key from it; so may an agent
  that speaks for many nodes (the simulated fleet, the DCGM bridge).
- a **node key**: ``<key id> <node> <hex key>``, one node's key derived from one cluster
  secret (:func:`derive_node_key`). An agent on a GPU node holds only its own, so a
  compromised node cannot sign for another one.

A record is signed over ``DOMAIN + key + NUL + value``: the key is the node name (the
scorer refuses records keyed otherwise), so a record moved to another node's name, or
edited in any byte, fails. The signature says nothing about time; the scorer's per-node
monotonic time rejects a replayed record.

Rotation: add the new secret to the scorer's ring (any line), roll the agents onto keys
derived from it, then drop the old line. The header names the key id, so both verify
meanwhile.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

from fairlane_events.errors import KeyFileError, SignatureError

__all__ = [
    "MIN_SECRET_BYTES",
    "SIGNATURE_HEADER",
    "KeyFileError",
    "KeyRing",
    "NodeKey",
    "NodeKeySigner",
    "RingSigner",
    "SampleSigner",
    "SignatureError",
    "derive_node_key",
    "parse_key_ring",
    "parse_node_key",
    "read_key_file",
    "sign",
    "verify",
]

#: The Kafka header that carries a node sample's signature.
SIGNATURE_HEADER = "fairlane-signature"
_VERSION = "v1"
_KEY_DOMAIN = b"fairlane node key v1\x00"
_RECORD_DOMAIN = b"fairlane node sample v1\x00"
_KEY_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
#: The shortest cluster secret accepted, in bytes (HMAC-SHA256's key is 32 bytes wide).
MIN_SECRET_BYTES = 16
_MAX_HEADER_BYTES = 256  # "v1 <id up to 64> <64 hex>": anything longer is not ours


def derive_node_key(secret: bytes, node: str) -> bytes:
    """``HMAC-SHA256(secret, DOMAIN + node)``: the node's own key under a cluster secret."""
    return hmac.new(secret, _KEY_DOMAIN + node.encode(), hashlib.sha256).digest()


def _mac(node_key: bytes, record_key: bytes, value: bytes) -> str:
    return hmac.new(
        node_key, _RECORD_DOMAIN + record_key + b"\x00" + value, hashlib.sha256
    ).hexdigest()


def sign(node_key: bytes, key_id: str, record_key: bytes, value: bytes) -> bytes:
    """The signature header's value for one record: ``v1 <key id> <hex HMAC>``."""
    return f"{_VERSION} {key_id} {_mac(node_key, record_key, value)}".encode()


def _key_id(text: str, where: str) -> str:
    if not _KEY_ID.fullmatch(text):
        raise KeyFileError(f"{where}: key id {text!r} is not 1-64 of [A-Za-z0-9._-]")
    return text


def _lines(text: str) -> list[tuple[int, list[str]]]:
    return [
        (n, line.split())
        for n, raw in enumerate(text.splitlines(), 1)
        if (line := raw.strip()) and not line.startswith("#")
    ]


@dataclass(frozen=True)
class KeyRing:
    """Named cluster secrets; the first is the one to sign with."""

    secrets: Mapping[str, bytes]
    _derived: dict[tuple[str, str], bytes] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @property
    def current(self) -> str:
        return next(iter(self.secrets))

    def node_key(self, node: str, key_id: str) -> bytes | None:
        """``node``'s key under secret ``key_id`` (derived once); None: no such secret."""
        derived = self._derived.get((key_id, node))
        if derived is None:
            secret = self.secrets.get(key_id)
            if secret is None:
                return None
            derived = self._derived[(key_id, node)] = derive_node_key(secret, node)
        return derived


def parse_key_ring(text: str, where: str = "key ring") -> KeyRing:
    """``<key id> <secret>`` per line (``#`` comments and blank lines ignored), the first
    current. Raises KeyFileError naming the line."""
    secrets: dict[str, bytes] = {}
    for n, parts in _lines(text):
        if len(parts) != 2:
            raise KeyFileError(f"{where} line {n}: expected '<key id> <secret>'")
        key_id, secret = _key_id(parts[0], f"{where} line {n}"), parts[1].encode()
        if len(secret) < MIN_SECRET_BYTES:
            raise KeyFileError(f"{where} line {n}: a secret needs {MIN_SECRET_BYTES}+ bytes")
        if key_id in secrets:
            raise KeyFileError(f"{where} line {n}: key id {key_id!r} appears twice")
        secrets[key_id] = secret
    if not secrets:
        raise KeyFileError(f"{where}: no '<key id> <secret>' line")
    return KeyRing(secrets)


@dataclass(frozen=True)
class NodeKey:
    """One node's key, derived from the cluster secret ``key_id``."""

    key_id: str
    node: str
    key: bytes = field(repr=False)

    def line(self) -> str:
        """The node key file's one line (:func:`parse_node_key` reads it back)."""
        return f"{self.key_id} {self.node} {self.key.hex()}\n"


def parse_node_key(text: str, where: str = "node key") -> NodeKey:
    """``<key id> <node> <hex key>`` (one line). Raises KeyFileError."""
    lines = _lines(text)
    if len(lines) != 1 or len(lines[0][1]) != 3:
        raise KeyFileError(f"{where}: expected one line '<key id> <node> <hex key>'")
    key_id, node, hex_key = lines[0][1]
    try:
        key = bytes.fromhex(hex_key)
    except ValueError as exc:
        raise KeyFileError(f"{where}: the key is not hexadecimal") from exc
    if len(key) != hashlib.sha256().digest_size:
        raise KeyFileError(f"{where}: the key is not 32 bytes")
    return NodeKey(_key_id(key_id, where), node, key)


def verify(
    ring: KeyRing, record_key: bytes | None, value: bytes | None, header: bytes | None
) -> None:
    """Check a record's signature against ``ring``; raises SignatureError (reason:
    ``missing``, ``malformed``, ``unknown_key`` or ``mismatch``)."""
    if header is None:
        raise SignatureError("missing", f"signature: no {SIGNATURE_HEADER} header")
    parts = header.split(b" ") if len(header) <= _MAX_HEADER_BYTES else []
    if len(parts) != 3 or parts[0] != _VERSION.encode():
        raise SignatureError("malformed", f"signature: {SIGNATURE_HEADER} is not 'v1 <id> <mac>'")
    if record_key is None or value is None:
        raise SignatureError("mismatch", "signature: a record without key or value")
    key_id = parts[1].decode(errors="replace")
    node_key = ring.node_key(record_key.decode(errors="replace"), key_id)
    if node_key is None:
        raise SignatureError("unknown_key", f"signature: unknown key id {key_id!r}")
    if not hmac.compare_digest(_mac(node_key, record_key, value).encode(), parts[2]):
        raise SignatureError(
            "mismatch", f"signature: does not match node {record_key.decode(errors='replace')!r}"
        )


K = TypeVar("K", KeyRing, NodeKey)


def read_key_file(path: Path, parse: Callable[[str, str], K]) -> K:
    """``parse`` (:func:`parse_key_ring` or :func:`parse_node_key`) of the file at
    ``path``; a file that cannot be read is a KeyFileError too, naming it."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise KeyFileError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return parse(text, str(path))


class SampleSigner(Protocol):
    """What a sample publisher asks: the signature header of one record of ``node``."""

    def signature(self, node: str, record_key: bytes, value: bytes) -> bytes: ...


@dataclass(frozen=True)
class RingSigner:
    """Signs for any node with the ring's current secret (one agent, many nodes)."""

    ring: KeyRing

    def signature(self, node: str, record_key: bytes, value: bytes) -> bytes:
        key_id = self.ring.current
        node_key = self.ring.node_key(node, key_id) or b""  # the current id is in it
        return sign(node_key, key_id, record_key, value)


@dataclass(frozen=True)
class NodeKeySigner:
    """Signs for its own node only: a record of another node is a programming or
    deployment error, raised rather than sent unverifiable."""

    key: NodeKey

    def signature(self, node: str, record_key: bytes, value: bytes) -> bytes:
        if node != self.key.node:
            raise KeyFileError(f"the node key is {self.key.node!r}'s, not {node!r}'s")
        return sign(self.key.key, self.key.key_id, record_key, value)
