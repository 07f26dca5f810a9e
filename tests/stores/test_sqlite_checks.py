"""`mailqueue.I010`: `manage.py check` recommends the SQLite settings that let the queue's writers share its lock."""

from __future__ import annotations

from io import StringIO
from typing import Any

import django
import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import override_settings

from django_mailqueue.stores.orm.sqlite_checks import recommended_options, sqlite_option_infos

COMFORTABLE = {"timeout": 20, "init_command": "PRAGMA journal_mode=WAL", "transaction_mode": "IMMEDIATE"}


def test_djangos_defaults_lack_every_recommended_option() -> None:
    assert recommended_options({}, django_version=(5, 2)) == COMFORTABLE
    assert recommended_options({}, django_version=(6, 0)) == COMFORTABLE


def test_before_django_5_1_only_the_timeout_can_be_set() -> None:
    assert recommended_options({}, django_version=(4, 2)) == {"timeout": 20}
    assert recommended_options({"timeout": 30}, django_version=(4, 2)) == {}


@pytest.mark.parametrize(
    ("options", "missing"),
    [
        (COMFORTABLE, {}),
        ({**COMFORTABLE, "timeout": 5}, {"timeout": 20}),
        ({**COMFORTABLE, "timeout": True}, {"timeout": 20}),
        ({**COMFORTABLE, "init_command": "PRAGMA journal_mode = wal;"}, {}),
        ({**COMFORTABLE, "transaction_mode": "immediate"}, {}),
        ({**COMFORTABLE, "transaction_mode": "DEFERRED"}, {"transaction_mode": "IMMEDIATE"}),
        # an init_command of the project's own is kept, WAL added to it
        (
            {**COMFORTABLE, "init_command": "PRAGMA foreign_keys=ON;"},
            {"init_command": "PRAGMA foreign_keys=ON; PRAGMA journal_mode=WAL"},
        ),
    ],
)
def test_what_is_missing(options: dict[str, Any], missing: dict[str, Any]) -> None:
    assert recommended_options(options, django_version=(5, 2)) == missing


def test_check_recommends_them_for_the_orm_store_on_sqlite(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(settings.DATABASES["default"], "OPTIONS", {})
    (info,) = sqlite_option_infos()
    assert info.id == "mailqueue.I010" and info.level == 20  # an Info: advice, not a fault
    assert "'default'" in info.msg and "WAL" in info.msg and "timeout of 20 s" in info.msg
    assert "'timeout': 20" in str(info.hint)
    # Django passes transaction_mode to SQLite from 5.1 on (CI's lowest-versions step runs Django 4.2)
    assert ("'transaction_mode': 'IMMEDIATE'" in str(info.hint)) is (django.VERSION >= (5, 1))
    out = StringIO()
    call_command("check", stdout=out, stderr=out)  # an Info does not fail the check
    assert "mailqueue.I010" in out.getvalue()


def test_no_advice_when_they_are_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(settings.DATABASES["default"], "OPTIONS", dict(COMFORTABLE))
    assert sqlite_option_infos() == []


def test_no_advice_for_other_stores() -> None:
    with override_settings(MAILQUEUE={"STORE": {"BACKEND": "django_mailqueue.stores.memory.MemoryStore"}}):
        assert sqlite_option_infos() == []
