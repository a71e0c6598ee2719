"""Node identity on samples (fairlane_events.signing): who can sign for which node."""

from __future__ import annotations

from pathlib import Path

import pytest

from fairlane_events.signing import (
    KeyFileError,
    NodeKey,
    NodeKeySigner,
    RingSigner,
    SignatureError,
    derive_node_key,
    parse_key_ring,
    parse_node_key,
    read_key_file,
    sign,
    verify,
)

RING = parse_key_ring(
    "# comment\nk2 second-secret-0123456789abcdef\nk1 first-secret-0123456789abcdef\n"
)
VALUE = b'{"schema":"node-sample/1","node":"n1","ts_ms":1}'


def test_the_ring_signs_with_its_first_secret_and_verifies_with_any() -> None:
    header = RingSigner(RING).signature("n1", b"n1", VALUE)
    assert header.startswith(b"v1 k2 ")
    verify(RING, b"n1", VALUE, header)
    old = sign(derive_node_key(b"first-secret-0123456789abcdef", "n1"), "k1", b"n1", VALUE)
    verify(RING, b"n1", VALUE, old)  # an agent not rolled yet, mid-rotation


@pytest.mark.parametrize(
    ("key", "value", "header", "reason"),
    [
        (b"n1", VALUE, None, "missing"),
        (b"n1", VALUE, b"v1 k2", "malformed"),
        (b"n1", VALUE, b"v2 k2 00", "malformed"),
        (b"n1", VALUE, b"v1 k2 " + b"0" * 1000, "malformed"),
        (b"n1", VALUE, b"v1 k9 " + b"0" * 64, "unknown_key"),
        # the same record moved to another node's key: n1's signature is not n2's
        (b"n2", VALUE, RingSigner(RING).signature("n1", b"n1", VALUE), "mismatch"),
        # one byte of the value changed
        (
            b"n1",
            VALUE.replace(b"1}", b"2}"),
            RingSigner(RING).signature("n1", b"n1", VALUE),
            "mismatch",
        ),
        (None, VALUE, RingSigner(RING).signature("n1", b"n1", VALUE), "mismatch"),
    ],
)
def test_a_record_not_signed_by_its_node_is_refused_with_its_reason(
    key: bytes | None, value: bytes, header: bytes | None, reason: str
) -> None:
    with pytest.raises(SignatureError) as refused:
        verify(RING, key, value, header)
    assert refused.value.reason == reason


def test_a_ring_of_another_cluster_does_not_verify() -> None:
    other = parse_key_ring("k2 another-clusters-secret-0123456789")
    with pytest.raises(SignatureError, match="does not match node 'n1'"):
        verify(other, b"n1", VALUE, RingSigner(RING).signature("n1", b"n1", VALUE))


def test_a_node_key_signs_for_its_own_node_only() -> None:
    key = NodeKey("k2", "n1", derive_node_key(b"second-secret-0123456789abcdef", "n1"))
    assert parse_node_key(key.line()) == key
    signer = NodeKeySigner(key)
    verify(RING, b"n1", VALUE, signer.signature("n1", b"n1", VALUE))
    with pytest.raises(KeyFileError, match="'n1''s, not 'n2''s"):
        signer.signature("n2", b"n2", VALUE)


def test_node_keys_differ_per_node_and_per_secret() -> None:
    keys = {
        derive_node_key(secret, node)
        for secret in (b"first-secret-0123456789abcdef", b"second-secret-0123456789abcdef")
        for node in ("n1", "n2")
    }
    assert len(keys) == 4


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "no '<key id> <secret>' line"),
        ("k1 short", "16\\+ bytes"),
        ("k1 a-long-enough-secret-000 extra", "expected '<key id> <secret>'"),
        ("k1 a-long-enough-secret-000\nk1 a-long-enough-secret-111", "appears twice"),
        ("k/1 a-long-enough-secret-000", "key id 'k/1'"),
    ],
)
def test_a_broken_key_ring_names_its_problem(text: str, problem: str) -> None:
    with pytest.raises(KeyFileError, match=problem):
        parse_key_ring(text)


@pytest.mark.parametrize("text", ["k1 n1", "k1 n1 zz", "k1 n1 " + "00" * 16, "k1 n1 00\nk1 n2 00"])
def test_a_broken_node_key_is_refused(text: str) -> None:
    with pytest.raises(KeyFileError):
        parse_node_key(text)


def test_a_missing_key_file_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match=r"cannot read .*absent"):
        read_key_file(tmp_path / "absent", parse_key_ring)
