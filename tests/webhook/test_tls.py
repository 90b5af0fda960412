"""TLS: 1.2 or newer only, and a rotated certificate is served without a restart."""

from __future__ import annotations

import socket
import ssl
import threading
import warnings

import pytest

from quotaguard.metrics.registry import REGISTRY
from quotaguard.serve.tlsreload import CertificateError, ReloadingCertificate

from .conftest import Certificates, LiveServer, der, read_response

REQUEST = (
    b"POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    b"Content-Length: 2\r\n\r\n{}"
)


def handshake(port: int, context: ssl.SSLContext) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    return context.wrap_socket(raw, server_hostname="127.0.0.1")


def exchange(connection: ssl.SSLSocket) -> bytes:
    """One request on an open keep-alive connection; the status line of the answer."""
    connection.sendall(REQUEST)
    return read_response(connection).split(b"\r\n")[0]


def test_rotated_certificate_is_served_to_new_connections_while_open_ones_keep_working(
    server: LiveServer, certificates: Certificates
) -> None:
    client = certificates.client_context()
    old = certificates.current
    kept = handshake(server.webhook_port, client)
    assert kept.getpeercert(binary_form=True) == der(old)
    assert exchange(kept) == b"HTTP/1.1 400 Bad Request"

    reloads = REGISTRY.get_sample_value("quotaguard_tls_certificate_reloads_total") or 0.0
    new = certificates.rotate()
    assert server.call(server.certificate.reload_if_changed) is True
    assert server.call(server.certificate.reload_if_changed) is False
    assert REGISTRY.get_sample_value("quotaguard_tls_certificate_reloads_total") == reloads + 1

    with handshake(server.webhook_port, client) as fresh:
        assert fresh.getpeercert(binary_form=True) == der(new)
        assert exchange(fresh) == b"HTTP/1.1 400 Bad Request"
    # The connection opened before the rotation is still usable, on the old certificate.
    assert exchange(kept) == b"HTTP/1.1 400 Bad Request"
    assert kept.getpeercert(binary_form=True) == der(old)
    kept.close()


def test_half_rotated_pair_is_refused_and_old_certificate_kept(
    server: LiveServer, certificates: Certificates
) -> None:
    old = certificates.current
    failures = REGISTRY.get_sample_value("quotaguard_tls_certificate_reload_failures_total") or 0.0
    other = certificates.ca.issue_cert("127.0.0.1")
    other.cert_chain_pems[0].write_to_path(str(certificates.cert_file))  # the key is still old
    assert server.call(server.certificate.reload_if_changed) is False
    assert (
        REGISTRY.get_sample_value("quotaguard_tls_certificate_reload_failures_total")
        == failures + 1
    )
    with handshake(server.webhook_port, certificates.client_context()) as connection:
        assert connection.getpeercert(binary_form=True) == der(old)
    # The key arrives: the pair is complete and goes into force.
    other.private_key_pem.write_to_path(str(certificates.key_file))
    assert server.call(server.certificate.reload_if_changed) is True
    with handshake(server.webhook_port, certificates.client_context()) as connection:
        assert connection.getpeercert(binary_form=True) == der(other)


def test_missing_files_are_a_certificate_error(
    tmp_path: object, certificates: Certificates
) -> None:
    with pytest.raises(CertificateError, match=r"tls\.missing"):
        ReloadingCertificate(
            certificates.cert_file.with_suffix(".missing"), certificates.key_file
        ).load()
    with pytest.raises(CertificateError, match="not a usable certificate"):
        ReloadingCertificate(certificates.key_file, certificates.key_file).load()


def old_protocol_client(certificates: Certificates, version: ssl.TLSVersion) -> ssl.SSLContext:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        certificates.ca.configure_trust(context)
        context.set_ciphers("DEFAULT:@SECLEVEL=0")  # let this client really offer TLS 1.1
        context.minimum_version = version
        context.maximum_version = version
    return context


def permissive_server(certificates: Certificates) -> tuple[int, threading.Thread]:
    """A plain ssl server that does accept TLS 1.1: proof the old client really offers it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_1
        context.set_ciphers("DEFAULT:@SECLEVEL=0")
    certificates.current.configure_cert(context)
    listener = socket.create_server(("127.0.0.1", 0))

    def accept_one() -> None:
        with listener, listener.accept()[0] as raw, context.wrap_socket(raw, server_side=True):
            pass

    thread = threading.Thread(target=accept_one, daemon=True)
    thread.start()
    return listener.getsockname()[1], thread


def test_tls_1_1_client_is_refused_by_the_server(
    server: LiveServer, certificates: Certificates
) -> None:
    client = old_protocol_client(certificates, ssl.TLSVersion.TLSv1_1)
    port, thread = permissive_server(certificates)
    with handshake(port, client) as control:
        assert control.version() == "TLSv1.1"
    thread.join(timeout=5)
    with pytest.raises(ssl.SSLError) as refused:
        handshake(server.webhook_port, client)
    assert "NO_PROTOCOLS_AVAILABLE" not in str(refused.value)


def test_tls_1_2_and_1_3_are_accepted(server: LiveServer, certificates: Certificates) -> None:
    for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
        with handshake(
            server.webhook_port, old_protocol_client(certificates, version)
        ) as connection:
            assert connection.version() == version.name.replace("v1_", "v1.")


@pytest.mark.parametrize("window", ["expired", "not yet valid"])
def test_a_certificate_outside_its_validity_is_refused_on_rotation(
    server: LiveServer, certificates: Certificates, window: str
) -> None:
    import datetime

    now = datetime.datetime.now(datetime.UTC)
    day = datetime.timedelta(days=1)
    span = (now - 3 * day, now - day) if window == "expired" else (now + day, now + 3 * day)
    old = certificates.current
    failures = REGISTRY.get_sample_value("quotaguard_tls_certificate_reload_failures_total") or 0.0
    bad = certificates.ca.issue_cert("127.0.0.1", not_before=span[0], not_after=span[1])
    bad.private_key_pem.write_to_path(str(certificates.key_file))
    bad.cert_chain_pems[0].write_to_path(str(certificates.cert_file))
    assert server.call(server.certificate.reload_if_changed) is False
    assert (
        REGISTRY.get_sample_value("quotaguard_tls_certificate_reload_failures_total")
        == failures + 1
    )
    with handshake(server.webhook_port, certificates.client_context()) as connection:
        assert connection.getpeercert(binary_form=True) == der(old)
    status = server.certificate.status()
    assert ("expired" if window == "expired" else "not valid before") in str(status["lastRefused"])
    assert status["notAfter"] is not None
