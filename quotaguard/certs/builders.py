"""Certificates for the admission webhook without cert-manager: a CA, a serving certificate for
the webhook Service, and the CA bundle the API server trusts.

Pure builders and decisions on PEM bytes; `quotaguard.commands.certs` reads and writes them
(Secrets and webhook configurations in a cluster, or files in a directory).

Rotation never breaks a call: a certificate is renewed once less than a third of its lifetime
(and at least `renew_before`) is left, and a replaced CA stays in the trust bundle until it
expires, so both the old and the new serving certificate verify while the kubelet swaps the
mounted files.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_CA_VALIDITY = datetime.timedelta(days=5 * 365)
DEFAULT_CERT_VALIDITY = datetime.timedelta(days=365)
DEFAULT_RENEW_BEFORE = datetime.timedelta(days=30)
# Certificates start a little in the past so that a node whose clock lags still accepts them.
CLOCK_SKEW = datetime.timedelta(minutes=5)
CA_NAME_PREFIX = "quotaguard-ca"


class CertificateInputError(ValueError):
    """PEM data that cannot be used as asked (not a certificate, not a key, not a pair)."""


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, both PEM."""

    cert_pem: bytes
    key_pem: bytes

    @property
    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)


@dataclass(frozen=True)
class TlsState:
    """What exists now; any part may be missing (first run) or unusable (edited by hand)."""

    ca: KeyPair | None = None
    trust_bundle: bytes = b""
    serving: KeyPair | None = None


@dataclass(frozen=True)
class CertSettings:
    service: str = "quotaguard-webhook"
    namespace: str = "quotaguard-system"
    extra_dns_names: tuple[str, ...] = ()
    ip_addresses: tuple[str, ...] = ()
    ca_validity: datetime.timedelta = DEFAULT_CA_VALIDITY
    cert_validity: datetime.timedelta = DEFAULT_CERT_VALIDITY
    renew_before: datetime.timedelta = DEFAULT_RENEW_BEFORE

    @property
    def dns_names(self) -> list[str]:
        names = service_dns_names(self.service, self.namespace)
        return names + [n for n in self.extra_dns_names if n not in names]


@dataclass(frozen=True)
class CertPlan:
    """What the certificates should be after this run, and why each part changed.

    A reason of None means "kept as it is"."""

    ca: KeyPair
    trust_bundle: bytes
    serving: KeyPair
    ca_reason: str | None = None
    serving_reason: str | None = None
    bundle_reason: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return any(r is not None for r in (self.ca_reason, self.serving_reason, self.bundle_reason))


def service_dns_names(service: str, namespace: str) -> list[str]:
    """Every name a client in the cluster may use for the Service; the API server uses
    `<service>.<namespace>.svc`."""
    return [
        f"{service}.{namespace}.svc",
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc.cluster.local",
    ]


def utc(moment: datetime.datetime) -> datetime.datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.UTC)


def not_after(cert: x509.Certificate) -> datetime.datetime:
    return cert.not_valid_after_utc


def renewal_due(
    cert: x509.Certificate, now: datetime.datetime, renew_before: datetime.timedelta
) -> bool:
    """Less than a third of the lifetime, or less than `renew_before`, is left."""
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    remaining = cert.not_valid_after_utc - utc(now)
    return remaining < max(renew_before, lifetime / 3)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _load_key(pem: bytes) -> ec.EllipticCurvePrivateKey:
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise CertificateInputError(f"not a PEM private key: {exc}") from exc
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise CertificateInputError("the private key is not an ECDSA key")
    return key


def build_ca(now: datetime.datetime, validity: datetime.timedelta = DEFAULT_CA_VALIDITY) -> KeyPair:
    """A self-signed CA that signs serving certificates only (path length 0). Its name carries
    the issue time, so an old and a new CA in one bundle are told apart by name too."""
    now = utc(now)
    key = _new_key()
    name = x509.Name(
        [x509.NameAttribute(NameOID.COMMON_NAME, f"{CA_NAME_PREFIX}@{int(now.timestamp())}")]
    )
    public = key.public_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def _general_names(dns_names: Sequence[str], ip_addresses: Sequence[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    for address in ip_addresses:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(address)))
        except ValueError as exc:
            raise CertificateInputError(f"not an IP address: {address!r}") from exc
    return names


def build_serving_cert(
    ca: KeyPair,
    dns_names: Sequence[str],
    now: datetime.datetime,
    validity: datetime.timedelta = DEFAULT_CERT_VALIDITY,
    ip_addresses: Sequence[str] = (),
) -> KeyPair:
    """A TLS server certificate for `dns_names` (the first is the subject), signed by `ca`,
    never outliving it."""
    if not dns_names and not ip_addresses:
        raise CertificateInputError("a serving certificate needs at least one name")
    now = utc(now)
    ca_cert = ca.certificate
    ca_key = _load_key(ca.key_pem)
    key = _new_key()
    public = key.public_key()
    subject = dns_names[0] if dns_names else ip_addresses[0]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(ca_cert.subject)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(min(now + validity, ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.SubjectAlternativeName(_general_names(dns_names, ip_addresses)), critical=False
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def load_certificates(pem: bytes) -> list[x509.Certificate]:
    """Every certificate in a PEM bundle (nothing for empty input)."""
    if not pem.strip():
        return []
    try:
        return x509.load_pem_x509_certificates(pem)
    except ValueError as exc:
        raise CertificateInputError(f"not a PEM certificate bundle: {exc}") from exc


def _pem(certs: Iterable[x509.Certificate]) -> bytes:
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)


def compose_bundle(current_ca: bytes, previous_bundle: bytes, now: datetime.datetime) -> bytes:
    """The CA certificates the API server should trust: the current CA first, then every CA of
    the previous bundle that has not expired yet (once each). An unreadable previous bundle is
    dropped: only the current CA can have signed a certificate this tool still serves."""
    current = load_certificates(current_ca)
    try:
        previous = load_certificates(previous_bundle)
    except CertificateInputError:
        previous = []
    kept: list[x509.Certificate] = []
    seen: set[bytes] = set()
    for cert in [*current, *previous]:
        fingerprint = cert.fingerprint(hashes.SHA256())
        if fingerprint in seen or cert.not_valid_after_utc <= utc(now):
            continue
        seen.add(fingerprint)
        kept.append(cert)
    return _pem(kept)


def subject_alternative_names(cert: x509.Certificate) -> tuple[set[str], set[str]]:
    """(DNS names, IP addresses) a certificate is valid for."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set(), set()
    dns = set(san.get_values_for_type(x509.DNSName))
    ips = {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}
    return dns, ips


def _pair_matches(pair: KeyPair) -> bool:
    cert_public = pair.certificate.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    key_public = (
        _load_key(pair.key_pem)
        .public_key()
        .public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return cert_public == key_public


def _pair_problem(pair: KeyPair, name: str, certificate_name: str) -> str | None:
    """Why a stored key pair cannot be used at all (unreadable, or key and certificate apart)."""
    try:
        if not _pair_matches(pair):
            return f"{certificate_name} does not match its key"
    except (ValueError, CertificateInputError) as exc:
        return f"{name} is unreadable ({exc})"
    return None


def ca_problem(
    ca: KeyPair | None, now: datetime.datetime, renew_before: datetime.timedelta
) -> str | None:
    """Why the CA must be replaced, or None when it can stay."""
    if ca is None:
        return "no CA yet"
    unusable = _pair_problem(ca, "the CA", "the CA certificate")
    if unusable is not None:
        return unusable
    cert = ca.certificate
    constraints = _basic_constraints(cert)
    if constraints is None or not constraints.ca:
        return "the CA certificate is not a CA"
    if renewal_due(cert, now, renew_before):
        return f"the CA expires {_day(not_after(cert))}"
    return None


def _basic_constraints(cert: x509.Certificate) -> x509.BasicConstraints | None:
    try:
        return cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        return None


def serving_problem(
    serving: KeyPair | None,
    ca: KeyPair,
    settings: CertSettings,
    now: datetime.datetime,
) -> str | None:
    """Why the serving certificate must be reissued, or None when it can stay."""
    if serving is None:
        return "no serving certificate yet"
    unusable = _pair_problem(serving, "the serving certificate", "the serving certificate")
    if unusable is not None:
        return unusable
    cert = serving.certificate
    try:
        cert.verify_directly_issued_by(ca.certificate)
    except (ValueError, TypeError, InvalidSignature):
        return "the serving certificate is not signed by the current CA"
    dns, ips = subject_alternative_names(cert)
    wanted_dns = set(settings.dns_names)
    wanted_ips = {str(ipaddress.ip_address(a)) for a in settings.ip_addresses}
    if dns != wanted_dns or ips != wanted_ips:
        return "the serving certificate's names are not " + ", ".join(
            sorted(wanted_dns) + sorted(wanted_ips)
        )
    if renewal_due(cert, now, settings.renew_before):
        return f"the serving certificate expires {_day(not_after(cert))}"
    return None


def _day(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%d")


def plan_certificates(state: TlsState, settings: CertSettings, now: datetime.datetime) -> CertPlan:
    """Decide what the CA, trust bundle and serving certificate must be now; build what is
    missing or due. With nothing due, the plan is the state itself (reasons all None)."""
    now = utc(now)
    ca_reason = ca_problem(state.ca, now, settings.renew_before)
    if ca_reason is None and state.ca is not None:
        ca = state.ca
    else:
        ca = build_ca(now, settings.ca_validity)
    if ca_reason is not None:
        serving_reason: str | None = (
            "no serving certificate yet" if state.serving is None else "the CA was replaced"
        )
    else:
        serving_reason = serving_problem(state.serving, ca, settings, now)
    if serving_reason is None and state.serving is not None:
        serving = state.serving
    else:
        serving = build_serving_cert(
            ca, settings.dns_names, now, settings.cert_validity, settings.ip_addresses
        )
    bundle = compose_bundle(ca.cert_pem, state.trust_bundle, now)
    bundle_reason = None
    if _bundle_fingerprints(bundle) != _bundle_fingerprints(state.trust_bundle):
        if not state.trust_bundle.strip():
            bundle_reason = "no trust bundle yet"
        elif ca_reason and state.ca is not None:
            bundle_reason = "new CA added; the previous one stays until it expires"
        else:
            bundle_reason = "the trust bundle lacks the current CA or holds expired ones"
    notes = [
        f"CA valid until {_day(not_after(ca.certificate))}",
        f"serving certificate valid until {_day(not_after(serving.certificate))}",
    ]
    return CertPlan(ca, bundle, serving, ca_reason, serving_reason, bundle_reason, notes)


def _bundle_fingerprints(pem: bytes) -> list[bytes]:
    try:
        return [c.fingerprint(hashes.SHA256()) for c in load_certificates(pem)]
    except CertificateInputError:
        return []
