"""The store contract suite, run against MemoryStore, OrmStore on SQLite (its own dialect and the portable
one) and OrmStore on PostgreSQL (both too, and its own statements prepared)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings

from django_mailqueue.core.items import Completion, RecipientState
from django_mailqueue.models import QueuedItem, QueuedMessage, QueuedRecipient
from django_mailqueue.stores.base import QueueStore
from django_mailqueue.stores.memory import MemoryStore
from django_mailqueue.stores.orm import OrmStore
from django_mailqueue.stores.orm.portable import PortableDialect
from django_mailqueue.testing import QueueStoreContract
from django_mailqueue.testing.contract import LATER, NO, OK, T0, StoreFactory, at, new_item, outcome
from tests.support.databases import DATABASES, PREPARED


class TestMemoryStore(QueueStoreContract):
    @pytest.fixture
    def make_store(self) -> StoreFactory:
        def make(max_items: int | None = None) -> QueueStore:
            return MemoryStore(max_items=max_items)

        return make


class ItemRowsLeaveTogether:
    """The ORM store's tables have no foreign keys in the database (they would cost a trigger and a row lock
    a message added): the store itself keeps an item's recipients and message with it, and drops them with it."""

    def rows(self, store: QueueStore) -> tuple[int, int, int]:
        alias = store.alias  # type: ignore[attr-defined]
        return (
            QueuedItem.objects.using(alias).count(),
            QueuedRecipient.objects.using(alias).count(),
            QueuedMessage.objects.using(alias).count(),
        )

    def test_an_item_leaves_with_its_recipients_and_message(self, store: QueueStore) -> None:
        delivered, failed, deferred, cancelled, kept = store.add_many(
            [new_item(["a@x.org", "b@x.org"]), new_item(), new_item(), new_item(), new_item(["c@x.org"])], now=T0
        )
        assert self.rows(store) == (5, 6, 5)
        claimed = {item.id: item for item in store.claim(owner="w1", now=T0, lease_expires=at(60), limit=5)}
        for item, state, reply in [
            (delivered, RecipientState.DELIVERED, OK),
            (failed, RecipientState.FAILED, NO),
            (deferred, RecipientState.PENDING, LATER),
        ]:
            store.complete(
                item.id,
                owner="w1",
                revision=claimed[item.id].revision,
                completion=Completion(
                    tuple(outcome(r.address, state, reply) for r in item.recipients), next_attempt=at(300)
                ),
            )
        assert store.cancel(cancelled.id) is not None
        assert self.rows(store) == (2, 2, 2)  # the deferred item and the one never completed
        QueuedItem.objects.using(store.alias).filter(id=kept.id).delete()  # type: ignore[attr-defined] # as the admin
        assert self.rows(store) == (1, 1, 1)
        assert store.get(deferred.id) is not None and store.read_message(deferred.id) is not None


#: Why the portable dialect's races are run on PostgreSQL only.
NO_ROW_LOCKS = (
    "the portable dialect (SELECT … FOR UPDATE, then UPDATE) needs row locks, which SQLite lacks: "
    "its readers cannot all upgrade to writers; the PostgreSQL run of this path races for real"
)


class PortableOrmStore(OrmStore):
    """The ORM store in its portable dialect (what MySQL, MariaDB, Oracle … speak) on any database."""

    dialect_class = PortableDialect


@pytest.mark.django_db(transaction=True)
class TestOrmStoreSqlite(ItemRowsLeaveTogether, QueueStoreContract):
    race_items = 150
    #: OrmStore: the database's own dialect; PortableOrmStore: the portable one
    store_class: type[OrmStore] = OrmStore

    @pytest.fixture
    def make_store(self) -> StoreFactory:
        def make(max_items: int | None = None) -> QueueStore:
            return self.store_class({"database": "default"}, max_items=max_items)

        return make


class TestOrmStorePortableSqlite(TestOrmStoreSqlite):
    """The portable dialect (every statement the ORM's) on SQLite."""

    store_class = PortableOrmStore

    def test_concurrent_claimers_never_share_an_item(self, store: QueueStore) -> None:
        pytest.skip(NO_ROW_LOCKS)

    def test_concurrent_takers_never_get_more_than_the_bucket_holds(self, store: QueueStore) -> None:
        pytest.skip(NO_ROW_LOCKS)

    def test_concurrent_takers_over_time_stay_within_rate_and_burst(self, store: QueueStore) -> None:
        pytest.skip(NO_ROW_LOCKS)

    def test_concurrent_takers_never_pass_the_window(self, store: QueueStore) -> None:
        pytest.skip(NO_ROW_LOCKS)

    def test_concurrent_suspensions_count_every_strike(self, store: QueueStore) -> None:
        pytest.skip(NO_ROW_LOCKS)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True, databases=DATABASES)
class TestOrmStorePostgres(ItemRowsLeaveTogether, QueueStoreContract):
    store_class: type[OrmStore] = OrmStore

    @pytest.fixture
    def make_store(self, pg_alias: str) -> StoreFactory:
        def make(max_items: int | None = None) -> QueueStore:
            return self.store_class({"database": pg_alias}, max_items=max_items)

        return make


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True, databases=[*DATABASES, *PREPARED])
class TestOrmStorePreparedPostgres(QueueStoreContract):
    """The hand-written statements prepared on the server (a connection with Django's
    `OPTIONS["prepare_threshold"]`; 0 here: every statement from its first run)."""

    @pytest.fixture
    def make_store(self, pg_alias: str) -> StoreFactory:
        def make(max_items: int | None = None) -> QueueStore:
            return OrmStore({"database": "pg_prepared"}, max_items=max_items)

        return make

    def test_the_statements_are_prepared(self, store: QueueStore) -> None:
        from django.db import connections

        store.add_many([new_item(), new_item()], now=T0)
        store.add(new_item(), now=T0)
        claimed = store.claim(owner="worker-1", now=T0, lease_expires=T0 + timedelta(seconds=60), limit=5)
        assert len(claimed) == 3
        assert len(store.read_messages([item.id for item in claimed])) == 3
        with connections["pg_prepared"].cursor() as cursor:
            cursor.execute("SELECT statement FROM pg_prepared_statements WHERE NOT from_sql")
            prepared = " ".join(row[0] for row in cursor.fetchall())
        assert "INSERT INTO mailqueue_item" in prepared
        assert "octet_length(m.data)" in prepared  # the message read


class TestOrmStorePortablePostgres(TestOrmStorePostgres):
    """The portable dialect (select_for_update with skip_locked) on PostgreSQL."""

    store_class = PortableOrmStore


@pytest.mark.skipif("mysql" not in settings.DATABASES, reason="MAILQUEUE_TEST_MYSQL names no MariaDB or MySQL")
@pytest.mark.django_db(transaction=True, databases=["default", "mysql"])
class TestOrmStoreMysql(ItemRowsLeaveTogether, QueueStoreContract):
    """The portable dialect on MariaDB or MySQL, the databases it is for (run when MAILQUEUE_TEST_MYSQL is set)."""

    @pytest.fixture
    def make_store(self) -> StoreFactory:
        def make(max_items: int | None = None) -> QueueStore:
            store = OrmStore({"database": "mysql"}, max_items=max_items)
            assert isinstance(store.dialect, PortableDialect)
            return store

        return make
