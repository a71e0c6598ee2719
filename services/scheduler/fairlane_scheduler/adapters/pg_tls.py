"""TLS to Postgres: libpq's ``sslmode`` names, turned into what asyncpg takes.

``verify-ca`` and ``verify-full`` build an :class:`ssl.SSLContext` from the CA file
(``sslrootcert``; the system's CAs when none is given), and ``verify-full`` also checks
that the certificate names the host connected to; a client certificate and key
(``sslcert``/``sslkey``) are presented when given, for servers that want mutual TLS.
The weaker modes are passed to asyncpg by name. ``None`` leaves the choice to the DSN
(``?sslmode=...``), as asyncpg reads it there.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Literal

__all__ = ["SslMode", "client_ssl", "is_certificate_error"]

SslMode = Literal["disable", "allow", "prefer", "require", "verify-ca", "verify-full"]


def client_ssl(
    mode: SslMode | None,
    *,
    rootcert: Path | None = None,
    cert: Path | None = None,
    key: Path | None = None,
) -> ssl.SSLContext | str | None:
    """The ``ssl`` argument for :func:`asyncpg.create_pool`."""
    if mode not in ("verify-ca", "verify-full"):
        if cert is not None and mode is not None and mode != "disable":
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE  # mode require: encrypted, server unverified
            ctx.load_cert_chain(cert, key)
            return ctx
        return mode
    ctx = ssl.create_default_context(cafile=str(rootcert) if rootcert is not None else None)
    ctx.check_hostname = mode == "verify-full"
    ctx.verify_mode = ssl.CERT_REQUIRED
    if cert is not None:
        ctx.load_cert_chain(cert, key)
    return ctx


def is_certificate_error(exc: BaseException) -> bool:
    """The server's certificate failed verification (untrusted, expired, wrong host)."""
    return isinstance(exc, ssl.SSLCertVerificationError)
