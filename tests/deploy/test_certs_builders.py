"""The certificate decisions of `quotaguard certs`: what a new CA and serving certificate look
like, when they are renewed, and which CAs the API server is told to trust."""

from __future__ import annotations

import datetime

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from quotaguard.certs.builders import (
    CertificateInputError,
    CertSettings,
    KeyPair,
    TlsState,
    build_ca,
    build_serving_cert,
    compose_bundle,
    load_certificates,
    plan_certificates,
    renewal_due,
    service_dns_names,
    subject_alternative_names,
)

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
DAY = datetime.timedelta(days=1)
SETTINGS = CertSettings()


def cert(pair: KeyPair) -> x509.Certificate:
    return pair.certificate


def verifies(serving: KeyPair, bundle: bytes) -> bool:
    """Whether some CA of `bundle` signed `serving` (what the API server checks)."""
    for ca in load_certificates(bundle):
        try:
            cert(serving).verify_directly_issued_by(ca)
        except Exception:
            continue
        return True
    return False


@pytest.fixture(scope="module")
def ca() -> KeyPair:
    return build_ca(T0)


def test_service_names_include_the_one_the_api_server_dials() -> None:
    names = service_dns_names("quotaguard-webhook", "quotaguard-system")
    assert names[0] == "quotaguard-webhook.quotaguard-system.svc"
    assert set(names) == {
        "quotaguard-webhook",
        "quotaguard-webhook.quotaguard-system",
        "quotaguard-webhook.quotaguard-system.svc",
        "quotaguard-webhook.quotaguard-system.svc.cluster.local",
    }


def test_ca_may_sign_certificates_but_no_intermediate(ca: KeyPair) -> None:
    c = cert(ca)
    constraints = c.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca and constraints.value.path_length == 0
    usage = c.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.key_cert_sign and usage.crl_sign
    assert c.issuer == c.subject
    assert c.not_valid_after_utc - T0 == datetime.timedelta(days=5 * 365)


def test_serving_cert_is_a_server_cert_for_the_service_names(ca: KeyPair) -> None:
    serving = build_serving_cert(ca, SETTINGS.dns_names, T0, ip_addresses=["127.0.0.1"])
    c = cert(serving)
    dns, ips = subject_alternative_names(c)
    assert dns == set(SETTINGS.dns_names)
    assert ips == {"127.0.0.1"}
    assert not c.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    usage = c.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.digital_signature and not usage.key_cert_sign
    extended = c.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(extended) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert verifies(serving, ca.cert_pem)
    assert c.not_valid_before_utc < T0  # a lagging clock still accepts it


def test_serving_cert_never_outlives_its_ca() -> None:
    short_ca = build_ca(T0, datetime.timedelta(days=100))
    serving = build_serving_cert(short_ca, ["a.b.svc"], T0, datetime.timedelta(days=365))
    assert cert(serving).not_valid_after_utc == cert(short_ca).not_valid_after_utc


def test_bad_ip_address_is_an_input_error(ca: KeyPair) -> None:
    with pytest.raises(CertificateInputError, match="not an IP address"):
        build_serving_cert(ca, ["a"], T0, ip_addresses=["localhost"])


@pytest.mark.parametrize(
    ("age_days", "due"),
    [(0, False), (200, False), (243, False), (244, True), (340, True), (400, True)],
)
def test_renewal_starts_when_a_third_of_the_lifetime_is_left(
    ca: KeyPair, age_days: int, due: bool
) -> None:
    serving = build_serving_cert(ca, ["x"], T0, datetime.timedelta(days=365))
    # lifetime 365 days + 5 minutes of skew: a third is ~121.7 days, so due from day ~243.3
    assert renewal_due(cert(serving), T0 + age_days * DAY, 30 * DAY) is due


def test_renew_before_wins_when_longer_than_a_third(ca: KeyPair) -> None:
    serving = build_serving_cert(ca, ["x"], T0, datetime.timedelta(days=30))
    assert not renewal_due(cert(serving), T0 + 5 * DAY, 7 * DAY)
    assert renewal_due(cert(serving), T0 + 5 * DAY, 26 * DAY)


def test_bundle_keeps_the_new_ca_first_and_the_old_one_until_it_expires() -> None:
    old = build_ca(T0, datetime.timedelta(days=100))
    new = build_ca(T0 + 80 * DAY)
    bundle = compose_bundle(new.cert_pem, old.cert_pem, T0 + 80 * DAY)
    assert [c.subject for c in load_certificates(bundle)] == [cert(new).subject, cert(old).subject]
    later = compose_bundle(new.cert_pem, bundle, T0 + 101 * DAY)
    assert [c.subject for c in load_certificates(later)] == [cert(new).subject]


def test_bundle_lists_each_ca_once_and_ignores_an_unreadable_previous_bundle(ca: KeyPair) -> None:
    twice = compose_bundle(ca.cert_pem, ca.cert_pem + ca.cert_pem, T0)
    assert len(load_certificates(twice)) == 1
    assert load_certificates(compose_bundle(ca.cert_pem, b"garbage", T0)) == [cert(ca)]


def test_first_plan_creates_everything_consistent() -> None:
    plan = plan_certificates(TlsState(), SETTINGS, T0)
    assert plan.ca_reason == "no CA yet"
    assert plan.serving_reason == "no serving certificate yet"
    assert plan.bundle_reason == "no trust bundle yet"
    assert verifies(plan.serving, plan.trust_bundle)
    assert load_certificates(plan.trust_bundle) == [cert(plan.ca)]


def test_valid_state_is_left_alone() -> None:
    first = plan_certificates(TlsState(), SETTINGS, T0)
    state = TlsState(first.ca, first.trust_bundle, first.serving)
    again = plan_certificates(state, SETTINGS, T0 + 100 * DAY)
    assert not again.changed
    assert (again.ca, again.serving, again.trust_bundle) == (
        first.ca,
        first.serving,
        first.trust_bundle,
    )


def test_serving_cert_due_is_reissued_by_the_same_ca() -> None:
    first = plan_certificates(TlsState(), SETTINGS, T0)
    state = TlsState(first.ca, first.trust_bundle, first.serving)
    later = plan_certificates(state, SETTINGS, T0 + 300 * DAY)
    assert later.ca_reason is None and later.bundle_reason is None
    assert later.serving_reason is not None and "expires" in later.serving_reason
    assert later.ca == first.ca
    assert later.serving != first.serving
    assert verifies(later.serving, first.trust_bundle)


def test_ca_rotation_keeps_the_old_ca_trusted_so_the_running_cert_still_verifies() -> None:
    first = plan_certificates(TlsState(), SETTINGS, T0)
    # a serving certificate issued shortly before the CA rotation, still in use by the pods
    running = build_serving_cert(first.ca, SETTINGS.dns_names, T0 + 3 * 365 * DAY)
    state = TlsState(first.ca, first.trust_bundle, running)
    rotated = plan_certificates(state, SETTINGS, T0 + 3 * 365 * DAY + 130 * DAY)
    assert rotated.ca_reason is not None and "CA expires" in rotated.ca_reason
    assert rotated.serving_reason == "the CA was replaced"
    assert rotated.bundle_reason == "new CA added; the previous one stays until it expires"
    assert verifies(rotated.serving, rotated.trust_bundle)
    assert verifies(running, rotated.trust_bundle)  # what the pods serve until the swap
    cas = load_certificates(rotated.trust_bundle)
    assert cas == [cert(rotated.ca), cert(first.ca)]


def test_names_changed_means_a_new_serving_cert() -> None:
    first = plan_certificates(TlsState(), SETTINGS, T0)
    state = TlsState(first.ca, first.trust_bundle, first.serving)
    local = CertSettings(ip_addresses=("127.0.0.1",))
    plan = plan_certificates(state, local, T0)
    assert plan.serving_reason is not None and "names" in plan.serving_reason
    assert subject_alternative_names(cert(plan.serving))[1] == {"127.0.0.1"}
    assert plan.ca == first.ca


def test_serving_cert_of_another_ca_or_with_a_foreign_key_is_replaced() -> None:
    first = plan_certificates(TlsState(), SETTINGS, T0)
    stranger = build_serving_cert(build_ca(T0), SETTINGS.dns_names, T0)
    plan = plan_certificates(TlsState(first.ca, first.trust_bundle, stranger), SETTINGS, T0)
    assert plan.serving_reason == "the serving certificate is not signed by the current CA"
    swapped = KeyPair(first.serving.cert_pem, stranger.key_pem)
    plan = plan_certificates(TlsState(first.ca, first.trust_bundle, swapped), SETTINGS, T0)
    assert plan.serving_reason == "the serving certificate does not match its key"


def test_unreadable_ca_is_replaced_not_fatal() -> None:
    plan = plan_certificates(TlsState(KeyPair(b"junk", b"junk")), SETTINGS, T0)
    assert plan.ca_reason is not None and plan.ca_reason.startswith("the CA is unreadable")
    assert verifies(plan.serving, plan.trust_bundle)


def test_expired_previous_ca_drops_out_of_the_bundle() -> None:
    first = plan_certificates(TlsState(), SETTINGS, T0)
    second = build_ca(T0 + 1000 * DAY)
    bundle = second.cert_pem + first.ca.cert_pem
    serving = build_serving_cert(second, SETTINGS.dns_names, T0 + 2000 * DAY)
    plan = plan_certificates(TlsState(second, bundle, serving), SETTINGS, T0 + 2000 * DAY)
    assert plan.ca_reason is None and plan.serving_reason is None
    assert plan.bundle_reason == "the trust bundle lacks the current CA or holds expired ones"
    assert load_certificates(plan.trust_bundle) == [cert(second)]
