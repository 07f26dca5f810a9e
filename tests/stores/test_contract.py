"""The store contract suite, run against MemoryStore, OrmStore on SQLite (its hand-written statements and the
ORM's) and OrmStore on PostgreSQL (both too)."""

from __future__ import annotations

import pytest

from django_mailqueue.stores.base import QueueStore
from django_mailqueue.stores.memory import MemoryStore
from django_mailqueue.stores.orm import OrmStore
from django_mailqueue.testing import QueueStoreContract
from django_mailqueue.testing.contract import StoreFactory
from tests.support.databases import DATABASES


class TestMemoryStore(QueueStoreContract):
    @pytest.fixture
    def make_store(self) -> StoreFactory:
        def make(max_items: int | None = None) -> QueueStore:
            return MemoryStore(max_items=max_items)

        return make


@pytest.mark.django_db(transaction=True)
class TestOrmStoreSqlite(QueueStoreContract):
    race_items = 150
    #: False: the ORM's own statements, the path of databases other than SQLite and PostgreSQL
    hand_written_sql = True

    @pytest.fixture
    def make_store(self) -> StoreFactory:
        def make(max_items: int | None = None) -> QueueStore:
            store = OrmStore({"database": "default"}, max_items=max_items)
            store.hand_written_sql = self.hand_written_sql
            return store

        return make


class TestOrmStorePortableSqlite(TestOrmStoreSqlite):
    """The worker's statements as the ORM makes them (what a database other than SQLite and
    PostgreSQL runs), on SQLite."""

    hand_written_sql = False

    def test_concurrent_claimers_never_share_an_item(self, store: QueueStore) -> None:
        pytest.skip("the ORM's claim (SELECT … FOR UPDATE, then UPDATE) needs row locks, which SQLite lacks: "
                    "its readers cannot all upgrade to writers; the PostgreSQL run of this path races for real")


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True, databases=DATABASES)
class TestOrmStorePostgres(QueueStoreContract):
    hand_written_sql = True

    @pytest.fixture
    def make_store(self, pg_alias: str) -> StoreFactory:
        def make(max_items: int | None = None) -> QueueStore:
            store = OrmStore({"database": pg_alias}, max_items=max_items)
            store.hand_written_sql = self.hand_written_sql
            return store

        return make


class TestOrmStorePortablePostgres(TestOrmStorePostgres):
    """The ORM's statements (select_for_update with skip_locked) on PostgreSQL."""

    hand_written_sql = False
