"""The ORM store's dialects: one chosen per database alias by its vendor, and the hand-written
statements loaded from the package's `.sql` files."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pytest

from django_mailqueue.stores.orm import OrmStore
from django_mailqueue.stores.orm.portable import PortableDialect
from django_mailqueue.stores.orm.postgresql import PostgresDialect
from django_mailqueue.stores.orm.sqlite import SqliteDialect
from django_mailqueue.stores.orm.statements import statement
from django_mailqueue.stores.orm.store import dialect_for
from tests.support.databases import DATABASES

SQL = resources.files("django_mailqueue.stores.orm").joinpath("sql")
#: The parts a dialect fills in at each use; every other `{…}` must be filled in when the file is loaded.
FILLED_AT_USE = {"{rows}", "{lane}", "{marks}"}


def statement_files() -> list[tuple[str, str]]:
    return sorted(
        (dialect.name, path.name.removesuffix(".sql"))
        for dialect in SQL.iterdir()
        if dialect.is_dir()
        for path in dialect.iterdir()
        if path.name.endswith(".sql")
    )


def test_a_database_speaks_the_dialect_of_its_vendor() -> None:
    assert dialect_for("sqlite") is SqliteDialect
    assert dialect_for("postgresql") is PostgresDialect
    for other in ("mysql", "oracle", "microsoft"):
        assert dialect_for(other) is PortableDialect
    assert type(OrmStore({"database": "default"}).dialect) is SqliteDialect


@pytest.mark.postgres
@pytest.mark.django_db(databases=DATABASES)
def test_a_postgresql_alias_speaks_postgresql(pg_alias: str) -> None:
    assert type(OrmStore({"database": pg_alias}).dialect) is PostgresDialect


def test_a_subclass_may_name_the_dialect_for_every_database() -> None:
    class Portable(OrmStore):
        dialect_class = PortableDialect

    store = Portable({"database": "default"})
    assert type(store.dialect) is PortableDialect and not store.supports_wakeup


@pytest.mark.parametrize(("dialect", "name"), statement_files())
def test_every_statement_file_loads_with_only_the_parts_filled_at_use_left(dialect: str, name: str) -> None:
    sql = statement(dialect, name)
    assert sql and "--" not in sql and "\n" not in sql
    assert set(re.findall(r"\{[a-z_]+\}", sql)) <= FILLED_AT_USE


@pytest.mark.parametrize(("dialect", "name"), statement_files())
def test_every_statement_file_is_used_by_its_dialect(dialect: str, name: str) -> None:
    here = Path(str(SQL)).parent
    source = (here / f"{dialect}.py").read_text() + (here / "base.py").read_text()
    if dialect == "postgresql":  # the search's statements are picked per term there
        source += (here / "pg_search.py").read_text()
    used = name.removesuffix("_row") if name.endswith("_row") else name
    assert f'"{used}"' in source, f"sql/{dialect}/{name}.sql is not loaded by {dialect}.py"


@pytest.mark.django_db(transaction=True)
def test_a_renewal_on_sqlite_is_one_statement_holding_the_write_lock_for_no_longer() -> None:
    """A worker stopped between a renewal's statements held SQLite's write lock (every writer waited) or, on
    PostgreSQL, the rows (tests/stores/test_postgres_races.py): a renewal is one statement, committed by itself."""
    import uuid
    from datetime import timedelta

    from django.db import connections

    from django_mailqueue.testing.contract import T0, new_item

    store = OrmStore({"database": "default"})
    store.add(new_item(), now=T0)
    (claimed,) = store.claim(owner="w1", now=T0, lease_expires=T0 + timedelta(seconds=60))
    statements: list[str] = []

    def capture(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        statements.append(sql)
        return execute(sql, params, many, context)

    later = T0 + timedelta(seconds=90)
    with connections["default"].execute_wrapper(capture):
        assert store.renew([claimed.id, uuid.uuid4()], owner="w1", lease_expires=later) == [claimed.id]
        assert store.renew([claimed.id], owner="w2", lease_expires=later) == []
    assert len(statements) == 2 and all(sql.startswith("UPDATE") for sql in statements), statements
    held = store.get(claimed.id)
    assert held is not None and held.lease_expires == later and held.owner == "w1"
