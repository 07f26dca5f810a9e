"""The DKIM signer's private-key operation through cryptography (`dkimpy_adapter`): the very signature
`dkim.sign` writes, and it verifies with dkimpy's verifier and with Perl's Mail::DKIM, an independent one."""

from __future__ import annotations

import logging
import random
from pathlib import Path
from unittest import mock

import dkim
import pytest

from django_mailqueue import dkimpy_adapter
from django_mailqueue.delivery.wire import normalize_line_endings
from django_mailqueue.dkim import DEFAULT_HEADERS, DkimEntry, DkimSigner, load_key
from django_mailqueue.management.commands.mailqueue_dkim_keygen import generate_pem
from tests.support.dns_server import DnsServer
from tests.support.mail_dkim import mail_dkim_result, require_mail_dkim
from tests.worker.test_dkim import ALGORITHMS, MESSAGES, changed_body_byte, publish, verifies

SMTPUTF8 = (
    "From: Jösé <jösé@origin.test>\r\nTo: Zoë <zoë@dest.test>\r\nSubject: Grüße aus Köln\r\n"
    "Date: Tue, 01 Dec 2026 10:00:00 +0000\r\nMessage-ID: <1@origin.test>\r\nMIME-Version: 1.0\r\n"
    "Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\nHallo, Zoë!\r\n"
).encode()
KINDS = [*MESSAGES, "smtputf8"]
#: a fixed signing time, so dkimpy's signature and ours can be compared byte for byte
WHEN = 1_796_000_000


def message(kind: str) -> bytes:
    return SMTPUTF8 if kind == "smtputf8" else normalize_line_endings(MESSAGES[kind]().message().as_bytes())


def signers(dns_server: DnsServer, tmp_path: Path, algorithm: str) -> tuple[DkimSigner, DkimSigner]:
    """Signers of one new key, published: through the adapter, and dkimpy alone."""
    entry = publish(dns_server, tmp_path, "origin.test", "mq1", algorithm)
    key = load_key(DkimEntry("origin.test", "origin.test", "mq1", entry["PRIVATE_KEY"], algorithm))
    return DkimSigner({"origin.test": key}), DkimSigner({"origin.test": key}, fast=False)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("kind", KINDS)
def test_the_signature_is_dkimpys_own_byte_for_byte(
    kind: str, algorithm: str, dns_server: DnsServer, tmp_path: Path
) -> None:
    fast, alone = signers(dns_server, tmp_path, algorithm)
    assert fast.fast and not alone.fast
    original = message(kind)
    with mock.patch.object(dkim.time, "time", return_value=WHEN):  # dkimpy's t=, and the signer's
        ours, dkimpys = fast.sign(original), alone.sign(original)
    assert ours.startswith(b"DKIM-Signature: v=1; a=" + algorithm.encode())
    assert ours == dkimpys


@pytest.mark.parametrize("kind", KINDS)
def test_an_rsa_signature_verifies_with_mail_dkim_and_one_changed_body_byte_fails_it(
    kind: str, dns_server: DnsServer, tmp_path: Path
) -> None:
    """Mail::DKIM, a verifier sharing no code with dkimpy (Perl, OpenSSL's RSA through Crypt::OpenSSL::RSA).
    Debian 12's (1.20230212) has no Ed25519; an Ed25519 signature is dkimpy's own byte for byte (above), and
    dkimpy's verifier passes it (tests/worker/test_dkim.py, over what the MX received)."""
    require_mail_dkim()
    signed = signers(dns_server, tmp_path, "rsa-sha256")[0].sign(message(kind))
    changed = changed_body_byte(signed)

    assert verifies(signed, dns_server)
    assert mail_dkim_result(signed, dns_server.port) == "pass"
    assert not verifies(changed, dns_server)
    assert mail_dkim_result(changed, dns_server.port).startswith("fail\nfail (body has been altered)")


_HEAD = b"From: A <a@origin.test>\r\nTo: b@dest.test\r\nSubject: s\r\nMIME-Version: 1.0\r\n"
#: what the adapter's shortcuts (a body or header value with no tab, no two spaces, no space before a line end
#: is its own relaxed form) and its header-only parse must get right: each on either side of them
EDGES = {
    "wsp-in-body": _HEAD + b"\r\na  b\tc \r\n\t lead\r\nend\t\r\n",
    "one-space-before-a-line-end": _HEAD + b"\r\nplain words \r\nmore\r\n",
    "empty-lines-at-the-end": _HEAD + b"\r\nbody\r\n\r\n\r\n\r\n",
    "only-empty-lines": _HEAD + b"\r\n\r\n\r\n",
    "empty-body": _HEAD + b"\r\n",
    "no-empty-line": _HEAD,
    "no-final-crlf": _HEAD + b"\r\nlast line",
    "a-lone-space-line": _HEAD + b"\r\nx\r\n \r\n",
    "folded-and-spaced-headers": (
        b"From:  A  <a@origin.test>  \r\nSubject: a\r\n\tfolded\r\n  twice \t \r\nTo:b@dest.test\r\n"
        b"Cc: c@dest.test,\r\n d@dest.test\r\n\r\nbody\r\n"
    ),
    "repeated-fields": _HEAD + b"From: x@origin.test\r\nSubject: second\r\n\r\nbody\r\n",
    "mbox-from-line": b"From a@origin.test Tue Dec  1 10:00:00 2026\r\n" + _HEAD + b"\r\nbody\r\n",
    "bare-cr-in-a-line": _HEAD + b"\r\na\rb \r\r\n",
    "bare-lf": b"From: a@origin.test\nSubject: s  t\n\nbody  x \n\n",
    "crlf-in-the-body-only": _HEAD.replace(b"\r\n", b"\n") + b"\r\n\r\nbody\r\n",
    # what the one-pass header parse must read as dkimpy's parser does, or leave to it
    "a-name-starting-with-a-colon": _HEAD + b":x: y\r\nTo: c@dest.test\r\n\r\nbody\r\n",
    "a-space-before-the-colon": b"From : a@origin.test\r\nFrom: A <a@origin.test>\r\nSubject: s\r\n\r\nb\r\n",
    "a-cr-at-a-value-end": b"From: a@origin.test\r\nSubject: s\r\r\nTo: b@dest.test\r\n\r\nbody\r\n",
    "empty-values-and-no-space": b"From:a@origin.test\r\nSubject:\r\nTo:   \r\n\r\nbody\r\n",
    "mixed-case-names": b"FROM: a@origin.test\r\nsubject: s\r\nTo: b@dest.test\r\nSUBJECT: t\r\n\r\nx\r\n",
    "folded-from": b"From: A\r\n <a@origin.test>\r\nSubject: s\r\n\r\nbody\r\n",
    "header-without-final-crlf": b"From: a@origin.test\r\nSubject: s",
}


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("kind", sorted(EDGES))
def test_the_signature_is_dkimpys_own_byte_for_byte_at_the_edges(
    kind: str, algorithm: str, dns_server: DnsServer, tmp_path: Path
) -> None:
    fast, alone = signers(dns_server, tmp_path, algorithm)
    with mock.patch.object(dkim.time, "time", return_value=WHEN):
        ours, dkimpys = fast.sign(EDGES[kind]), alone.sign(EDGES[kind])
    assert ours.startswith(b"DKIM-Signature: v=1; a=" + algorithm.encode())
    assert ours == dkimpys
    if b"\n" not in EDGES[kind].replace(b"\r\n", b""):  # dkimpy's verifier reads CRLF messages
        assert verifies(ours, dns_server)


def _random_message(rng: random.Random) -> bytes:
    """A CRLF message of fields in random order, case, spacing and folding, some repeated, some not signed."""
    names = [
        "From",
        "To",
        "Cc",
        "Subject",
        "Date",
        "Message-ID",
        "MIME-Version",
        "Content-Type",
        "X-Mailer",
        "Reply-To",
    ]
    words = ["a", "b@dest.test", "Grüße".encode().decode("latin-1"), "=?utf-8?q?x?=", "(c)", "<1@origin.test>", ";"]
    lines = [f"From:{rng.choice([' ', '', '  ', chr(9)])}A <a@origin.test>"]
    for _ in range(rng.randrange(0, 12)):
        name = rng.choice(names)
        name = rng.choice([name, name.lower(), name.upper()])
        value = "".join(rng.choice([" ", "  ", "\t", " \r\n ", "\r\n\t"]) + rng.choice(words) for _ in range(4))
        lines.append(name + ":" + value + rng.choice(["", " ", "\t"]))
    rng.shuffle(lines)
    body = "".join(rng.choice(["text", " ", "  ", "\t", "\r\n", "\r\n\r\n", "é"]) for _ in range(rng.randrange(0, 40)))
    return "\r\n".join([*lines, "", body]).encode("latin-1")


def test_the_signature_is_dkimpys_own_byte_for_byte_over_random_messages() -> None:
    key = load_key(
        DkimEntry("origin.test", "origin.test", "mq1", generate_pem("ed25519-sha256").decode(), "ed25519-sha256")
    )
    fast, alone = DkimSigner({"origin.test": key}), DkimSigner({"origin.test": key}, fast=False)
    rng = random.Random(21)
    with mock.patch.object(dkim.time, "time", return_value=WHEN):
        for _ in range(300):
            original = _random_message(rng)
            assert fast.sign(original) == alone.sign(original), original


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_the_signature_is_dkimpys_own_byte_for_byte_where_dkimpy_folds_inside_a_tag(algorithm: str) -> None:
    """A d= or h= name longer than a folded line's first part: dkimpy's folding breaks inside it, and the
    field as hashed keeps the break's space."""
    domain = "a-signing-domain-long-enough-to-be-folded-inside-it.origin.test"
    pem = generate_pem(algorithm).decode()
    for entry in (
        DkimEntry(domain, domain, "mq1", pem, algorithm),
        DkimEntry(
            domain, domain, "mq1", pem, algorithm, ("from", "x-a-field-name-long-enough-to-be-folded-inside-it-too")
        ),
    ):
        key = load_key(entry)
        fast, alone = DkimSigner({domain: key}), DkimSigner({domain: key}, fast=False)
        original = (
            f"From: a@{domain}\r\nX-A-Field-Name-Long-Enough-To-Be-Folded-Inside-It-Too: v\r\n\r\nbody\r\n"
        ).encode()
        with mock.patch.object(dkim.time, "time", return_value=WHEN):
            ours = fast.sign(original)
            assert ours == alone.sign(original)
        assert b"\r\n " in ours.split(b"; bh=")[0]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_worker_message_is_signed_without_dkimpys_parser_and_folded_once(
    algorithm: str, dns_server: DnsServer, tmp_path: Path
) -> None:
    """dkimpy's parser and folding are Python loops over lines: the header is read once, by one regular
    expression, and only the finished field is folded (the field as hashed, b= empty, needs no folding)."""
    fast = signers(dns_server, tmp_path, algorithm)[0]
    with (
        mock.patch.object(dkim, "rfc822_parse", wraps=dkim.rfc822_parse) as parsed,
        mock.patch.object(dkim, "fold", wraps=dkim.fold) as folded,
    ):
        signed = fast.sign(message("attachments"))
    assert signed.startswith(b"DKIM-Signature: ") and verifies(signed, dns_server)
    assert (parsed.call_count, folded.call_count) == (0, 1)


def test_a_failed_private_key_operation_sends_the_message_unsigned(
    dns_server: DnsServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fast = signers(dns_server, tmp_path, "rsa-sha256")[0]
    pending = fast.prepare(message("7bit"))
    assert isinstance(pending, dkimpy_adapter.PendingSignature) and len(pending.digest) == 32

    def fails() -> bytes:
        raise ValueError("an OpenSSL error")

    with caplog.at_level(logging.WARNING, logger="django_mailqueue.dkim"):
        assert fast.finish(pending, fails) == b""
    assert "could not sign a message (ValueError); it goes unsigned" in caplog.text
    assert "PRIVATE" not in caplog.text


def test_without_what_the_adapter_needs_dkimpy_signs_alone_and_says_so(
    dns_server: DnsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # a dkimpy release without one of the functions the adapter calls
    monkeypatch.setattr(dkimpy_adapter, "_NEEDED", (*dkimpy_adapter._NEEDED, "hash_headers_v2"))
    assert dkimpy_adapter.missing() == "dkimpy lacks hash_headers_v2"
    with caplog.at_level(logging.WARNING, logger="django_mailqueue.dkim"):
        slow = signers(dns_server, tmp_path, "ed25519-sha256")[0]
    assert not slow.fast and "dkimpy lacks hash_headers_v2: dkimpy signs alone" in caplog.text
    assert verifies(slow.sign(message("7bit")), dns_server)


def test_the_default_headers_leave_out_what_dkimpy_refuses_to_sign() -> None:
    assert not set(DEFAULT_HEADERS) & {h.decode() for h in dkim.DKIM.SHOULD_NOT}


def test_the_fields_fixed_tags_are_worked_out_once_a_key_and_dkimpys_at_every_time() -> None:
    """All but t= and bh= of the field, and whether the field as hashed needs dkimpy's folding, are the same for
    every message a key signs with the same fields: worked out at the first (`dkimpy_adapter._tags`), and the
    signature still dkimpy's byte for byte whatever t= (1 to 12 digits), the body and the key's names are."""
    long_domain = "a-signing-domain-long-enough-to-be-folded-inside-it.origin.test"
    entries = [
        DkimEntry("origin.test", "origin.test", "mq1", generate_pem("ed25519-sha256").decode(), "ed25519-sha256"),
        DkimEntry("b.test", "b.test", "b", generate_pem("ed25519-sha256").decode(), "ed25519-sha256", ("from", "b")),
        DkimEntry(long_domain, long_domain, "s" * 40, generate_pem("ed25519-sha256").decode(), "ed25519-sha256"),
    ]
    rng = random.Random(23)
    for entry in entries:
        key = load_key(entry)
        fast, alone = DkimSigner({entry.domain: key}), DkimSigner({entry.domain: key}, fast=False)
        for _ in range(60):
            original = _random_message(rng).replace(b"a@origin.test", b"a@" + entry.domain.encode(), 1)
            original = original.replace(b"\r\n\r\n", b"\r\nB: x\r\n\r\n", 1)
            with mock.patch.object(dkim.time, "time", return_value=rng.choice([7, rng.randrange(10**12)])):
                ours, dkimpys = fast.sign(original), alone.sign(original)
            assert ours == dkimpys, original
        dkimpy_adapter._tags.cache_clear()
        with mock.patch.object(dkimpy_adapter, "_unfolds_to_itself", wraps=dkimpy_adapter._unfolds_to_itself) as once:
            for n in range(20):
                with mock.patch.object(dkim.time, "time", return_value=WHEN + n):
                    fast.sign(b"From: a@" + entry.domain.encode() + b"\r\nB: x\r\n\r\nbody %d\r\n" % n)
        assert once.call_count == 1  # at the first message, not at each
