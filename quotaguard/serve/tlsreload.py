"""The webhook's TLS server context, with its certificate re-read when the files change.

cert-manager and kubelet rotate a mounted Secret by replacing the files; the server must pick the
new pair up without a restart and without dropping connections. Each change builds a complete new
`SSLContext` (so a certificate that does not match its key, as seen half-way through a rotation,
is refused and the old pair stays), and the listening context's SNI callback hands every new
handshake the newest one. Open connections keep the session they negotiated. The callback runs
whether or not the client sends SNI (the API server does not for an IP address).
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import logging
import os
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509

from quotaguard.metrics.serve_metrics import (
    TLS_CERTIFICATE_EXPIRY,
    TLS_RELOAD_FAILURES,
    TLS_RELOADS,
)

log = logging.getLogger("quotaguard.tls")

DEFAULT_POLL_INTERVAL = 5.0

# TLS 1.2 suites: forward secrecy and AEAD only. TLS 1.3 suites are fixed by OpenSSL and all good.
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"


class CertificateError(Exception):
    """The certificate/key files cannot be used (missing, unreadable, or not a pair)."""


@dataclass(frozen=True, slots=True)
class _Stamp:
    cert_sha256: str
    key_sha256: str


def new_server_context() -> ssl.SSLContext:
    """A server context with quotaguard's protocol settings and no certificate yet."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(TLS12_CIPHERS)
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
    context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    return context


class ReloadingCertificate:
    """`context` is what the server listens with; `reload_if_changed()` (or the `watch()` task)
    swaps in the newest certificate for new handshakes."""

    def __init__(self, cert_file: str | os.PathLike[str], key_file: str | os.PathLike[str]) -> None:
        self.cert_file = Path(cert_file)
        self.key_file = Path(key_file)
        self._stamp: _Stamp | None = None
        self._seen: _Stamp | None = None
        self._active: ssl.SSLContext | None = None
        self._not_after: datetime.datetime | None = None
        self._last_error: str | None = None
        # Holds no certificate itself: every handshake is handed `_active` by the SNI callback.
        self.context = new_server_context()
        self.context.sni_callback = self._select_context

    @property
    def ready(self) -> bool:
        return self._active is not None

    @property
    def not_after(self) -> datetime.datetime | None:
        return self._not_after

    @property
    def last_error(self) -> str | None:
        """Why the last changed pair was refused; None once a good one is in force."""
        return self._last_error

    def status(self) -> dict[str, object]:
        """For /readyz: the certificate in force and the last refused change."""
        return {
            "notAfter": self._not_after.isoformat() if self._not_after else None,
            "lastRefused": self._last_error,
        }

    def load(self) -> None:
        """Load the pair now; `CertificateError` (and no change) when it cannot be used."""
        stamp, cert_pem = self._read_stamp()
        self._install(stamp, self._build(), cert_pem)

    def reload_if_changed(self) -> bool:
        """Poll once; True when a new certificate was put in force. Never raises."""
        try:
            stamp, cert_pem = self._read_stamp()
        except CertificateError as exc:
            return self._refuse(None, str(exc))
        if stamp == self._seen:
            return False
        try:
            context = self._build()
            _check_validity(cert_pem, self.cert_file)
        except CertificateError as exc:
            return self._refuse(stamp, str(exc))
        self._install(stamp, context, cert_pem)
        return True

    async def watch(self, interval: float = DEFAULT_POLL_INTERVAL) -> None:
        """Poll forever (until cancelled). Runs on the event loop: the files are tiny and the
        context must be swapped on the thread that runs handshakes."""
        while True:
            await asyncio.sleep(interval)
            self.reload_if_changed()

    # -- internals ---------------------------------------------------------------------------
    def _select_context(
        self, connection: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, _: ssl.SSLContext
    ) -> None:
        if self._active is not None:
            connection.context = self._active

    def _read_stamp(self) -> tuple[_Stamp, bytes]:
        try:
            cert_pem = self.cert_file.read_bytes()
            key_pem = self.key_file.read_bytes()
        except OSError as exc:
            raise CertificateError(f"{exc.filename}: {exc.strerror or exc}") from exc
        stamp = _Stamp(hashlib.sha256(cert_pem).hexdigest(), hashlib.sha256(key_pem).hexdigest())
        return stamp, cert_pem

    def _build(self) -> ssl.SSLContext:
        context = new_server_context()
        try:
            context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise CertificateError(
                f"{self.cert_file} / {self.key_file}: not a usable certificate and key: {exc}"
            ) from exc
        return context

    def _install(self, stamp: _Stamp, context: ssl.SSLContext, cert_pem: bytes) -> None:
        self._active = context
        self._stamp = self._seen = stamp
        self._last_error = None
        self._not_after = _not_after(cert_pem)
        TLS_RELOADS.inc()
        if self._not_after is not None:
            TLS_CERTIFICATE_EXPIRY.set(self._not_after.timestamp())
        log.info(
            "serving certificate loaded",
            extra={
                "cert_file": str(self.cert_file),
                "sha256": stamp.cert_sha256,
                "not_after": self._not_after.isoformat() if self._not_after else None,
            },
        )

    def _refuse(self, stamp: _Stamp | None, reason: str) -> bool:
        if stamp is not None:
            self._seen = stamp
        elif reason == self._last_error:
            return False  # the same unreadable file, polled again
        self._last_error = reason
        TLS_RELOAD_FAILURES.inc()
        log.error(
            "certificate change refused; keeping the one in force",
            extra={"cert_file": str(self.cert_file), "reason": reason},
        )
        return False


def _check_validity(cert_pem: bytes, cert_file: Path) -> None:
    """Refuse a certificate outside its validity period: put in force, every handshake would
    fail, and the pair in force may well still be good."""
    try:
        certificate = x509.load_pem_x509_certificate(cert_pem)
    except ValueError:
        return  # load_cert_chain accepted it; nothing more to judge
    now = datetime.datetime.now(datetime.UTC)
    if now >= certificate.not_valid_after_utc:
        when = certificate.not_valid_after_utc.isoformat()
        raise CertificateError(f"{cert_file}: certificate expired at {when}")
    if now < certificate.not_valid_before_utc:
        when = certificate.not_valid_before_utc.isoformat()
        raise CertificateError(f"{cert_file}: certificate not valid before {when}")


def _not_after(cert_pem: bytes) -> datetime.datetime | None:
    try:
        return x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc
    except ValueError:
        return None
