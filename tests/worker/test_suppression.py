"""The suppression list at work: a 550 5.1.1 lists the address, the next message to it fails at once with no
connection to its MX, and once it is removed in the admin the next one goes through — on every store; the
look-up is one statement (one Redis command) per claimed batch."""

from __future__ import annotations

import contextlib
import email
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from io import StringIO
from typing import Any

import pytest
import redis
from django.contrib.auth.models import User
from django.core.mail import send_mail
from django.core.management import call_command
from django.db.backends.signals import connection_created
from django.test import Client, override_settings
from django.urls import reverse

from django_mailqueue.core.clock import SystemClock
from django_mailqueue.core.items import Reply, Suppression
from django_mailqueue.history import history_alias
from django_mailqueue.models import DeliveryRecord
from django_mailqueue.stores import get_store
from tests.support.databases import DATABASES
from tests.support.dns_server import DnsServer
from tests.support.smtp_server import ServerPool, SmtpServer
from tests.worker.conftest import MailWorld, SignalRecorder, only_kept_failed

pytestmark = pytest.mark.django_db(transaction=True, databases=DATABASES)
SUPPRESSION_LIST = "admin:django_mailqueue_suppressedaddress_changelist"
SUPPRESSION_REMOVE = "admin:django_mailqueue_suppressedaddress_remove"


@dataclass
class TwoMx:
    """dest.test's MX (127.0.0.3), which refuses unknown@dest.test, apart from origin.test's (127.0.0.2),
    which takes the DSNs: connections to dest.test's are counted alone."""

    world: MailWorld
    dest: SmtpServer
    origin: SmtpServer


@pytest.fixture
def two_mx(dns_server: DnsServer, smtp_servers: ServerPool) -> TwoMx:
    origin = smtp_servers.smtp("127.0.0.2")
    dest = smtp_servers.smtp("127.0.0.3", rcpt_replies={"unknown@dest.test": "550 5.1.1 No such user here"})
    dns_server.mx("origin.test", (10, "mx.origin.test")).a("mx.origin.test", "127.0.0.2")
    dns_server.mx("dest.test", (10, "mx.dest.test")).a("mx.dest.test", "127.0.0.3")
    return TwoMx(MailWorld(dns=dns_server, mx=origin, port=smtp_servers.port), dest, origin)


def work_once() -> None:
    call_command("mailqueue_work", "--once", stdout=StringIO(), stderr=StringIO())


def test_a_5_1_1_lists_the_address_and_the_next_message_fails_without_a_connection(
    two_mx: TwoMx, store_config: dict[str, Any], received: SignalRecorder
) -> None:
    dest, origin = two_mx.dest, two_mx.origin
    with override_settings(MAILQUEUE=two_mx.world.mailqueue(store_config)):
        send_mail("First", "Body.\n", "sender@origin.test", ["unknown@dest.test"])
        (first,) = get_store().list()
        work_once()
        assert dest.connections == 1 and dest.commands.count("RCPT") == 1
        listed = get_store().suppressed(["unknown@dest.test"], since=SystemClock().now().replace(year=2000))
        entry = listed["unknown@dest.test"]
        assert entry.reply == Reply(550, "5.1.1", "No such user here") and entry.item_id == first.id

        # The next message to it alone fails at once: its MX sees no connection at all.
        dest.recorder.reset()
        send_mail("Alone", "Body.\n", "sender@origin.test", ["unknown@dest.test"])
        work_once()
        assert dest.connections == 0 and only_kept_failed(get_store())
        assert [f["recipient"] for f in received.of("failed")] == ["unknown@dest.test", "unknown@dest.test"]
        assert received.of("failed")[1]["reply"].code is None

        # The domain in another case is the same address; the other recipient is delivered as usual.
        dest.recorder.reset()
        origin.recorder.reset()
        received.events.clear()
        send_mail("Second", "Body.\n", "sender@origin.test", ["unknown@DEST.test", "known@dest.test"])
        (second,) = [item for item in get_store().list() if not item.kept]
        work_once()
        assert dest.connections == 1 and dest.commands.count("RCPT") == 1  # known@dest.test only
        assert [m.rcpt_tos for m in dest.messages] == [["known@dest.test"]]
        (failed,) = received.of("failed")
        assert failed["recipient"] == "unknown@DEST.test" and failed["item_id"] == second.id
        reply = failed["reply"]
        assert reply.code is None and reply.status == "5.1.1"
        since = entry.since.strftime("%Y-%m-%d %H:%M:%S UTC")
        assert reply.text == (
            f"suppressed since {since}: the address is on the suppression list after 550 5.1.1 No such user here"
        )
        history = DeliveryRecord.objects.using(history_alias(get_store()))
        assert history.get(item_id=second.id, recipient="unknown@DEST.test").state == "failed"
        (report,) = origin.messages  # the DSN, to the sender's own MX
        status = email.message_from_bytes(report.data).get_payload()[1].get_payload()[1]
        assert status["Final-Recipient"] == "rfc822; unknown@DEST.test" and status["Status"] == "5.1.1"
        assert "suppressed since" in status["Diagnostic-Code"]
        # listed once, by the first failure: the second did not list it again
        again = get_store().suppressed(["unknown@dest.test"], since=entry.since)
        assert again == {"unknown@dest.test": entry}

        # Removed in the admin (the mailbox exists now), the next message is tried and delivered.
        admin = User.objects.create_superuser("admin", "admin@site.test", "x")
        client = Client(enforce_csrf_checks=True)
        client.force_login(admin)
        token = str(client.get(reverse(SUPPRESSION_LIST)).context["csrf_token"])
        removed = client.post(
            reverse(SUPPRESSION_REMOVE),
            {"address": ["unknown@dest.test"], "confirm": "yes", "csrfmiddlewaretoken": token},
        )
        assert removed.status_code == 302
        assert get_store().suppressed(["unknown@dest.test"], since=entry.since) == {}
        dest.handler.rcpt_replies.clear()
        dest.recorder.reset()
        send_mail("Third", "Body.\n", "sender@origin.test", ["unknown@dest.test"])
        work_once()
        assert dest.connections == 1 and [m.rcpt_tos for m in dest.messages] == [["unknown@dest.test"]]


def test_with_suppression_none_nothing_is_listed_or_skipped(
    two_mx: TwoMx, store_config: dict[str, Any], received: SignalRecorder
) -> None:
    with override_settings(MAILQUEUE=two_mx.world.mailqueue(store_config, SUPPRESSION=None, DSN=False)):
        store = get_store()
        store.suppress([Suppression("known@dest.test", Reply(550, "5.1.1", "gone"), SystemClock().now())])
        send_mail("First", "Body.\n", "sender@origin.test", ["unknown@dest.test", "known@dest.test"])
        work_once()
        assert store.count_suppressed(since=SystemClock().now().replace(year=2000)) == 1  # only the one by hand
    assert [m.rcpt_tos for m in two_mx.dest.messages] == [["known@dest.test"]]


# --- one look-up per claimed batch -------------------------------------------------------------------

ITEMS, RECIPIENTS = 30, 3


def send_batch(two_mx: TwoMx) -> None:
    """30 messages of 3 recipients each; the first of every message listed already."""
    store = get_store()
    now = SystemClock().now()
    store.suppress([Suppression(f"gone{i}@dest.test", Reply(550, "5.1.1", "gone"), now) for i in range(ITEMS)])
    for i in range(ITEMS):
        send_mail(
            "Batch", "Body.\n", "sender@origin.test", [f"gone{i}@dest.test", f"a{i}@dest.test", f"b{i}@dest.test"]
        )


def check_batch(two_mx: TwoMx, received: SignalRecorder) -> None:
    assert len(received.of("failed")) == ITEMS and len(received.of("delivered")) == ITEMS * (RECIPIENTS - 1)
    delivered = {r for m in two_mx.dest.messages for r in m.rcpt_tos}
    assert not any(r.startswith("gone") for r in delivered) and len(delivered) == ITEMS * (RECIPIENTS - 1)


@contextlib.contextmanager
def statements_on(table: str) -> Iterator[list[str]]:
    """The SQL statements naming `table` that any database connection opened meanwhile runs (the store's
    own threads open theirs for the worker)."""
    seen: list[str] = []

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if table in sql:
            seen.append(sql)
        return execute(sql, params, many, context)

    def opened(sender: Any, connection: Any, **kwargs: Any) -> None:
        connection.execute_wrappers.append(wrapper)

    connection_created.connect(opened, weak=False, dispatch_uid="test-statements-on")
    try:
        yield seen
    finally:
        connection_created.disconnect(dispatch_uid="test-statements-on")


@pytest.mark.parametrize("database", ["sqlite", "postgres"])
def test_the_orm_store_looks_a_batch_up_in_one_statement(
    two_mx: TwoMx, received: SignalRecorder, database: str, request: pytest.FixtureRequest
) -> None:
    alias = "default" if database == "sqlite" else request.getfixturevalue("pg_alias")
    store = {"BACKEND": "django_mailqueue.stores.orm.OrmStore", "OPTIONS": {"database": alias}}
    with override_settings(MAILQUEUE=two_mx.world.mailqueue(store, DSN=False, CONCURRENCY=100)):
        send_batch(two_mx)
        with statements_on("mailqueue_suppression") as statements:
            work_once()
    check_batch(two_mx, received)
    assert len(statements) == 1 and statements[0].lstrip().upper().startswith("SELECT"), statements


@contextlib.contextmanager
def commands_on(url: str, key: str) -> Iterator[list[str]]:
    """The commands naming `key` the Redis server runs meanwhile, as MONITOR sees them at the server."""
    seen: list[str] = []
    stop = f"mqtest-monitor-stop-{uuid.uuid4().hex}"
    client = redis.Redis.from_url(url)

    def watch(monitor: Any) -> None:
        while True:
            command = monitor.next_command()["command"]
            if stop in command:
                return
            if key in command.split():
                seen.append(command)

    with client.monitor() as monitor:
        watcher = threading.Thread(target=watch, args=(monitor,), daemon=True)
        watcher.start()
        try:
            yield seen
        finally:
            client.echo(stop)
            watcher.join(30)
    client.close()


def test_the_redis_store_looks_a_batch_up_in_one_command(
    two_mx: TwoMx, received: SignalRecorder, redis_store_config: dict[str, Any], redis_url: str
) -> None:
    prefix = redis_store_config["OPTIONS"]["key_prefix"]
    with override_settings(MAILQUEUE=two_mx.world.mailqueue(redis_store_config, DSN=False, CONCURRENCY=100)):
        send_batch(two_mx)
        with commands_on(redis_url, f"{prefix}suppressed") as commands:
            work_once()
    # the completions' scripts name the list's keys too (they would list a failed address); the reads:
    reads = [c for c in commands if not c.startswith(("EVALSHA", "EVAL"))]
    assert len(reads) == 1 and reads[0].startswith("HMGET"), reads
    assert len(reads[0].split()) == 2 + ITEMS * RECIPIENTS  # every recipient of the batch, in that one
    check_batch(two_mx, received)
