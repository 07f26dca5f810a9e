"""The store contract suite, run against MemoryStore, OrmStore on SQLite and OrmStore on PostgreSQL."""

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

    @pytest.fixture
    def make_store(self) -> StoreFactory:
        def make(max_items: int | None = None) -> QueueStore:
            return OrmStore({"database": "default"}, max_items=max_items)

        return make


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True, databases=DATABASES)
class TestOrmStorePostgres(QueueStoreContract):
    @pytest.fixture
    def make_store(self, pg_alias: str) -> StoreFactory:
        def make(max_items: int | None = None) -> QueueStore:
            return OrmStore({"database": pg_alias}, max_items=max_items)

        return make
