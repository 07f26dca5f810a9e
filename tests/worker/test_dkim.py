"""DKIM through the worker: what the MX receives verifies with dkimpy's verifier, the key read from loopback DNS.

RSA-2048 and Ed25519; 7bit, 8bit and SMTPUTF8 messages, attachments, a DSN;
and one changed body byte breaks the signature.
"""

from __future__ import annotations

import concurrent.futures
import threading
from io import StringIO
from pathlib import Path
from typing import Any
from unittest import mock

import dkim
import dns.resolver
import pytest
from django.core.mail import EmailMessage, send_mail
from django.core.management import call_command
from django.test import override_settings

from django_mailqueue.core.clock import SystemClock
from django_mailqueue.core.items import NewItem
from django_mailqueue.dkim import DkimEntry, PendingSignature, load_key, txt_record_strings
from django_mailqueue.management.commands.mailqueue_dkim_keygen import generate_pem
from django_mailqueue.stores import get_store
from tests.support.dns_server import DnsServer
from tests.worker.conftest import MailWorld, SignalRecorder

pytestmark = pytest.mark.django_db(transaction=True)

MEMORY = {"BACKEND": "django_mailqueue.stores.memory.MemoryStore"}
ALGORITHMS = ["rsa-sha256", "ed25519-sha256"]


def work_once() -> str:
    out = StringIO()
    call_command("mailqueue_work", "--once", stdout=out, stderr=StringIO())
    return out.getvalue()


def publish(dns_server: DnsServer, tmp_path: Path, domain: str, selector: str, algorithm: str) -> dict[str, str]:
    """A new key for `domain` in a file, its record in the loopback DNS; the DKIM setting's entry."""
    path = tmp_path / f"{domain}.{selector}.pem"
    path.write_bytes(generate_pem(algorithm))
    key = load_key(DkimEntry(domain, domain, selector, str(path), algorithm))
    dns_server.add(key.entry.record_name, "TXT", " ".join(f'"{s}"' for s in txt_record_strings(key.record)))
    return {"SELECTOR": selector, "PRIVATE_KEY": str(path), "ALGORITHM": algorithm}


def verifies(message: bytes, dns_server: DnsServer) -> bool:
    """dkimpy's verdict on `message`, its public key looked up in the loopback DNS only."""
    resolver = dns.resolver.Resolver(configure=False)
    resolver.nameservers = ["127.0.0.1"]
    resolver.port = dns_server.port

    def txt(name: bytes, timeout: int = 5) -> bytes:
        # at least 30 s whatever dkimpy passes: the loopback DNS answers at once, unless the machine is loaded
        answer = resolver.resolve(name.decode("ascii"), "TXT", lifetime=max(timeout, 30))
        return b"".join(b"".join(record.strings) for record in answer)

    return bool(dkim.verify(message, dnsfunc=txt))


def changed_body_byte(message: bytes) -> bytes:
    end = message.index(b"\r\n\r\n") + 4
    position = end + (len(message) - end) // 2
    while message[position : position + 1] in (b"\r", b"\n", b" "):
        position += 1
    flipped = b"X" if message[position : position + 1] != b"X" else b"Y"
    return message[:position] + flipped + message[position + 1 :]


def signature_tags(message: bytes) -> dict[str, str]:
    field = message[: message.index(b"\r\n\r\n")].split(b"DKIM-Signature:", 1)[1]
    field = field.split(b"\r\n", 1)[0] + b"".join(
        line for line in field.split(b"\r\n")[1:] if line[:1] in (b" ", b"\t")
    ).replace(b"\t", b" ")
    unfolded = field.decode("ascii").replace(" ", "")
    return dict(tag.split("=", 1) for tag in unfolded.split(";") if tag)


def plain(subject: str, body: str) -> EmailMessage:
    return EmailMessage(subject, body, "Sender <sender@origin.test>", ["someone@dest.test"], cc=["copy@dest.test"])


def with_attachments() -> EmailMessage:
    message = plain("Invoice", "Please find the invoice attached.\n")
    message.attach("invoice.pdf", b"%PDF-1.4\n" + bytes(range(256)) * 40, "application/pdf")
    message.attach("notes.txt", "Line one\nLine two — with a dash\n", "text/plain")
    return message


MESSAGES = {
    "7bit": lambda: plain("Hello", "Plain ASCII body.\n.\nA line with a lone dot above.\n"),
    "8bit": lambda: plain("Grüße", "Ünïcödé body, sent as 8bit.\n"),
    "attachments": with_attachments,
}


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("kind", list(MESSAGES))
def test_delivered_mail_verifies_and_a_changed_body_byte_does_not(
    kind: str, algorithm: str, mail_world: MailWorld, tmp_path: Path, received: SignalRecorder
) -> None:
    entry = publish(mail_world.dns, tmp_path, "origin.test", "mq1", algorithm)
    threads: list[str] = []
    operation = PendingSignature.private_key_operation

    def recorded(pending: PendingSignature) -> bytes:
        threads.append(threading.current_thread().name)
        return operation(pending)

    with (
        override_settings(MAILQUEUE=mail_world.mailqueue(MEMORY, DKIM={"origin.test": entry})),
        mock.patch.object(PendingSignature, "private_key_operation", recorded),
    ):
        assert MESSAGES[kind]().send() == 1
        assert "2 delivered" in work_once()
    # RSA's operation (OpenSSL, the GIL released) in the signing thread, off the event loop; Ed25519's on it
    (thread,) = threads
    assert thread.startswith("mailqueue-dkim") == (algorithm == "rsa-sha256")
    (message,) = mail_world.mx.messages
    assert message.data.startswith(b"DKIM-Signature:")
    tags = signature_tags(message.data)
    assert (tags["d"], tags["s"], tags["a"], tags["c"]) == ("origin.test", "mq1", algorithm, "relaxed/relaxed")
    signed = tags["h"].lower().split(":")
    assert signed.count("from") == 2  # over-signed: a From added on the way breaks the signature
    assert {"to", "cc", "subject", "date", "message-id", "mime-version", "content-type"} <= set(signed)
    if kind == "8bit":
        assert "8BITMIME" in " ".join(message.mail_options).upper()
    assert verifies(message.data, mail_world.dns)
    assert not verifies(changed_body_byte(message.data), mail_world.dns)
    assert received.names() == ["delivered", "delivered"]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_an_smtputf8_message_with_utf8_headers_verifies(algorithm: str, mail_world: MailWorld, tmp_path: Path) -> None:
    mail_world.dns.mx("xn--bcher-kva.test", (10, "mx.dest.test"))
    entry = publish(mail_world.dns, tmp_path, "xn--bcher-kva.test", "utf8", algorithm)
    raw = (
        "From: Jösé <jösé@bücher.test>\r\nTo: Zoë <zoë@dest.test>\r\nSubject: Grüße aus Köln\r\n"
        "Date: Tue, 01 Dec 2026 10:00:00 +0000\r\nMessage-ID: <1@bücher.test>\r\nMIME-Version: 1.0\r\n"
        "Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\nHallo, Zoë!\r\n"
    ).encode()
    config = mail_world.mailqueue(MEMORY, DKIM={"bücher.test": entry})  # a U-label key matches too
    with override_settings(MAILQUEUE=config):
        get_store().add(NewItem("jösé@bücher.test", ("zoë@dest.test",), raw), now=SystemClock().now())
        assert "1 delivered" in work_once()
    (message,) = mail_world.mx.messages
    assert message.smtp_utf8 and signature_tags(message.data)["d"] == "xn--bcher-kva.test"
    assert message.data.endswith(raw)  # the signature is the only change
    assert verifies(message.data, mail_world.dns)
    assert not verifies(changed_body_byte(message.data), mail_world.dns)


def test_a_dsn_is_signed_with_the_hostname_domains_key(
    mail_world: MailWorld, tmp_path: Path, received: SignalRecorder
) -> None:
    own = publish(mail_world.dns, tmp_path, "mq.test.example", "bounces", "ed25519-sha256")
    sender = publish(mail_world.dns, tmp_path, "origin.test", "mq1", "rsa-sha256")
    with override_settings(
        MAILQUEUE=mail_world.mailqueue(MEMORY, DKIM={"origin.test": sender, "mq.test.example": own})
    ):
        send_mail("Doomed", "Body.\n", "sender@origin.test", ["rejected@dest.test"])
        work_once()
    (report,) = mail_world.mx.messages
    assert (
        report.mail_from in ("", "<>") and b"From: Mail Delivery System <MAILER-DAEMON@mq.test.example>" in report.data
    )
    tags = signature_tags(report.data)
    assert (tags["d"], tags["s"], tags["a"]) == ("mq.test.example", "bounces", "ed25519-sha256")
    assert verifies(report.data, mail_world.dns)
    assert not verifies(changed_body_byte(report.data), mail_world.dns)


def test_the_star_entry_signs_other_domains_with_its_domain_and_unlisted_mail_goes_unsigned(
    mail_world: MailWorld, tmp_path: Path
) -> None:
    star = publish(mail_world.dns, tmp_path, "signer.test", "all", "ed25519-sha256")
    with override_settings(MAILQUEUE=mail_world.mailqueue(MEMORY, DKIM={"*": {**star, "DOMAIN": "signer.test"}})):
        send_mail("One", "Body.\n", "sender@origin.test", ["someone@dest.test"])
        work_once()
    with override_settings(MAILQUEUE=mail_world.mailqueue(MEMORY, DKIM={"other.test": star})):
        send_mail("Two", "Body.\n", "sender@origin.test", ["someone@dest.test"])
        work_once()
    first, second = mail_world.mx.messages
    assert signature_tags(first.data)["d"] == "signer.test" and verifies(first.data, mail_world.dns)
    assert b"DKIM-Signature" not in second.data


def test_a_claimed_batchs_rsa_signatures_go_to_the_signing_thread_together_and_verify(
    mail_world: MailWorld, tmp_path: Path
) -> None:
    entry = publish(mail_world.dns, tmp_path, "origin.test", "mq1", "rsa-sha256")
    handed: list[int] = []
    submit = concurrent.futures.ThreadPoolExecutor.submit

    def counted(self: concurrent.futures.ThreadPoolExecutor, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        if self._thread_name_prefix.startswith("mailqueue-dkim"):
            handed.append(len(args[0]) if args else 1)
        return submit(self, fn, *args, **kwargs)

    with (
        override_settings(MAILQUEUE=mail_world.mailqueue(MEMORY, DKIM={"origin.test": entry})),
        mock.patch.object(concurrent.futures.ThreadPoolExecutor, "submit", counted),
    ):
        for i in range(10):
            send_mail(f"Batch {i}", "Body.\n", "sender@origin.test", [f"r{i}@dest.test"])
        assert "10 delivered" in work_once()
    # one hand-over (a queue, a wake-up, a callback through the loop) for the lot, not one a message
    assert sum(handed) == 10 and len(handed) <= 5
    assert len(mail_world.mx.messages) == 10
    assert all(verifies(message.data, mail_world.dns) for message in mail_world.mx.messages)
