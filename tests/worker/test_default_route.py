"""Without MAILQUEUE["ROUTES"], mail goes where Django's SMTP backend would send it: the EMAIL_* relay."""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.mail import EmailMessage, send_mail
from django.core.mail.backends.smtp import EmailBackend as SmtpBackend
from django.core.management import call_command
from django.test import override_settings

from django_mailqueue.conf import get_settings
from django_mailqueue.core.clock import SystemClock
from django_mailqueue.stores import get_store
from tests.support.certs import CertificateAuthority
from tests.support.databases import DATABASES
from tests.support.smtp_server import SILENT, ServerPool
from tests.worker.conftest import MailWorld, SignalRecorder

pytestmark = pytest.mark.django_db(transaction=True, databases=DATABASES)

PASSWORD = "hunter2-provider-secret"  # noqa: S105


def work_once() -> str:
    out = StringIO()
    call_command("mailqueue_work", "--once", stdout=out, stderr=StringIO())
    return out.getvalue()


def without_routes(mail_world: MailWorld, **extra: Any) -> dict[str, Any]:
    """The world's MAILQUEUE (its DNS knows no recipient domain of these tests), ROUTES left out."""
    config = mail_world.mailqueue({"BACKEND": "django_mailqueue.stores.orm.OrmStore"}, **extra)
    del config["ROUTES"]
    return config


@pytest.fixture
def trust_test_ca(monkeypatch: pytest.MonkeyPatch, test_ca: CertificateAuthority) -> None:
    """The "system trust store" is the test CA (OpenSSL reads SSL_CERT_FILE)."""
    monkeypatch.setenv("SSL_CERT_FILE", str(test_ca.ca_file))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)


@pytest.mark.usefixtures("trust_test_ca")
def test_without_routes_mail_goes_through_the_relay_of_djangos_email_settings(
    mail_world: MailWorld, smtp_servers: ServerPool, received: SignalRecorder
) -> None:
    provider = smtp_servers.smtp("127.0.0.3", starttls=True, auth=("mailer", PASSWORD))
    email = {
        "EMAIL_HOST": "127.0.0.3",
        "EMAIL_PORT": provider.port,
        "EMAIL_USE_TLS": True,
        "EMAIL_HOST_USER": "mailer",
        "EMAIL_HOST_PASSWORD": PASSWORD,
    }
    message = EmailMessage("Hello", "Body.\n", "sender@customer.test", ["someone@elsewhere.test"])
    with override_settings(**email):
        assert SmtpBackend().send_messages([message]) == 1  # where Django's own backend sends it
        with override_settings(MAILQUEUE=without_routes(mail_world)):
            assert get_settings().route_for("elsewhere.test").kind == "relay"
            send_mail("Hello", "Body.\n", "sender@customer.test", ["someone@elsewhere.test"])
            assert "1 delivered" in work_once()
    by_django, by_queue = provider.messages
    for received_message in (by_django, by_queue):
        assert (received_message.mail_from, received_message.rcpt_tos) == (
            "sender@customer.test",
            ["someone@elsewhere.test"],
        )
        assert received_message.tls and received_message.login == "mailer"
    assert mail_world.mx.messages == []  # no MX host was asked
    assert received.names() == ["delivered"]


@dataclass(frozen=True)
class _ClientCertificateCA(CertificateAuthority):
    """The test CA, whose servers require a client certificate it signed."""

    def server_context(self) -> ssl.SSLContext:
        context = super().server_context()
        context.verify_mode = ssl.CERT_REQUIRED
        self.ca.configure_trust(context)
        return context


@pytest.mark.usefixtures("trust_test_ca")
def test_email_use_ssl_is_implicit_tls_presenting_the_email_ssl_client_certificate(
    mail_world: MailWorld,
    smtp_servers: ServerPool,
    test_ca: CertificateAuthority,
    tmp_path: Path,
    received: SignalRecorder,
) -> None:
    ca = _ClientCertificateCA(ca=test_ca.ca, server=test_ca.server, ca_file=test_ca.ca_file)
    provider = smtp_servers.smtp("127.0.0.3", implicit_tls=True, ca=ca)
    client = test_ca.ca.issue_cert("client.test.example")
    certfile, keyfile = tmp_path / "client.pem", tmp_path / "client.key"
    client.cert_chain_pems[0].write_to_path(str(certfile))
    client.private_key_pem.write_to_path(str(keyfile))
    email = {"EMAIL_HOST": "127.0.0.3", "EMAIL_PORT": provider.port, "EMAIL_USE_SSL": True}
    config = without_routes(mail_world)
    with override_settings(MAILQUEUE=config, **email):
        send_mail("Without", "Body.\n", "sender@customer.test", ["someone@elsewhere.test"])
        assert "1 deferred" in work_once()  # the relay wants a client certificate
        with override_settings(EMAIL_SSL_CERTFILE=str(certfile), EMAIL_SSL_KEYFILE=str(keyfile)):
            (item,) = get_store().list()
            get_store().reschedule(item.id, at=SystemClock().now())
            assert "1 delivered" in work_once()
    (message,) = provider.messages
    assert message.tls and message.rcpt_tos == ["someone@elsewhere.test"]
    assert received.names() == ["deferred", "delivered"]


def test_email_timeout_bounds_each_step_of_a_session_with_the_relay(
    mail_world: MailWorld, smtp_servers: ServerPool, received: SignalRecorder
) -> None:
    silent = smtp_servers.scripted("127.0.0.3", greeting=SILENT)
    config = without_routes(mail_world)
    config["TIMEOUTS"] = {**config["TIMEOUTS"], "GREETING": 300, "SESSION": 30}
    with override_settings(MAILQUEUE=config, EMAIL_HOST="127.0.0.3", EMAIL_PORT=silent.port, EMAIL_TIMEOUT=0.5):
        send_mail("s", "b", "sender@customer.test", ["someone@elsewhere.test"])
        work_once()
    (deferred,) = received.of("deferred")
    # not "attempt deadline of 30 s passed": the greeting was waited for EMAIL_TIMEOUT, not GREETING's 300 s
    assert deferred["reply"].status == "4.4.1" and "no greeting" in deferred["reply"].text
    assert "within 0.5 s" in deferred["reply"].text


def test_the_relay_password_of_django_settings_is_never_shown(
    mail_world: MailWorld, smtp_servers: ServerPool, received: SignalRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    refusing = smtp_servers.smtp("127.0.0.3", auth=("mailer", "another-password"), auth_require_tls=False)
    email = {
        "EMAIL_HOST": "127.0.0.3",
        "EMAIL_PORT": refusing.port,
        "EMAIL_HOST_USER": "mailer",
        "EMAIL_HOST_PASSWORD": PASSWORD,
    }
    with override_settings(MAILQUEUE=without_routes(mail_world), **email), caplog.at_level(logging.DEBUG):
        assert PASSWORD not in repr(get_settings())
        out = StringIO()
        call_command("check", stdout=out, stderr=out)
        assert "127.0.0.3" in out.getvalue() and PASSWORD not in out.getvalue()
        send_mail("s", "b", "sender@customer.test", ["someone@elsewhere.test"])
        work_once()
    (error,) = received.of("error")
    (deferred,) = received.of("deferred")
    assert "refused the credentials" in error["error"].message
    shown = [str(error["error"]), repr(error["error"]), deferred["reply"].text, caplog.text]
    assert all(PASSWORD not in text for text in shown)
