"""Throwaway certificates for the tests, made with openssl at test time, never committed."""

from __future__ import annotations

import subprocess
from pathlib import Path

_SELF_SIGNED = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]


def self_signed(where: Path, common_name: str) -> tuple[Path, Path]:
    """A self-signed certificate (its own CA) and its unencrypted key, in ``where``."""
    cert, key = where / f"{common_name}.crt", where / f"{common_name}.key"
    subprocess.run(
        [*_SELF_SIGNED, "-subj", f"/CN={common_name}", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    return cert, key
