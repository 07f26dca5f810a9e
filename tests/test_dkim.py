"""MAILQUEUE["DKIM"]: the setting's rules, the keys `manage.py check` loads, `mailqueue_dkim_keygen`, the signer."""

from __future__ import annotations

import stat
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from django_mailqueue.checks import check_dkim_keys
from django_mailqueue.conf import get_settings, load_settings, settings_problems
from django_mailqueue.dkim import DkimEntry, DkimSigner, from_domain, load_key
from django_mailqueue.management.commands.mailqueue_dkim_keygen import generate_pem

KEY = "/etc/dkim/example.com.pem"


@pytest.mark.parametrize(
    ("dkim", "says"),
    [
        ([], "must be a dict"),
        ({"example.com": "mq1"}, "must be a dict with SELECTOR"),
        ({"example.com": {"PRIVATE_KEY": KEY}}, "['SELECTOR'] must be a DNS label"),
        ({"example.com": {"SELECTOR": "a b", "PRIVATE_KEY": KEY}}, "['SELECTOR'] must be a DNS label"),
        ({"example.com": {"SELECTOR": "mq1"}}, "['PRIVATE_KEY'] must be a PEM file's path"),
        ({"example.com": {"SELECTOR": "mq1", "PRIVATE_KEY": KEY, "ALGORITHM": "rsa-sha1"}}, "['ALGORITHM'] must be"),
        ({"*": {"SELECTOR": "mq1", "PRIVATE_KEY": KEY}}, "['*'] needs DOMAIN"),
        ({"example.com": {"SELECTOR": "mq1", "PRIVATE_KEY": KEY, "KEY": 1}}, "unknown keys ['KEY']"),
        ({"example.com": {"SELECTOR": "mq1", "PRIVATE_KEY": KEY, "HEADERS": ["To", "Bcc"]}}, "must not name ['bcc']"),
        ({"exa mple.com": {"SELECTOR": "mq1", "PRIVATE_KEY": KEY}}, "is not a domain"),
    ],
)
def test_a_bad_dkim_setting_is_refused_with_its_check_id(dkim: Any, says: str) -> None:
    (problem,) = settings_problems({"DKIM": dkim})
    assert problem.check_id == "mailqueue.E023" and problem.key == "DKIM"
    assert says in problem.message


def test_the_setting_is_read_into_entries_by_a_label_domain() -> None:
    parsed = load_settings(
        {
            "DKIM": {
                "Bücher.Example": {"SELECTOR": "mq1", "PRIVATE_KEY": KEY, "HEADERS": ["Subject", "X-Campaign"]},
                "*": {"SELECTOR": "all", "PRIVATE_KEY": KEY, "DOMAIN": "mail.example", "ALGORITHM": "ed25519-sha256"},
            }
        }
    ).dkim
    assert parsed["xn--bcher-kva.example"].domain == "xn--bcher-kva.example"
    assert parsed["xn--bcher-kva.example"].headers == ("from", "subject", "x-campaign")
    assert (parsed["*"].domain, parsed["*"].algorithm, parsed["*"].record_name) == (
        "mail.example",
        "ed25519-sha256",
        "all._domainkey.mail.example",
    )
    assert KEY not in repr(parsed)


@pytest.mark.parametrize(
    ("header", "domain"),
    [
        (b"From: A <a@Example.COM>\r\n", "example.com"),
        (b"from:\r\n  =?utf-8?q?J=C3=B6rg?= <j@b\xc3\xbccher.example>\r\n", "xn--bcher-kva.example"),
        (b"Sender: s@other.example\r\nFrom: a@first.example, b@second.example\r\n", "first.example"),
        (b"To: a@example.com\r\n", None),
    ],
)
def test_the_from_domain_is_the_first_from_address_domain(header: bytes, domain: str | None) -> None:
    assert from_domain(header + b"Subject: x\r\n\r\nbody\r\n") == domain


def test_check_loads_every_key_and_says_which_record_to_publish(settings: Any, tmp_path: Path) -> None:
    good = tmp_path / "good.pem"
    good.write_bytes(generate_pem("ed25519-sha256"))
    settings.MAILQUEUE = {
        "DKIM": {
            "good.example": {"SELECTOR": "mq1", "PRIVATE_KEY": str(good), "ALGORITHM": "ed25519-sha256"},
            "missing.example": {"SELECTOR": "mq2", "PRIVATE_KEY": str(tmp_path / "nowhere.pem")},
        }
    }
    get_settings.cache_clear()
    info, error = check_dkim_keys()
    assert info.id == "mailqueue.I002"
    assert 'mq1._domainkey.good.example. IN TXT ( "v=DKIM1; k=ed25519; p=' in info.msg
    assert error.id == "mailqueue.E023"
    assert "MAILQUEUE['DKIM']['missing.example'] (selector 'mq2', the file" in error.msg
    assert "cannot be read: No such file or directory" in error.msg


@pytest.mark.parametrize("algorithm", ["rsa", "ed25519"])
def test_keygen_writes_a_private_key_and_prints_the_record(algorithm: str, tmp_path: Path) -> None:
    path = tmp_path / "k.pem"
    out = StringIO()
    call_command(
        "mailqueue_dkim_keygen", "Example.com", "mq1", f"--algorithm={algorithm}", f"--output={path}", stdout=out
    )
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    entry = DkimEntry("example.com", "example.com", "mq1", str(path), f"{algorithm}-sha256")
    key = load_key(entry)
    printed = out.getvalue()
    assert key.record.split("p=")[1][:200] in printed.replace('" "', "")
    assert "mq1._domainkey.example.com. IN TXT" in printed
    secret = [line for line in path.read_text().splitlines() if not line.startswith("-----")]
    assert not any(line in printed for line in secret)
    if algorithm == "rsa":
        from cryptography.hazmat.primitives.serialization import load_pem_private_key

        assert load_pem_private_key(path.read_bytes(), None).key_size == 2048  # type: ignore[union-attr]
    with pytest.raises(CommandError, match="exists"):
        call_command("mailqueue_dkim_keygen", "example.com", "mq1", f"--output={path}", stdout=StringIO())


def test_a_message_without_a_key_for_its_domain_or_without_from_goes_unsigned(tmp_path: Path) -> None:
    path = tmp_path / "k.pem"
    path.write_bytes(generate_pem("ed25519-sha256"))
    signer = DkimSigner(
        {"example.com": load_key(DkimEntry("example.com", "example.com", "s", str(path), "ed25519-sha256"))}
    )
    for message in (b"From: a@other.example\r\n\r\nbody\r\n", b"Subject: no from\r\n\r\nbody\r\n"):
        assert signer.sign(message) == message
    assert signer.sign(b"From: a@example.com\r\n\r\nbody\r\n").startswith(b"DKIM-Signature: v=1; a=ed25519-sha256;")
