"""The worker delivering to a real, strictly configured Postfix as the recipients' MX (issue 18).

Each test sends through the queue (`send_mail()` or the store), runs
`mailqueue_work --once` in this process on SQLite, and reads what Postfix
delivered to its mailboxes and wrote to its log.
"""

from __future__ import annotations

import email
import email.policy
import random
import re
import signal
import time
from pathlib import Path
from unittest import mock

import django
import pytest
from django.core.checks import run_checks
from django.core.mail import EmailMessage, EmailMultiAlternatives, get_connection, send_mail
from django.core.mail.backends.smtp import EmailBackend as DjangoSmtpBackend
from django.core.mail.utils import DNS_NAME
from django.test import override_settings

from django_mailqueue.core.clock import SystemClock
from django_mailqueue.core.items import NewItem
from django_mailqueue.delivery.smtp import CACHE_TIME
from django_mailqueue.stores import get_store
from tests.interop.conftest import IDN_DOMAIN, SENDER, WORKER_HOSTNAME, Interop, SignalRecorder, work_once
from tests.interop.postfix import disconnect_counts, strip_added_headers
from tests.support.workers import WorkerProcess, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def parse(data: bytes) -> email.message.EmailMessage:
    return email.message_from_bytes(data, policy=email.policy.default)  # type: ignore[return-value]


def header_block(data: bytes) -> bytes:
    return data.split(b"\n\n", 1)[0]


def assert_every_session_quit(interop: Interop) -> list[dict[str, str]]:
    sessions = interop.sessions()
    log = interop.log()
    abnormal = [line for line in log if "lost connection after" in line or "timeout after" in line]
    assert abnormal == [], "sessions that did not end with QUIT:\n" + "\n".join(abnormal)
    counts = [disconnect_counts(line) for line in sessions]
    no_quit = [line for line, count in zip(sessions, counts, strict=True) if count.get("quit") != "1"]
    assert no_quit == [], "sessions that did not end with QUIT:\n" + "\n".join(no_quit)
    return counts


def rich_message() -> EmailMultiAlternatives:
    """A message with what tends to differ between senders: 8-bit text, long lines, dots, CR/LF in content."""
    message = EmailMultiAlternatives(
        subject="Grüße aus dem Interop-Test — " + "a long subject that Django folds " * 4,
        body=(
            "Hello.\n.\n..two dots\n.leading dot\nFrom the start of a line\n"
            + "é" * 900
            + "\n"
            + "x" * 1200
            + "\nline with bare CR\rand \r\n.\r\n smuggling-like sequences \n.\n end\n"
        ),
        from_email='"Sénder Ünicode" <sender@origin.test>',
        to=["bytes@example.test"],
        cc=['"Jösé" <bytes@example.test>'],
        headers={"Message-ID": "<interop-bytes@mq.test.example>", "Date": "Tue, 01 Dec 2026 12:00:00 +0000"},
    )
    message.attach_alternative("<p>Hello <b>wörld</b></p>\n" * 60, "text/html")
    message.attach("data.bin", bytes(range(256)) * 40, "application/octet-stream")
    message.attach("notes.txt", "line\r\n.\r\nline\n.\nline\r.\rlast\n", "text/plain")
    return message


def test_delivered_bytes_equal_djangos_smtp_backend(interop: Interop) -> None:
    mx = interop.server
    # The same message (its MIME boundaries drawn from the same seed) through Django's SMTP backend,
    # then through the queue; Postfix's maildir copies must agree once its own added headers are gone.
    django_backend = DjangoSmtpBackend(host=mx.host, port=mx.port, timeout=10)
    with mock.patch.object(DNS_NAME, "_fqdn", "django.test.example", create=True):
        random.seed(18)
        assert django_backend.send_messages([rich_message()]) == 1
    mx.wait_for_mail({"bytes@example.test": 1})
    (by_django,) = mx.mailbox("bytes@example.test")
    mx.clear_mailboxes()

    random.seed(18)
    assert rich_message().send() == 1
    work_once()
    mx.wait_for_mail({"bytes@example.test": 1})
    (by_queue,) = mx.mailbox("bytes@example.test")

    assert b"\nReceived: from " + WORKER_HOSTNAME.encode() in b"\n" + header_block(by_queue)
    assert strip_added_headers(by_queue) == strip_added_headers(by_django)
    # Postfix added nothing else: what is left starts with Django's first header (6.0 writes MIME-Version first)
    first = b"Content-Type: multipart/mixed;"
    if django.VERSION[:2] >= (6, 0):
        first = b"MIME-Version: 1.0\n" + first
    assert strip_added_headers(by_queue).startswith(first)
    assert get_store().count() == 0


def test_a_utf8_recipient_added_through_the_store_goes_out_with_smtputf8(
    interop: Interop, received: SignalRecorder
) -> None:
    mx = interop.server
    message = (
        "From: sender@origin.test\r\nTo: Jösé <jösé@example.test>\r\nSubject: SMTPUTF8\r\n"
        "Message-ID: <utf8-store@mq.test.example>\r\nDate: Tue, 01 Dec 2026 12:00:00 +0000\r\nMIME-Version: 1.0\r\n"
        "Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\nHallo Jösé.\r\n"
    ).encode()
    get_store().add(NewItem(sender=SENDER, recipients=("jösé@example.test",), message=message), now=SystemClock().now())
    work_once()
    mx.wait_for_mail({"jösé@example.test": 1})
    (delivered,) = mx.mailbox("jösé@example.test")
    assert b" with UTF8SMTPS id " in header_block(delivered)  # SMTPUTF8 over TLS
    assert b"Delivered-To: j\xc3\xb6s\xc3\xa9@example.test" in header_block(delivered)
    assert strip_added_headers(delivered) == message.replace(b"\r\n", b"\n")
    assert received.names() == ["delivered"]


def test_utf8_and_idn_recipients_from_send_mail_arrive(interop: Interop, received: SignalRecorder) -> None:
    # Issue 18, point 1: the envelope carries the UTF-8 addr-spec (A-label domain), not the header's encoded word.
    mx = interop.server
    sent = send_mail("IDN", "Hallo.\n", SENDER, ["jösé@example.test", "user@bücher.test"])
    assert sent == 1
    work_once()
    assert [(event["recipient"], event["reply"]) for event in received.of("failed")] == []
    mx.wait_for_mail({"jösé@example.test": 1, f"user@{IDN_DOMAIN}": 1})
    (to_jose,) = mx.mailbox("jösé@example.test")
    assert b" with UTF8SMTPS id " in header_block(to_jose)
    (to_idn,) = mx.mailbox(f"user@{IDN_DOMAIN}")
    assert f"Delivered-To: user@{IDN_DOMAIN}".encode() in header_block(to_idn)
    assert len(received.of("delivered")) == 2


# Postfix's reject_non_fqdn_helo_hostname refuses a name with no dot; the check may warn about more.
EHLO_NAMES = ["localhost", "mailhost", "localhost.localdomain", "mq.test.example", "[127.0.0.1]"]


@pytest.mark.parametrize("name", EHLO_NAMES)
def test_the_check_warns_about_every_ehlo_name_postfix_refuses(
    interop: Interop, received: SignalRecorder, name: str
) -> None:
    with override_settings(MAILQUEUE=interop.mailqueue(HOSTNAME=name, DSN=False)):
        warned = "mailqueue.W003" in {message.id for message in run_checks()}
        assert send_mail("EHLO", "Body.\n", SENDER, ["user@example.test"]) == 1
        work_once()
    refused = [event["reply"] for event in received.of("failed")]
    if refused:
        assert [(reply.code, reply.status) for reply in refused] == [(504, "5.5.2")], refused
        assert "need fully-qualified hostname" in refused[0].text
        assert warned, f"Postfix refused the EHLO name {name!r} and manage.py check did not warn"
    else:
        assert len(received.of("delivered")) == 1
        assert warned == (name in ("localhost.localdomain",)), f"check warned {warned} about {name!r}"


def test_fifteen_recipients_against_a_limit_of_ten_are_delivered_in_one_attempt(
    interop: Interop, received: SignalRecorder
) -> None:
    mx = interop.server
    recipients = [f"many{n:02}@example.test" for n in range(1, 16)]
    assert send_mail("Fifteen", "To fifteen.\n", SENDER, recipients) == 1
    work_once()
    assert received.of("deferred") == [], [event["reply"] for event in received.of("deferred")]
    delivered = received.of("delivered")
    assert sorted(event["recipient"] for event in delivered) == recipients
    assert {event["attempt"] for event in delivered} == {1}
    assert get_store().count() == 0
    mx.wait_for_mail(dict.fromkeys(recipients, 1))
    # One session, two transactions: Postfix took 10 recipients, answered the rest "452 4.5.3 Error: too
    # many recipients" (it logs no line for that reply), and took the other 5 in the second.
    (session,) = [disconnect_counts(line) for line in interop.sessions()]
    assert (session["mail"], session["data"], session.get("quit")) == ("2", "2", "1"), session
    queued = [
        int(n)
        for n in re.findall(r"qmgr\[\d+\]: \w+: from=<sender@origin\.test>, .*nrcpt=(\d+)", "\n".join(interop.log()))
    ]
    assert sorted(queued) == [5, 10]
    assert len({parse(mx.mailbox(r)[0])["Message-ID"] for r in recipients}) == 1


def test_an_unknown_user_fails_with_a_dsn_that_postfix_delivers(interop: Interop, received: SignalRecorder) -> None:
    mx = interop.server
    assert send_mail("Doomed", "Body.\n", SENDER, ["user@example.test", "nobody@example.test"]) == 1
    work_once()
    (failed,) = received.of("failed")
    assert failed["recipient"] == "nobody@example.test"
    assert (failed["reply"].code, failed["reply"].status) == (550, "5.1.1")
    mx.wait_for_mail({"user@example.test": 1, SENDER: 1})
    (report,) = mx.mailbox(SENDER)
    assert b"\nReturn-Path: <>\n" in b"\n" + header_block(report)
    dsn = email.message_from_bytes(strip_added_headers(report), policy=email.policy.compat32)
    assert dsn.get_content_type() == "multipart/report"
    assert dsn.get_param("report-type") == "delivery-status"
    _human, status, headers = dsn.get_payload()
    per_message, per_recipient = status.get_payload()
    assert per_message["Reporting-MTA"] == f"dns; {WORKER_HOSTNAME}"
    assert per_recipient["Final-Recipient"] == "rfc822; nobody@example.test"
    assert per_recipient["Action"] == "failed"
    assert per_recipient["Status"] == "5.1.1"
    diagnostic = " ".join(per_recipient["Diagnostic-Code"].split())
    assert diagnostic == (
        "smtp; 550 5.1.1 <nobody@example.test>: Recipient address rejected: User unknown in virtual mailbox table"
    )
    assert "Subject: Doomed" in headers.get_payload()
    assert any("reject: RCPT from" in line and "to=<nobody@example.test>" in line for line in interop.log())


def test_an_oversized_message_fails_5_3_4_without_its_data_sent(interop: Interop, received: SignalRecorder) -> None:
    mx = interop.server
    message = EmailMessage("Too big", "See the attachment.\n", SENDER, ["user@example.test"])
    message.attach("big.bin", random.Random(18).randbytes(900 * 1024), "application/octet-stream")  # ~1.2 MB encoded
    assert len(message.message().as_bytes()) > 1048576
    assert message.send() == 1
    work_once()
    (failed,) = received.of("failed")
    assert failed["reply"].status == "5.3.4"
    mx.wait_for_mail({SENDER: 1})
    assert mx.mailbox("user@example.test") == []
    (report,) = mx.mailbox(SENDER)
    assert b"Status: 5.3.4" in report
    counts = [disconnect_counts(line) for line in interop.sessions()]
    # Only the DSN's DATA reached Postfix, and it was accepted; nothing was refused after DATA.
    assert [count["data"] for count in counts if "data" in count] == ["1"]
    assert not [line for line in interop.log() if "message file too big" in line or "END-OF-MESSAGE" in line]


def test_starttls_is_used_on_every_session(interop: Interop) -> None:
    mx = interop.server
    for n in range(3):
        assert send_mail(f"TLS {n}", "Over TLS.\n", SENDER, ["user@example.test"]) == 1
    work_once()
    mx.wait_for_mail({"user@example.test": 3})
    for delivered in mx.mailbox("user@example.test"):
        assert re.search(rb"\(using TLSv1\.[23] with cipher \S+", header_block(delivered))
        assert b" with ESMTPS id " in header_block(delivered)
    counts = [disconnect_counts(line) for line in interop.sessions()]
    assert counts and all(count.get("starttls") == "1" for count in counts), counts
    assert any("TLS connection established from" in line for line in interop.log())


def test_a_session_whose_recipients_were_all_refused_is_not_used_again(interop: Interop) -> None:
    # Postfix counts each refused RCPT against the session (smtpd_soft_error_limit = 10: every reply
    # after that is slowed by smtpd_error_sleep_time; at smtpd_hard_error_limit = 20 it answers 421).
    # One worker slot, so the messages go one after the other, each to an unknown user (no DSNs).
    with override_settings(MAILQUEUE=interop.mailqueue(DSN=False)):
        for n in range(15):
            assert send_mail(f"Unknown {n}", "Body.\n", SENDER, ["nobody@example.test"]) == 1
        summary = work_once("--concurrency", "1")
    assert ", 15 failed," in summary, summary
    counts = assert_every_session_quit(interop)
    reused = [count for count in counts if count.get("mail", "0") not in ("0", "1")]
    assert reused == [], f"sessions with more than one transaction after all recipients were refused: {reused}"
    assert not [line for line in interop.log() if " 421 " in line or "too many errors" in line]


@pytest.mark.slow
def test_two_hundred_messages_to_three_recipients_exactly_once_every_session_ending_in_quit(
    interop: Interop, tmp_path: Path
) -> None:
    # A worker process running as in production: two waves with a pause longer than the connection
    # cache keeps an idle session, so sessions end by idle expiry and by the worker's stop, not only
    # by `--once` finishing. Postfix logs a session that ended without QUIT ("lost connection after").
    mx = interop.server
    recipients = ["bulk1@example.test", "bulk2@example.test", "bulk3@example.test"]
    messages = [
        EmailMessage(f"Bulk {n}", f"Message {n}.\n", SENDER, recipients, headers={"Message-ID": f"<bulk-{n}@interop>"})
        for n in range(200)
    ]
    worker = WorkerProcess(interop.mailqueue(), tmp_path=tmp_path, name="interop-bulk")
    try:
        assert get_connection().send_messages(messages[:100]) == 100
        mx.wait_for_mail(dict.fromkeys(recipients, 100))
        time.sleep(CACHE_TIME + 1.5)
        assert get_connection().send_messages(messages[100:]) == 100
        mx.wait_for_mail(dict.fromkeys(recipients, 200))
        wait_until(lambda: get_store().count() == 0, 20, "the queue to empty")
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0
        output = worker.stdout + worker.stderr
    finally:
        worker.close()
    assert ", 600 delivered, 0 deferred, 0 failed," in output, output
    counts = assert_every_session_quit(interop)
    for recipient in recipients:
        ids = [parse(data)["Message-ID"] for data in mx.mailbox(recipient)]
        assert sorted(ids) == sorted(f"<bulk-{n}@interop>" for n in range(200)), recipient
    assert sum(int(count["data"]) for count in counts if "data" in count) == 200
