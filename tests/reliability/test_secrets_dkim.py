"""A DKIM private key given as PEM text never shows: mail signed with it (and a deferral), a key of the wrong kind,
a key cut short — the check, the worker, the admin, `mailqueue_status` and Django's error report (the other secrets:
test_secrets.py)."""

from __future__ import annotations

import logging
from io import StringIO
from pathlib import Path
from typing import Any

import pytest

from django_mailqueue.conf import get_settings
from django_mailqueue.core.items import NewItem
from django_mailqueue.exceptions import QueueError
from django_mailqueue.history import History
from django_mailqueue.stores.orm import OrmStore
from django_mailqueue.worker import Worker
from tests.reliability.secret_texts import ErrorSignals, admin_pages, aware_now, exception_texts, report_text
from tests.support.smtp_server import ServerPool, smtp_servers  # noqa: F401


def settings_report() -> str:
    """Django's error report, settings included, raised in a frame that holds no key (its locals are shown)."""
    try:
        raise QueueError("STORE_UNAVAILABLE", "something failed")
    except QueueError as exc:
        return report_text(exc)


def key_lines(pem: str) -> list[str]:
    """The key's base64 lines (and the forms the queue hands dkimpy): any of them in a text is a leak."""
    from django_mailqueue.dkim import DkimEntry, load_key

    lines = [line for line in pem.splitlines() if line and not line.startswith("-----")]
    public = ""
    for algorithm in ("rsa-sha256", "ed25519-sha256"):
        try:
            key = load_key(DkimEntry("origin.test", "origin.test", "s", pem, algorithm))
        except QueueError:
            continue
        public = key.record
        lines += [line for line in key.dkimpy_key.decode().splitlines() if line and not line.startswith("-----")]
    # an RSA private key holds its modulus too: a piece the public record (which may be shown) holds is no secret
    pieces = [line[i : i + 40] for line in lines for i in range(0, len(line) - 39, 20)]
    return [piece for piece in pieces if piece not in public]


def key_leaks(pem: str, *texts: str) -> list[str]:
    secrets = key_lines(pem)
    return [text[:300] for text in texts if any(secret in text for secret in secrets)]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("algorithm", ["rsa-sha256", "ed25519-sha256"])
def test_a_dkim_private_key_never_shows(
    algorithm: str,
    smtp_servers: ServerPool,  # noqa: F811
    settings: Any,
    caplog: pytest.LogCaptureFixture,
    error_signals: ErrorSignals,
) -> None:
    from django.core.checks import run_checks
    from django.core.management import call_command

    from django_mailqueue.checks import check_dkim_keys
    from django_mailqueue.management.commands.mailqueue_dkim_keygen import generate_pem

    caplog.set_level(logging.DEBUG)
    pem = generate_pem(algorithm).decode()
    relay = smtp_servers.smtp("127.0.0.2", rcpt_replies={"later@corp.test": "451 4.7.1 Try again later"})
    settings.MAILQUEUE = {
        "HOSTNAME": "mq.test.example",
        "STORE": {"BACKEND": "django_mailqueue.stores.orm.OrmStore", "OPTIONS": {"database": "default"}},
        "ROUTES": {"*": {"HOST": "127.0.0.2", "PORT": smtp_servers.port, "TLS": "none"}},
        "DKIM": {"origin.test": {"SELECTOR": "mq1", "PRIVATE_KEY": pem, "ALGORITHM": algorithm}},
    }
    get_settings.cache_clear()
    store = OrmStore({"database": "default"})
    message = b"From: <sender@origin.test>\r\nTo: <rcpt@corp.test>\r\nSubject: hi\r\n\r\nhello\r\n"
    item = store.add(NewItem("sender@origin.test", ("rcpt@corp.test", "later@corp.test"), message), now=aware_now())
    worker = Worker(store=store, settings=get_settings(), once=True, history=History("default"))

    import asyncio

    stats = asyncio.run(worker.run())

    assert (stats.delivered, stats.deferred) == (1, 1), stats
    (signed,) = relay.messages
    assert signed.data.startswith(b"DKIM-Signature:")  # the key was used...
    kept = store.get(item.id)
    status = StringIO()
    call_command("mailqueue_status", stdout=status)
    call_command("mailqueue_status", "--json", stdout=status)
    checked = [str(m) for m in run_checks()] + [repr(m) for m in check_dkim_keys()]
    report = settings_report()
    texts = [caplog.text, *(r.getMessage() for r in caplog.records), repr(kept), *error_signals.payloads]
    texts += [repr(get_settings()), status.getvalue(), *checked, report, repr(worker.deliverer.__dict__)]
    texts += admin_pages(item.id)
    assert key_lines(pem)
    assert key_leaks(pem, *texts) == []  # ...and never shown


@pytest.mark.parametrize(
    "damage",
    ["wrong kind", "cut short", "a file that is not a key"],
)
def test_a_bad_dkim_key_is_refused_without_showing_it(damage: str, settings: Any, tmp_path: Path) -> None:
    from django_mailqueue.checks import check_dkim_keys
    from django_mailqueue.delivery import Deliverer
    from django_mailqueue.management.commands.mailqueue_dkim_keygen import generate_pem

    pem = generate_pem("rsa-sha256").decode()
    if damage == "wrong kind":
        given, algorithm = pem, "ed25519-sha256"
    elif damage == "cut short":
        lines = pem.splitlines()
        given, algorithm = "\n".join(lines[:8] + lines[-1:]), "rsa-sha256"
    else:
        path = tmp_path / "key.pem"
        path.write_text(pem.replace("PRIVATE KEY", "CERTIFICATE"))
        given, algorithm = str(path), "rsa-sha256"
    settings.MAILQUEUE = {"DKIM": {"origin.test": {"SELECTOR": "mq1", "PRIVATE_KEY": given, "ALGORITHM": algorithm}}}
    get_settings.cache_clear()
    (error,) = check_dkim_keys()
    assert error.id == "mailqueue.E023" and "origin.test" in error.msg and "mq1" in error.msg
    with pytest.raises(QueueError) as raised:
        Deliverer(get_settings())
    assert raised.value.code == "INVALID_OPTION"
    assert key_leaks(pem, error.msg, repr(error), *exception_texts(raised.value), repr(get_settings())) == []
