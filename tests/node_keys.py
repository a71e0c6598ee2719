"""The tests' node identity: one key ring (tests/fixtures/node-keys) for every stack the
tests start, and the signature headers the tests' own producers put on node samples."""

from __future__ import annotations

from pathlib import Path

from fairlane_events.signing import SIGNATURE_HEADER, RingSigner, parse_key_ring

__all__ = ["SIGNING_ENV", "TEST_KEY_RING", "signed"]

TEST_KEY_RING = Path(__file__).parent / "fixtures" / "node-keys" / "test-key-ring"
#: What makes a scorer verify, and an agent sign, with the tests' key ring.
SIGNING_ENV = {"FAIRLANE_SAMPLE_KEY_RING_FILE": str(TEST_KEY_RING)}
_SIGNER = RingSigner(parse_key_ring(TEST_KEY_RING.read_text()))


def signed(key: bytes, value: bytes) -> list[tuple[str, bytes]]:
    """The headers of a node sample keyed ``key`` (its node) signed by that node."""
    return [(SIGNATURE_HEADER, _SIGNER.signature(key.decode(), key, value))]
