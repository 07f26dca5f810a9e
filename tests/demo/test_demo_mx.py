"""The demo's recipients' MX: the sink's RCPT policy, and its mailbox reading the package's own DSNs.

Both modules are plain Python (no Django settings of the example project),
loaded from example_project/ by path.
"""

from __future__ import annotations

import importlib.util
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

from django_mailqueue.core.items import QueueItem, Recipient, RecipientState, Reply
from django_mailqueue.worker.dsn import DsnReport, build_dsn, original_header_block

DEMO = Path(__file__).resolve().parents[2] / "example_project" / "demo"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_demo_{name}", DEMO / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


policy = load("policy")
reading = load("reading")


def test_ordinary_addresses_are_accepted() -> None:
    mx = policy.MxPolicy()
    assert mx.rcpt_reply("sender@example.com", "someone@example.net").startswith("250 ")
    assert mx.rcpt_reply("", "sender@example.com").startswith("250 ")  # DSNs come from the null sender


def test_the_rejected_address_fails_every_time() -> None:
    mx = policy.MxPolicy()
    for _ in range(3):
        assert mx.rcpt_reply("sender@example.com", "nobody@example.net") == "550 5.1.1 No such user"
    assert mx.rcpt_reply("sender@example.com", "Nobody@Example.NET") == "550 5.1.1 No such user"


def test_greylisting_defers_the_first_rcpt_of_each_sender_only() -> None:
    mx = policy.MxPolicy()
    assert mx.rcpt_reply("sender@example.com", "greylisted@example.net") == "451 4.7.1 Greylisted, try again later"
    assert mx.rcpt_reply("sender@example.com", "greylisted@example.net").startswith("250 ")
    assert mx.rcpt_reply("other@example.com", "greylisted@example.net").startswith("451 ")
    assert mx.rcpt_reply("other@example.com", "greylisted@example.net").startswith("250 ")


def test_the_mailbox_reads_a_failure_dsn_the_worker_builds() -> None:
    original = (
        b"From: sender@example.com\r\nTo: nobody@example.net\r\nSubject: Hi\r\n"
        b"Message-ID: <original.1@mail.example.com>\r\n\r\nbody\r\n"
    )
    now = datetime(2026, 1, 1, tzinfo=UTC)
    failed = Recipient("nobody@example.net", RecipientState.FAILED, Reply(550, "5.1.1", "No such user"), "127.0.0.1")
    item = QueueItem(
        id=uuid.uuid4(),
        sender="sender@example.com",
        recipients=(failed,),
        size=len(original),
        created=now,
        next_attempt=now,
        message_id="<original.1@mail.example.com>",
        subject="Hi",
    )
    dsn = build_dsn(
        DsnReport("failed", item, [failed], "mail.example.com", now, original_headers=original_header_block(original)),
        now=now,
    )

    summary = reading.summarise(dsn.message)

    assert summary.subject == "Undelivered Mail Returned to Sender"
    assert summary.dsn is not None
    assert summary.dsn.original_message_id == "<original.1@mail.example.com>"
    assert summary.dsn.reporting_mta == "mail.example.com"
    assert [(r.final_recipient, r.action, r.status) for r in summary.dsn.recipients] == [
        ("nobody@example.net", "failed", "5.1.1")
    ]


def test_an_ordinary_message_is_no_dsn_and_lists_its_attachments() -> None:
    data = (
        b"From: a@example.com\r\nSubject: =?utf-8?q?Gr=C3=BC=C3=9Fe?=\r\nMIME-Version: 1.0\r\n"
        b'Content-Type: multipart/mixed; boundary="b"\r\n\r\n'
        b"--b\r\nContent-Type: text/plain\r\n\r\nhello\r\n"
        b"--b\r\nContent-Type: text/plain\r\n"
        b'Content-Disposition: attachment; filename="notes.txt"\r\n\r\nx\r\n--b--\r\n'
    )
    summary = reading.summarise(data)
    assert summary.dsn is None
    assert summary.subject == "Grüße"
    assert summary.text.strip() == "hello"
    assert summary.attachments == ["notes.txt"]


def test_the_mailbox_checks_dkim_signatures_against_the_demos_own_records(settings: Any, tmp_path: Path) -> None:
    from django_mailqueue.conf import get_settings
    from django_mailqueue.dkim import DkimSigner
    from django_mailqueue.management.commands.mailqueue_dkim_keygen import generate_pem

    key = tmp_path / "demo.pem"
    key.write_bytes(generate_pem("rsa-sha256"))
    settings.MAILQUEUE = {"DKIM": {"example.com": {"SELECTOR": "demo", "PRIVATE_KEY": str(key)}}}
    get_settings.cache_clear()
    reading._published_records.cache_clear()
    signer = DkimSigner.from_settings(get_settings().dkim)
    assert signer is not None
    signed = signer.sign(b"From: a@example.com\r\nTo: b@example.net\r\nSubject: hi\r\n\r\nHello.\r\n")
    assert reading.dkim_verdict(signed) == "pass d=example.com s=demo"
    assert reading.dkim_verdict(signed.replace(b"Hello.", b"Hello!")).startswith("fail d=example.com s=demo: ")
    assert reading.dkim_verdict(b"From: a@example.com\r\n\r\nHello.\r\n") == "none"
    reading._published_records.cache_clear()


def test_the_throttled_domain_takes_two_messages_in_30_seconds_then_answers_421() -> None:
    now = [1000.0]
    mx = policy.MxPolicy(clock=lambda: now[0])
    replies = [mx.rcpt_reply("sender@example.com", f"user{n}@busy.example.org") for n in range(4)]
    assert [r[:3] for r in replies] == ["250", "250", "421", "421"]
    assert replies[2] == "421 4.7.0 Try again later, closing connection."
    assert mx.rcpt_reply("sender@example.com", "someone@example.net").startswith("250 ")  # others are not
    now[0] += 30
    assert mx.rcpt_reply("sender@example.com", "user9@busy.example.org").startswith("250 ")
