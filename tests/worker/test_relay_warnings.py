"""Relay problems reach the operator: a WARNING for every `error` signal a delivery reports (AUTH refused,
TLS failures, a relay host that does not exist) — one per destination and minute, not one per message."""

from __future__ import annotations

import logging
from io import StringIO
from typing import Any

import pytest
from django.core.mail import send_mail
from django.core.management import call_command
from django.test import override_settings

from django_mailqueue.worker.log_limit import LogLimit
from tests.support.databases import DATABASES
from tests.support.smtp_server import ServerPool
from tests.worker.conftest import STORES, MailWorld, SignalRecorder

pytestmark = pytest.mark.django_db(transaction=True, databases=DATABASES)


def test_the_limit_admits_the_first_then_one_a_minute_and_counts_the_rest() -> None:
    limit = LogLimit(60.0)
    assert limit.admit("relay.example", now=1000.0) == 0
    assert [limit.admit("relay.example", now=1000.0 + n) for n in range(1, 4)] == [None, None, None]
    assert limit.admit("other.example", now=1010.0) == 0  # another destination: its own minute
    assert limit.admit("relay.example", now=1059.9) is None
    assert limit.admit("relay.example", now=1060.0) == 4  # a minute on: logged, with the four held back
    assert limit.admit("relay.example", now=1061.0) is None


def test_the_limit_remembers_a_bounded_number_of_keys() -> None:
    limit = LogLimit(60.0, max_keys=4)
    for n in range(4):
        assert limit.admit(n, now=0.0) == 0
    assert limit.admit(4, now=70.0) == 0  # full: the keys whose minute has passed are forgotten
    assert limit.admit(0, now=71.0) == 0
    for n in range(5, 12):
        limit.admit(n, now=72.0)
    assert len(limit._keys) <= 4


def _relay_problem_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("django_mailqueue")]


def _work(mailqueue: dict[str, Any], messages: int, caplog: pytest.LogCaptureFixture) -> str:
    with override_settings(MAILQUEUE=mailqueue), caplog.at_level(logging.INFO, logger="django_mailqueue"):
        for n in range(messages):
            send_mail(f"Hello {n}", "Body.\n", "sender@origin.test", [f"r{n}@dest.test"])
        out = StringIO()
        call_command("mailqueue_work", "--once", stdout=out, stderr=StringIO())
    return out.getvalue()


def _relay(world: MailWorld, **route: Any) -> dict[str, Any]:
    return world.mailqueue(STORES["memory"], ROUTES={"*": {"HOST": "127.0.0.3", "PORT": world.port, **route}})


def test_credentials_the_relay_refuses_are_one_warning_for_three_messages(
    mail_world: MailWorld, smtp_servers: ServerPool, received: SignalRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    relay = smtp_servers.smtp("127.0.0.3", auth=("relayuser", "right"), auth_require_tls=False)
    mailqueue = _relay(mail_world, USERNAME="relayuser", PASSWORD="wrong-secret", TLS="none")

    summary = _work(mailqueue, 3, caplog)

    assert "3 deferred" in summary and relay.messages == []
    assert [e["error"].code for e in received.of("error")] == ["INVALID_OPTION"] * 3  # a signal a message
    (warning,) = _relay_problem_warnings(caplog)  # one line for the operator
    assert "refused the credentials" in warning.getMessage() and "127.0.0.3" in warning.getMessage()
    assert "wrong-secret" not in caplog.text


def test_a_relay_without_the_required_starttls_is_one_warning_for_three_messages(
    mail_world: MailWorld, smtp_servers: ServerPool, received: SignalRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    smtp_servers.smtp("127.0.0.3")  # no STARTTLS offered
    _work(_relay(mail_world, TLS="starttls"), 3, caplog)

    assert len(received.of("error")) == 3
    (warning,) = _relay_problem_warnings(caplog)
    assert "does not offer STARTTLS" in warning.getMessage()


def test_a_relay_host_that_does_not_exist_is_a_warning(
    mail_world: MailWorld, received: SignalRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    mailqueue = mail_world.mailqueue(STORES["memory"], ROUTES={"*": {"HOST": "no-such-relay.invalid", "TLS": "none"}})
    _work(mailqueue, 2, caplog)

    if not received.of("error"):  # this machine's resolver cannot answer at all: 4.4.3, not a route problem
        pytest.skip("the system resolver gave a temporary failure for a .invalid name, not 'not found'")
    assert len(received.of("error")) == 2
    (warning,) = _relay_problem_warnings(caplog)
    assert "no-such-relay.invalid" in warning.getMessage() and "not found" in warning.getMessage()
