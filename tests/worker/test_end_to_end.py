"""send_mail() to a real SMTP server through DNS on loopback, on the memory, SQLite and PostgreSQL stores."""

from __future__ import annotations

import email
import email.policy
from io import StringIO
from typing import Any

import pytest
from django.core.mail import send_mail
from django.core.management import call_command
from django.test import override_settings

from django_mailqueue.core.clock import SystemClock
from django_mailqueue.core.items import NewItem
from django_mailqueue.stores import get_store
from django_mailqueue.testing.damage import lose_message
from tests.support.databases import DATABASES
from tests.worker.conftest import MailWorld, SignalRecorder, only_kept_failed

pytestmark = pytest.mark.django_db(transaction=True, databases=DATABASES)


def work_once() -> str:
    out = StringIO()
    call_command("mailqueue_work", "--once", stdout=out, stderr=StringIO())
    return out.getvalue()


def test_send_mail_then_work_once_delivers(
    mail_world: MailWorld, store_config: dict[str, Any], received: SignalRecorder
) -> None:
    with override_settings(MAILQUEUE=mail_world.mailqueue(store_config)):
        send_mail("Hello", "Body.\n", "sender@origin.test", ["someone@dest.test"])
        (item,) = get_store().list()
        summary = work_once()
        assert get_store().get(item.id) is None
        assert get_store().count() == 0
    assert "1 delivered" in summary
    (message,) = mail_world.mx.messages
    assert message.mail_from == "sender@origin.test" and message.rcpt_tos == ["someone@dest.test"]
    assert b"Subject: Hello" in message.data
    assert received.names() == ["delivered"]
    delivered = received.of("delivered")[0]
    assert delivered["item_id"] == item.id and delivered["recipient"] == "someone@dest.test"
    assert delivered["reply"].code == 250 and "queued" in delivered["reply"].text
    assert delivered["attempt"] == 1


def test_a_550_sends_a_failure_dsn_to_the_senders_mx(
    mail_world: MailWorld, store_config: dict[str, Any], received: SignalRecorder
) -> None:
    with override_settings(MAILQUEUE=mail_world.mailqueue(store_config)):
        send_mail("Doomed", "Body.\n", "sender@origin.test", ["rejected@dest.test", "someone@dest.test"])
        work_once()
        assert only_kept_failed(get_store())
    original, report = mail_world.mx.messages
    assert original.rcpt_tos == ["someone@dest.test"]
    assert report.mail_from in ("", "<>") and report.rcpt_tos == ["sender@origin.test"]
    dsn = email.message_from_bytes(report.data, policy=email.policy.compat32)
    assert dsn.get_content_type() == "multipart/report"
    assert dsn.get_param("report-type") == "delivery-status"
    assert dsn["Auto-Submitted"] == "auto-replied"
    human, status, headers = dsn.get_payload()
    assert status.get_content_type() == "message/delivery-status"
    blocks = status.get_payload()
    per_message, per_recipient = blocks[0], blocks[1]
    assert per_message["Reporting-MTA"] == "dns; mq.test.example"
    assert per_message["Arrival-Date"]
    assert per_recipient["Final-Recipient"] == "rfc822; rejected@dest.test"
    assert per_recipient["Action"] == "failed"
    assert per_recipient["Status"] == "5.1.1"
    assert per_recipient["Remote-MTA"].startswith("dns; ")
    assert per_recipient["Diagnostic-Code"] == "smtp; 550 5.1.1 No such user here"
    assert per_recipient["Last-Attempt-Date"]
    assert headers.get_content_type() == "text/rfc822-headers"
    assert "Subject: Doomed" in headers.get_payload()
    assert received.names() == ["failed", "delivered", "dsn", "delivered"] or received.names() == [
        "delivered",
        "failed",
        "dsn",
        "delivered",
    ]


def test_no_dsn_for_a_message_from_the_null_sender(
    mail_world: MailWorld, store_config: dict[str, Any], received: SignalRecorder
) -> None:
    with override_settings(MAILQUEUE=mail_world.mailqueue(store_config)):
        get_store().add(
            NewItem(
                sender="", recipients=("rejected@dest.test",), message=b"From: <>\r\nSubject: bounce\r\n\r\nbody\r\n"
            ),
            now=SystemClock().now(),
        )
        (item,) = get_store().list()
        assert item.sender == ""
        work_once()
        assert only_kept_failed(get_store())
    assert mail_world.mx.messages == []
    assert received.names() == ["failed"]


def test_a_lost_message_runs_the_5_3_0_flow(
    mail_world: MailWorld, store_config: dict[str, Any], received: SignalRecorder
) -> None:
    with override_settings(MAILQUEUE=mail_world.mailqueue(store_config)):
        send_mail("Lost", "Body.\n", "sender@origin.test", ["someone@dest.test", "other@dest.test"])
        (item,) = get_store().list()
        lose_message(get_store(), item.id)
        work_once()
        kept = get_store().get(item.id)  # kept failed, without the message it lost: it cannot be sent again
        assert kept is not None and kept.kept and get_store().read_message(item.id) is None
        assert only_kept_failed(get_store())
    assert received.names() == ["error", "failed", "failed", "dsn", "delivered"]
    assert received.of("error")[0]["error"].code == "MESSAGE_UNREADABLE"
    assert all(f["reply"].status == "5.3.0" and f["reply"].code is None for f in received.of("failed"))
    (report,) = mail_world.mx.messages
    assert report.rcpt_tos == ["sender@origin.test"]
    parts = email.message_from_bytes(report.data).get_payload()
    assert [p.get_content_type() for p in parts] == ["text/plain", "message/delivery-status"]
