"""Addresses from Django's mail API on the wire: UTF-8 local parts with SMTPUTF8, addresses without a domain."""

from __future__ import annotations

import pickle
import re
from io import StringIO
from typing import Any

import pytest
from django.core.mail import EmailMessage, send_mail
from django.core.mail.backends.smtp import EmailBackend as SmtpBackend
from django.core.management import call_command
from django.test import override_settings
from django.utils.translation import gettext_lazy

from django_mailqueue.exceptions import QueueError, QueueInputError
from django_mailqueue.stores import get_store
from tests.support.databases import DATABASES
from tests.support.django_mail import smtp_backend_bytes
from tests.support.smtp_server import ServerPool
from tests.worker.conftest import MailWorld, SignalRecorder

pytestmark = pytest.mark.django_db(transaction=True, databases=DATABASES)


def work_once() -> str:
    out = StringIO()
    call_command("mailqueue_work", "--once", stdout=out, stderr=StringIO())
    return out.getvalue()


def without_fresh_headers(data: bytes) -> bytes:
    """`data` without Date and Message-ID, which Django makes afresh for each message() call."""
    return re.sub(rb"(?m)^(Date|Message-ID): .*\r\n", b"", data)


def test_utf8_addresses_from_send_mail_go_out_in_utf8_with_smtputf8(
    mail_world: MailWorld, store_config: dict[str, Any], received: SignalRecorder
) -> None:
    mail_world.dns.mx("example.test", (10, "mx.dest.test"))
    mail_world.dns.mx("xn--bcher-kva.test", (10, "mx.dest.test"))
    fields = ("Grüße", "Body.\n", "Jösé Sender <jösé@origin.test>", ["jösé@example.test", "Zoë <zoë@bücher.test>"])
    as_django_writes_it = without_fresh_headers(smtp_backend_bytes(EmailMessage(*fields)))
    with override_settings(MAILQUEUE=mail_world.mailqueue(store_config)):
        send_mail(*fields)
        (item,) = get_store().list()
        assert item.sender == "jösé@origin.test"
        assert [r.address for r in item.recipients] == ["jösé@example.test", "zoë@xn--bcher-kva.test"]
        work_once()
    messages = sorted(mail_world.mx.messages, key=lambda m: m.rcpt_tos)  # two domains: two sessions
    assert [m.rcpt_tos for m in messages] == [["jösé@example.test"], ["zoë@xn--bcher-kva.test"]]
    for message in messages:
        assert message.mail_from == "jösé@origin.test"
        assert "SMTPUTF8" in message.mail_options and message.smtp_utf8
        # the headers stay as Django writes them (an encoded word for a non-ASCII local part)
        assert without_fresh_headers(message.data) == as_django_writes_it
    assert received.names() == ["delivered", "delivered"]


def test_utf8_address_to_a_server_without_smtputf8_fails_5_6_7(
    mail_world: MailWorld, smtp_servers: ServerPool, received: SignalRecorder
) -> None:
    plain = smtp_servers.smtp("127.0.0.3", smtputf8=False)
    mail_world.dns.mx("example.test", (10, "mx.example.test"))
    mail_world.dns.a("mx.example.test", "127.0.0.3")
    with override_settings(MAILQUEUE=mail_world.mailqueue({"BACKEND": "django_mailqueue.stores.memory.MemoryStore"})):
        send_mail("s", "Body.\n", "sender@origin.test", ["jösé@example.test"])
        work_once()
    assert plain.messages == [] and "MAIL" not in plain.commands
    (failed,) = received.of("failed")
    assert (failed["recipient"], failed["reply"].status) == ("jösé@example.test", "5.6.7")
    (dsn,) = mail_world.mx.messages  # the failure DSN, to the sender's MX
    assert dsn.rcpt_tos == ["sender@origin.test"] and b"Status: 5.6.7" in dsn.data


def _relay_world(mail_world: MailWorld, **extra: Any) -> dict[str, Any]:
    relay = {"HOST": "127.0.0.2", "PORT": mail_world.port, "TLS": "none"}
    return mail_world.mailqueue({"BACKEND": "django_mailqueue.stores.orm.OrmStore"}, ROUTES={"*": relay}, **extra)


def test_addresses_without_a_domain_go_to_the_relay_as_djangos_smtp_backend_sends_them(
    mail_world: MailWorld, received: SignalRecorder
) -> None:
    """Django tickets #15042 and #24416: a bare local part, as a plain or a lazy string."""
    messages = [
        EmailMessage("Subject", "Content", "tester", ["django"]),
        EmailMessage(gettext_lazy("Subject"), "Content", gettext_lazy("tester"), [gettext_lazy("django")]),
    ]
    smtp = SmtpBackend(host="127.0.0.2", port=mail_world.port, use_tls=False, timeout=10)
    assert smtp.send_messages(messages) == 2
    by_django = [(m.mail_from, m.rcpt_tos) for m in mail_world.mx.messages]
    assert by_django == [("tester", ["django"])] * 2
    mail_world.mx.recorder.reset()

    with override_settings(MAILQUEUE=_relay_world(mail_world)):
        assert send_mail("Subject", "Content", "tester", ["django"]) == 1
        assert send_mail(gettext_lazy("Subject"), "Content", gettext_lazy("tester"), [gettext_lazy("django")]) == 1
        assert "2 delivered" in work_once()
    assert [(m.mail_from, m.rcpt_tos) for m in mail_world.mx.messages] == by_django


@pytest.mark.parametrize(
    ("sender", "to", "at_fault"),
    [
        ("sender@origin.test", ["django"], "recipient 'django'"),
        ("tester", ["someone@dest.test"], "the sender 'tester'"),
        ("sender@origin.test", [gettext_lazy("django")], "recipient 'django'"),
    ],
)
def test_on_an_mx_route_an_address_without_a_domain_is_refused_at_enqueue(
    mail_world: MailWorld, sender: str, to: list[str], at_fault: str
) -> None:
    with override_settings(MAILQUEUE=mail_world.mailqueue({"BACKEND": "django_mailqueue.stores.orm.OrmStore"})):
        with pytest.raises(QueueError) as refused:
            send_mail("Subject", "Content", sender, to)
        assert refused.value.code == "INVALID" and at_fault in refused.value.message
        assert isinstance(refused.value, ValueError)
        assert get_store().count() == 0


def test_a_sender_without_a_domain_is_refused_when_any_recipient_goes_to_mx(mail_world: MailWorld) -> None:
    relay = {"HOST": "127.0.0.2", "PORT": mail_world.port, "TLS": "none"}
    config = mail_world.mailqueue(
        {"BACKEND": "django_mailqueue.stores.orm.OrmStore"}, ROUTES={"*": relay, "dest.test": "mx"}
    )
    with override_settings(MAILQUEUE=config):
        assert send_mail("s", "b", "tester", ["someone@elsewhere.test", "django"]) == 1
        with pytest.raises(QueueError, match="goes to MX hosts"):
            send_mail("s", "b", "tester", ["someone@elsewhere.test", "someone@dest.test"])
        assert get_store().count() == 1


def test_an_address_without_a_domain_held_for_an_mx_route_fails_5_1_3_unsent(
    mail_world: MailWorld, received: SignalRecorder
) -> None:
    """One the store holds anyway (added through the store API, or ROUTES changed since): never sent."""
    from django_mailqueue.core.clock import SystemClock
    from django_mailqueue.core.items import NewItem

    with override_settings(MAILQUEUE=mail_world.mailqueue({"BACKEND": "django_mailqueue.stores.orm.OrmStore"})):
        get_store().add(
            NewItem(
                sender="sender@origin.test",
                recipients=("django", "someone@dest.test"),
                message=b"Subject: s\r\n\r\nb\r\n",
            ),
            now=SystemClock().now(),
        )
        get_store().add(
            NewItem(sender="tester", recipients=("someone@dest.test",), message=b"Subject: s\r\n\r\nb\r\n"),
            now=SystemClock().now(),
        )
        work_once()
    statuses = {(f["recipient"], f["reply"].status) for f in received.of("failed")}
    # the failure DSN to "tester" is refused alike
    assert statuses == {("django", "5.1.3"), ("someone@dest.test", "5.1.7"), ("tester", "5.1.3")}
    assert sorted(m.rcpt_tos for m in mail_world.mx.messages) == [["sender@origin.test"], ["someone@dest.test"]]


def test_a_queue_error_about_the_input_is_a_value_error_and_pickles_as_one() -> None:
    with pytest.raises(ValueError) as refused:  # what Django's SMTP backend raises for a bad address
        send_mail("s", "b", "from@example.com", ["not an address"])
    error = refused.value
    assert isinstance(error, QueueInputError) and isinstance(error, QueueError) and error.code == "INVALID"
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is QueueInputError and copy.code == "INVALID" and str(copy) == str(error)
    assert isinstance(QueueError("TOO_LARGE", "big"), ValueError)
    for code in ("FULL", "STORE_UNAVAILABLE", "LEASE_LOST", "INVALID_OPTION"):
        assert not isinstance(QueueError(code, "x"), ValueError)
        assert type(pickle.loads(pickle.dumps(QueueError(code, "x")))) is QueueError
