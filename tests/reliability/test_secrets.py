"""Secrets forced into failures never show: logs, exceptions, `error` signals, admin pages, Django's error reports.

Three secrets, each made to fail every way it can (a DKIM private key: test_secrets_dkim.py):

- a relay's PASSWORD: refused (a 535 that echoes the credentials), AUTH
  answered 421 with the line echoed, a TLS handshake that fails, an
  unreachable host — through a real worker, store and history, then the
  admin pages rendered over them;
- a Redis URL's password: a wrong password (a private Redis with
  `requirepass`), an unreachable port, TLS to a server that has none; and
  through Redis Sentinel (a primary, a replica and three sentinels with
  passwords), a wrong `sentinel_password`, a wrong data `password`, sentinels
  out of reach — through the store, a worker and `mailqueue_status`;
- a PostgreSQL password (in the URL the settings are built from): a wrong
  password (a private cluster with scram auth) and an unreachable host,
  through `mailqueue_work --once` and `mailqueue_status` processes.

Each check looks at every text an operator or a log collector sees: caplog
at DEBUG, `str` / `repr` / the whole `traceback.format_exception` chain of
each exception, every `error` signal's payload, the store's and history's
reply texts, the admin's pages, and `ExceptionReporter.get_traceback_text()`.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.views.debug import ExceptionReporter, SafeExceptionReporterFilter

from django_mailqueue.conf import get_settings
from django_mailqueue.core.items import NewItem
from django_mailqueue.exceptions import QueueError
from django_mailqueue.history import History
from django_mailqueue.stores.memory import MemoryStore
from django_mailqueue.stores.orm import OrmStore
from django_mailqueue.worker import Worker
from tests.reliability.secret_texts import (
    RELAY_USER,
    ErrorSignals,
    admin_pages,
    aware_now,
    exception_texts,
    leaks,
    report_text,
)
from tests.reliability.servers import PrivatePostgres, PrivateRedis, free_port
from tests.support.smtp_server import BROKEN_TLS, DEFAULT_EHLO, ServerPool, auth_echo, smtp_servers  # noqa: F401

RELAY_PASSWORD = "Relay-Pw-5ecret-0f9a"  # noqa: S105
REDIS_PASSWORD = "Redis-Pw-5ecret-77b2"  # noqa: S105
PG_PASSWORD = "Pg-Pw-5ecret-3c1e"  # noqa: S105
ROOT = Path(__file__).resolve().parents[2]

EHLO_AUTH = DEFAULT_EHLO.replace(b"250 SMTPUTF8", b"250-SMTPUTF8\r\n250 AUTH PLAIN LOGIN")
EHLO_TLS = DEFAULT_EHLO.replace(b"250 SMTPUTF8", b"250-SMTPUTF8\r\n250-STARTTLS\r\n250 AUTH PLAIN LOGIN")


# --- the relay password -------------------------------------------------------------------------

RELAY_SCENARIOS = {
    "wrong password, echoed in the 535": ({"EHLO": EHLO_AUTH, "AUTH": auth_echo}, "none", True),
    "AUTH answered 421 with the line echoed": (
        {"EHLO": EHLO_AUTH, "AUTH": lambda line: b"421 4.7.0 closing, you sent " + line + b"\r\n"},
        "none",
        True,
    ),
    "TLS handshake fails": ({"EHLO": EHLO_TLS, "STARTTLS": BROKEN_TLS}, "starttls", True),
    "host unreachable": ({}, "none", False),
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("scenario", RELAY_SCENARIOS.values(), ids=RELAY_SCENARIOS.keys())
def test_a_relay_password_never_shows(
    scenario: tuple[dict[str, Any], str, bool],
    smtp_servers: ServerPool,  # noqa: F811
    settings: Any,
    caplog: pytest.LogCaptureFixture,
    error_signals: ErrorSignals,
) -> None:
    replies, tls, listening = scenario
    caplog.set_level(logging.DEBUG)
    host = "127.0.0.2" if listening else "127.0.0.9"
    if listening:
        smtp_servers.scripted(host, replies=replies)
    settings.MAILQUEUE = {
        "HOSTNAME": "mq.test.example",
        "STORE": {"BACKEND": "django_mailqueue.stores.orm.OrmStore", "OPTIONS": {"database": "default"}},
        "ROUTES": {
            "*": {
                "HOST": host,
                "PORT": smtp_servers.port,
                "USERNAME": RELAY_USER,
                "PASSWORD": RELAY_PASSWORD,
                "TLS": tls,
            }
        },
        "TIMEOUTS": {
            "CONNECT": 2,
            "GREETING": 3,
            "MAIL": 3,
            "RCPT": 3,
            "DATA": 3,
            "DATA_BLOCK": 3,
            "DATA_END": 3,
            "SESSION": 15,
        },
    }
    get_settings.cache_clear()
    store = OrmStore({"database": "default"})
    item = store.add(
        NewItem("sender@origin.test", ("rcpt@corp.test",), b"Subject: hi\r\n\r\nhello\r\n"), now=aware_now()
    )
    worker = Worker(store=store, settings=get_settings(), once=True, history=History("default"))

    import asyncio

    stats = asyncio.run(worker.run())

    assert stats.deferred == 1, stats
    kept = store.get(item.id)
    assert kept is not None
    texts = [caplog.text, *(r.getMessage() for r in caplog.records), repr(kept), *error_signals.payloads]
    from django_mailqueue.models import DeliveryRecord

    texts += [repr(list(DeliveryRecord.objects.values()))]
    texts += admin_pages(item.id)
    assert leaks(RELAY_PASSWORD, *texts) == []


# --- Django's error reports ---------------------------------------------------------------------


def test_django_masks_a_nested_relay_password_in_its_error_reports(settings: Any) -> None:
    settings.MAILQUEUE = {
        "ROUTES": {
            "corp.example": {
                "HOST": "relay.corp.example",
                "USERNAME": RELAY_USER,
                "PASSWORD": RELAY_PASSWORD,
                "TLS": "starttls",
            }
        }
    }
    cleansed = SafeExceptionReporterFilter().get_safe_settings()["MAILQUEUE"]
    assert cleansed["ROUTES"]["corp.example"]["PASSWORD"] != RELAY_PASSWORD
    try:
        raise QueueError("STORE_UNAVAILABLE", "something failed")
    except QueueError as exc:
        assert leaks(RELAY_PASSWORD, report_text(exc)) == []


def report_text_with(filter_class: type[SafeExceptionReporterFilter], exc: BaseException) -> str:
    reporter = ExceptionReporter(None, type(exc), exc, exc.__traceback__)
    reporter.filter = filter_class()
    return reporter.get_traceback_text()


def redis_store_settings(url: str, **options: Any) -> dict[str, Any]:
    return {
        "STORE": {
            "BACKEND": "django_mailqueue.stores.redis.RedisStore",
            "OPTIONS": {"url": url, "key_prefix": "rel:", **options},
        }
    }


def test_django_alone_prints_a_redis_url_password_so_the_check_warns(settings: Any) -> None:
    """The finding: Django hides settings by name, and `url` is not a secret-looking name."""
    from django_mailqueue.checks import check_url_password_in_error_reports

    url = f"redis://:{REDIS_PASSWORD}@127.0.0.1:{free_port()}/0"
    settings.MAILQUEUE = redis_store_settings(url)
    try:
        raise QueueError("STORE_UNAVAILABLE", "something failed")
    except QueueError as exc:
        assert leaks(REDIS_PASSWORD, report_text_with(SafeExceptionReporterFilter, exc)) != []
    assert [m.id for m in check_url_password_in_error_reports()] == ["mailqueue.W002"]
    settings.DEFAULT_EXCEPTION_REPORTER_FILTER = "django_mailqueue.debug.SafeExceptionReporterFilter"
    assert check_url_password_in_error_reports() == []


def test_a_redis_url_password_is_masked_in_error_reports_by_the_shipped_filter(settings: Any) -> None:
    from django_mailqueue.debug import SafeExceptionReporterFilter as MailqueueFilter

    url = f"redis://someone:{REDIS_PASSWORD}@127.0.0.1:{free_port()}/0"
    settings.MAILQUEUE = redis_store_settings(url)
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "queue": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": url},
    }
    try:
        raise QueueError("STORE_UNAVAILABLE", f"something failed at {url.split('@')[1]}")
    except QueueError as exc:
        text = report_text_with(MailqueueFilter, exc)  # the frame above holds `url` as a local, too
    assert leaks(REDIS_PASSWORD, text) == []
    assert "redis://someone:********************@127.0.0.1" in text  # masked, not dropped: the place stays


def test_a_redis_password_given_as_its_own_option_is_hidden_by_django(settings: Any) -> None:
    from django_mailqueue.checks import check_url_password_in_error_reports

    settings.MAILQUEUE = redis_store_settings(f"redis://127.0.0.1:{free_port()}/0", password=REDIS_PASSWORD)
    try:
        raise QueueError("STORE_UNAVAILABLE", "something failed")
    except QueueError as exc:
        assert leaks(REDIS_PASSWORD, report_text_with(SafeExceptionReporterFilter, exc)) == []
    assert check_url_password_in_error_reports() == []


# --- the Redis URL --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def secret_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path_factory.mktemp("secret-redis"), "rEaL-pAsSwOrD-x")
    server.start()
    yield server
    server.kill()


def redis_urls(server: PrivateRedis) -> dict[str, str]:
    return {
        "wrong password": f"redis://:{REDIS_PASSWORD}@127.0.0.1:{server.port}/0",
        "wrong user and password": f"redis://someone:{REDIS_PASSWORD}@127.0.0.1:{server.port}/0",
        "unreachable": f"redis://:{REDIS_PASSWORD}@127.0.0.1:{free_port()}/0",
        "TLS to a server without TLS": f"rediss://:{REDIS_PASSWORD}@127.0.0.1:{server.port}/0",
    }


@pytest.mark.parametrize(
    "case", ["wrong password", "wrong user and password", "unreachable", "TLS to a server without TLS"]
)
def test_a_redis_url_password_never_shows(
    case: str, secret_redis: PrivateRedis, settings: Any, caplog: pytest.LogCaptureFixture, error_signals: ErrorSignals
) -> None:
    from django_mailqueue.stores.redis import RedisStore

    caplog.set_level(logging.DEBUG)
    url = redis_urls(secret_redis)[case]
    store = RedisStore({"url": url, "key_prefix": "rel-secret:", "socket_timeout": 2})
    texts: list[str] = [repr(store), str(store)]
    for call in (
        lambda: store.count(),
        lambda: store.add(NewItem("a@o.test", ("b@d.test",), b"x\r\n"), now=aware_now()),
    ):
        with pytest.raises(QueueError) as failed:
            call()
        assert failed.value.code == "STORE_UNAVAILABLE", failed.value
        texts += exception_texts(failed.value)
    import asyncio

    get_settings.cache_clear()
    worker = Worker(store=store, settings=get_settings(), once=True, deliverer=_NoDelivery())
    asyncio.run(worker.run())
    assert error_signals.payloads, "the failed claim was not told on the error signal"
    store.close()
    texts += [caplog.text, *error_signals.payloads]
    assert leaks(REDIS_PASSWORD, *texts) == []


def test_the_password_option_reaches_redis_and_a_wrong_one_never_shows(
    secret_redis: PrivateRedis, caplog: pytest.LogCaptureFixture
) -> None:
    from django_mailqueue.stores.redis import RedisStore

    caplog.set_level(logging.DEBUG)
    url = f"redis://127.0.0.1:{secret_redis.port}/0"
    right = RedisStore({"url": url, "password": secret_redis.password, "key_prefix": "rel-pw-option:"})
    assert right.count() == 0  # authenticated
    right.close()
    wrong = RedisStore({"url": url, "password": REDIS_PASSWORD, "key_prefix": "rel-pw-option:", "socket_timeout": 2})
    with pytest.raises(QueueError) as refused:
        wrong.count()
    wrong.close()
    assert refused.value.code == "STORE_UNAVAILABLE"
    assert leaks(REDIS_PASSWORD, *exception_texts(refused.value), caplog.text, repr(wrong)) == []


# --- Redis Sentinel: the sentinels' password and the data nodes' ------------------------------------

SENTINEL_PASSWORD = "Sentinel-Pw-5ecret-d3a0"  # noqa: S105


@pytest.fixture(scope="module")
def secret_sentinels(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from tests.support.redis_sentinel import SentinelSetup

    directory = tmp_path_factory.mktemp("secret-sentinel")
    with SentinelSetup(directory, password="dAtA-pAsSwOrD-y", sentinel_password="sEnTiNeL-pAsSwOrD-z") as setup:
        yield setup


SENTINEL_CASES = {
    # what is wrong -> the options beside `sentinels` and `service_name`
    "wrong sentinel password": {"sentinel_password": SENTINEL_PASSWORD, "password": "dAtA-pAsSwOrD-y"},
    "wrong data password": {"sentinel_password": "sEnTiNeL-pAsSwOrD-z", "password": REDIS_PASSWORD},
    "sentinels unreachable": {"sentinel_password": SENTINEL_PASSWORD, "password": REDIS_PASSWORD, "down": True},
}


def _report_of_a_failure() -> str:
    """Django's error report with the current settings (a frame of its own: the test's locals hold the secrets)."""
    try:
        raise QueueError("STORE_UNAVAILABLE", "something failed")
    except QueueError as exc:
        return report_text_with(SafeExceptionReporterFilter, exc)


@pytest.mark.parametrize("case", SENTINEL_CASES.keys())
def test_sentinel_and_redis_passwords_never_show(
    case: str, secret_sentinels: Any, settings: Any, caplog: pytest.LogCaptureFixture, error_signals: ErrorSignals
) -> None:
    import asyncio

    from django.core.management import call_command

    from django_mailqueue.stores.redis import RedisStore

    caplog.set_level(logging.DEBUG)
    given = dict(SENTINEL_CASES[case])
    sentinels = [("127.0.0.1", free_port())] if given.pop("down", False) else None
    options = secret_sentinels.options(key_prefix="rel-secret-sentinel:", socket_timeout=2, failover_timeout=0.5)
    options.update(given)
    if sentinels:
        options["sentinels"] = sentinels
    store = RedisStore(options)
    texts: list[str] = [repr(store), str(store), store.place]
    for call in (
        lambda: store.count(),
        lambda: store.add(NewItem("a@o.test", ("b@d.test",), b"x\r\n"), now=aware_now()),
    ):
        with pytest.raises(QueueError) as failed:
            call()
        assert failed.value.code == "STORE_UNAVAILABLE", failed.value
        texts += exception_texts(failed.value)
    get_settings.cache_clear()
    worker = Worker(store=store, settings=get_settings(), once=True, deliverer=_NoDelivery(), close_store=True)
    asyncio.run(worker.run())
    assert error_signals.payloads, "the failed claim was not told on the error signal"
    store.close()
    settings.MAILQUEUE = {"STORE": {"BACKEND": "django_mailqueue.stores.redis.RedisStore", "OPTIONS": options}}
    get_settings.cache_clear()
    status = StringIO()
    try:
        call_command("mailqueue_status", stdout=status, stderr=status)
    except Exception as exc:  # noqa: BLE001 - whatever it raises is looked at
        texts += exception_texts(exc)
    texts.append(_report_of_a_failure())
    get_settings.cache_clear()
    texts += [status.getvalue(), caplog.text, *error_signals.payloads]
    assert leaks(SENTINEL_PASSWORD, *texts) == []
    assert leaks(REDIS_PASSWORD, *texts) == []


class _NoDelivery:
    async def deliver(self, *args: Any) -> Any:  # pragma: no cover - nothing is claimed
        raise AssertionError("nothing should be delivered")

    async def aclose(self) -> None:
        return None


# --- the PostgreSQL password ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def secret_postgres(request: pytest.FixtureRequest) -> Iterator[PrivatePostgres]:
    request.getfixturevalue("private_servers")
    cluster = PrivatePostgres("rEaL-pg-pAsSwOrD-y").start()
    yield cluster
    cluster.destroy()


@pytest.fixture(scope="module")
def private_servers() -> None:  # module scope for secret_postgres; the conftest's is per test
    import shutil

    from tests.support.services import skip_or_fail

    if shutil.which("initdb") is None:
        skip_or_fail("initdb is not installed")


@pytest.mark.parametrize("case", ["wrong password", "unreachable"])
def test_a_postgresql_password_never_shows(case: str, secret_postgres: PrivatePostgres, tmp_path: Path) -> None:
    port = secret_postgres.port if case == "wrong password" else free_port()
    url = f"postgresql://postgres:{PG_PASSWORD}@127.0.0.1:{port}/postgres"
    mailqueue = {
        "STORE": {"BACKEND": "django_mailqueue.stores.orm.OrmStore", "OPTIONS": {"database": "faulty_pg"}},
        "HOSTNAME": "mq.test.example",
        "POLL_INTERVAL": 0.2,
    }
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.reliability.settings",
        "PYTHONPATH": str(ROOT),
        "MAILQUEUE_TEST_WORKER": "1",
        "MAILQUEUE_TEST_SQLITE": str(tmp_path / "x.sqlite3"),
        "MAILQUEUE_TEST_MAILQUEUE": json.dumps(mailqueue),
        "MAILQUEUE_REL_PG_URL": url,
    }
    outputs = []
    for command in (["mailqueue_work", "--once", "-v", "3"], ["mailqueue_status", "--json"]):
        done = subprocess.run(
            [sys.executable, "-m", "django", *command],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        outputs.append(done.stdout + done.stderr)
    work, status = outputs
    assert "STORE_UNAVAILABLE" in work, work[-2000:]  # the worker said the store failed...
    assert leaks(PG_PASSWORD, work, status) == []  # ...and never how to log in to it


def test_memory_store_has_nothing_to_hide() -> None:
    assert "PASSWORD" not in repr(MemoryStore().__dict__)
