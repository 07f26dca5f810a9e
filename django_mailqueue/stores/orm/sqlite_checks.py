"""The ORM store's system check on SQLite: `mailqueue.I010`, the settings that let many writers share its lock."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import django
from django.core import checks
from django.core.checks import CheckMessage

from .. import configured_store_class

if TYPE_CHECKING:
    from .store import OrmStore

#: Seconds a connection waits for SQLite's write lock that this check recommends (Django's default: 5).
TIMEOUT = 20
#: Django passes `init_command` and `transaction_mode` to SQLite from 5.1 on.
OPTIONS_FROM = (5, 1)


def recommended_options(options: Mapping[str, Any], *, django_version: tuple[int, int]) -> dict[str, Any]:
    """What `DATABASES[…]["OPTIONS"]` of a SQLite database lacks of the comfortable settings: a `timeout` of
    `TIMEOUT` s, and on Django 5.1+ `journal_mode=WAL` in `init_command` and `transaction_mode` IMMEDIATE.
    Each value as the OPTIONS should then hold it (an `init_command` keeps what it had)."""
    missing: dict[str, Any] = {}
    timeout = options.get("timeout", 5)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < TIMEOUT:
        missing["timeout"] = TIMEOUT
    if django_version < OPTIONS_FROM:
        return missing
    init_command = str(options.get("init_command") or "")
    if "journal_mode=wal" not in init_command.lower().replace(" ", ""):
        missing["init_command"] = "; ".join(filter(None, [init_command.strip().rstrip(";"), "PRAGMA journal_mode=WAL"]))
    if str(options.get("transaction_mode") or "").upper() != "IMMEDIATE":
        missing["transaction_mode"] = "IMMEDIATE"
    return missing


def _loaded_orm_store() -> type[OrmStore]:
    """`OrmStore`, when its module is loaded. `configured_store_class` imports the configured class before it
    calls this: a configured OrmStore (or a subclass) has loaded the module, and when it is not loaded no OrmStore
    is configured — importing it here would only lengthen every other store's worker start."""
    store = sys.modules.get(f"{__package__}.store")
    if store is None:
        raise ImportError("the configured store is not an OrmStore")
    found: type[OrmStore] = store.OrmStore
    return found


def sqlite_option_infos() -> list[CheckMessage]:
    """I010 when the configured store is an OrmStore on a SQLite database without those settings."""
    from django.conf import settings as django_settings
    from django.db import connections

    found = configured_store_class(_loaded_orm_store)
    if found is None:
        return []
    settings, _ = found
    alias = str(settings.store.options.get("database", "default"))
    if alias not in django_settings.DATABASES or connections[alias].vendor != "sqlite":
        return []
    options = django_settings.DATABASES[alias].get("OPTIONS")
    if not isinstance(options, Mapping):
        options = {}
    missing = recommended_options(options, django_version=(django.VERSION[0], django.VERSION[1]))
    if not missing:
        return []
    wal = "init_command" in missing or django.VERSION[:2] < OPTIONS_FROM
    what = [
        f"a timeout of {TIMEOUT} s or more (Django's default: 5 s)" if "timeout" in missing else "",
        "the WAL journal (readers and the writer no longer block each other)" if wal else "",
        "transaction_mode IMMEDIATE (a transaction takes the lock when it begins)"
        if "transaction_mode" in missing
        else "",
    ]
    hint = f"Add to DATABASES[{alias!r}]['OPTIONS']: {', '.join(f'{k!r}: {v!r}' for k, v in missing.items())}"
    if django.VERSION[:2] < OPTIONS_FROM:
        hint += "; and run PRAGMA journal_mode=WAL once on the database file (it stays with the file)"
    return [
        checks.Info(
            f"The queue's database {alias!r} is SQLite, where send_mail(), the workers and the admin share one "
            f"write lock; these settings make that comfortable under load: {'; '.join(filter(None, what))}.",
            hint=f'{hint}. See docs/guide.md, "SQLite".',
            id="mailqueue.I010",
        )
    ]
