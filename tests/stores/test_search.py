"""The queue's search on PostgreSQL: each term read from its index (an address start's btree range, the domain index,
the subject's trigram index where pg_trgm is allowed) first; rows tested otherwise."""

from __future__ import annotations

import logging

import pytest
from django.apps import apps
from django.db import connections
from django.db.migrations.state import ProjectState

from django_mailqueue.core.clock import FakeClock
from django_mailqueue.core.items import ItemOrder, ItemQuery, ItemState, matches
from django_mailqueue.stores.orm import OrmStore, queries
from django_mailqueue.stores.orm.pg_search import (
    ADDRESS_START_INDEX,
    ADDRESS_TRIGRAM_INDEX,
    TEXT_TRIGRAM_INDEX,
    TRIGRAM_INDEXES,
    WORD_INDEX,
    AddressStartIndex,
    DropAddressTrigramIndex,
    SubjectTrigramIndex,
    TrigramSearchIndexes,
    word_index_present,
)
from django_mailqueue.stores.orm.statements import statement
from django_mailqueue.testing.contract.support import T0, new_item
from tests.support.databases import DATABASES

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(databases=DATABASES)]

SEARCHES = (
    "ann.smith1@gmail.com", "ann.smith1", "ANN", "SMITH", "@gmail.com", "@rare.example", "invoice", "Invoice 4",
    "invoice @rare.example", "bob3@", "noreply@", "your", "zz9", "ab",
)  # fmt: skip


def fill(store: OrmStore) -> list:  # type: ignore[type-arg]
    items = [
        new_item([f"ann.smith{n}@gmail.com", f"bob{n}@{'rare' if n == 3 else 'mail'}.example"], subject=f"Invoice {n}")
        for n in range(12)
    ]
    items += [new_item(["carl@other.example"], sender="noreply@shop.example", subject="Your order")]
    return store.add_many(items, now=T0)


def test_the_migrations_made_the_subject_trigram_index_and_the_search_reads_it(pg_alias: str) -> None:
    store = OrmStore({"database": pg_alias})
    assert word_index_present(connections[pg_alias])
    added = fill(store)
    assert len(store.dialect.search_candidates("bob", 100) or []) == 12  # an address start: the btree's range
    assert store.dialect.search_candidates("@rare.example", 100) is not None
    assert len(store.dialect.search_candidates("invoice @rare.example", 100) or []) == 1  # each term's, intersected
    assert store.dialect.search_candidates("ab", 100) is None  # a word too short for a trigram: the rows are read
    assert store.dialect.search_candidates("@gmail.com", 5) is None  # more than the bound
    for search in SEARCHES:
        expected = {i.id for i in added if matches(i, ItemQuery(search=search))}
        assert {i.id for i in store.list(ItemQuery(search=search), limit=100)} == expected, search
        assert store.count(ItemQuery(search=search)) == len(expected), search


def test_a_search_matching_more_than_the_bound_is_tested_on_each_row(
    pg_alias: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = OrmStore({"database": pg_alias})
    added = fill(store)
    monkeypatch.setattr(queries, "SEARCH_BOUND", 2)
    now = FakeClock(T0).now()
    for search in SEARCHES:
        for query in (ItemQuery(search=search), ItemQuery(search=search, state=ItemState.DUE, now=now)):
            expected = [i.id for i in added if matches(i, query)]
            assert [i.id for i in store.list(query, limit=100)] == expected, search
            assert [i.id for i in store.list(query, offset=1, limit=3)] == expected[1:4], search


@pytest.mark.parametrize("probe", [1, 3, 8, 1000])
def test_a_search_tested_on_the_first_rows_gives_the_page_the_indexes_give(
    pg_alias: str, monkeypatch: pytest.MonkeyPatch, probe: int
) -> None:
    """The first `SEARCH_PROBE` rows hold the page, or too few and the indexes (or each row) are read: the same page
    either way, in every order, with a filter beside the search."""
    store = OrmStore({"database": pg_alias})
    added = fill(store)
    monkeypatch.setattr(queries, "SEARCH_PROBE", probe)
    now = FakeClock(T0).now()
    for search in SEARCHES:
        for query in (ItemQuery(search=search), ItemQuery(search=search, state=ItemState.DUE, now=now)):
            expected = [i.id for i in added if matches(i, query)]
            for order in ItemOrder:
                ordered = expected[::-1] if order in (ItemOrder.NEXT_ATTEMPT_DESC, ItemOrder.NEWEST) else expected
                assert [i.id for i in store.list(query, limit=100, order=order)] == ordered, (search, order)
                assert [i.id for i in store.list(query, offset=2, limit=2, order=order)] == ordered[2:4], search


def test_without_the_right_to_create_pg_trgm_the_migration_goes_on_and_search_reads_rows(
    pg_alias: str, caplog: pytest.LogCaptureFixture
) -> None:
    conn = connections[pg_alias]
    with conn.cursor() as cursor:  # undone with the test's transaction
        cursor.execute("DROP EXTENSION pg_trgm CASCADE")
        cursor.execute("CREATE ROLE mailqueue_no_extensions NOLOGIN")
        cursor.execute("SET LOCAL ROLE mailqueue_no_extensions")
    state = ProjectState.from_apps(apps)
    with caplog.at_level(logging.WARNING, "django_mailqueue.migrations"), conn.schema_editor() as editor:
        TrigramSearchIndexes().database_forwards("django_mailqueue", editor, state, state)
    assert "pg_trgm could not be created" in caplog.text and "permission denied" in caplog.text
    with conn.cursor() as cursor:
        cursor.execute("RESET ROLE")
        cursor.execute("SELECT count(*) FROM pg_indexes WHERE indexname = ANY(%s)", [list(TRIGRAM_INDEXES)])
        assert cursor.fetchone() == (0,)
    store = OrmStore({"database": pg_alias})
    added = fill(store)
    assert store.dialect.search_candidates("invoice", 100) is None  # a word: no index without pg_trgm
    assert store.dialect.search_candidates("bob3@", 100) is not None  # an address start: the btree
    for search in SEARCHES:
        expected = {i.id for i in added if matches(i, ItemQuery(search=search))}
        assert {i.id for i in store.list(ItemQuery(search=search), limit=100)} == expected, search


def test_an_address_start_is_a_range_of_the_address_index_read_alone(pg_alias: str) -> None:
    """Migration 0015's index serves `LIKE 'start%'` on the lowercase address; undone and redone by the operation."""
    conn = connections[pg_alias]
    with conn.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [ADDRESS_START_INDEX])
        row = cursor.fetchone()
    assert row is not None and "text_pattern_ops" in row[0] and "INCLUDE (item_id, address)" in row[0]
    state = ProjectState.from_apps(apps)
    with conn.schema_editor() as editor:
        AddressStartIndex().database_backwards("django_mailqueue", editor, state, state)
    with conn.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_indexes WHERE indexname = %s", [ADDRESS_START_INDEX])
        assert cursor.fetchone() == (0,)
    with conn.schema_editor() as editor:
        AddressStartIndex().database_forwards("django_mailqueue", editor, state, state)
    with conn.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # a tiny table: the plan the index allows, not its cost
        cursor.execute("EXPLAIN " + statement("postgresql", "search_recipients"), ["ann.smith1%", 10])
        plan = "\n".join(r[0] for r in cursor.fetchall())
    assert ADDRESS_START_INDEX in plan and "~>=~ 'ann.smith1'" in plan, plan


def index_names(alias: str) -> set[str]:
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT indexname FROM pg_indexes WHERE indexname = ANY(%s)", [[*TRIGRAM_INDEXES, WORD_INDEX]])
        return {row[0] for row in cursor.fetchall()}


def test_the_address_trigram_index_is_dropped_and_made_again_when_the_migration_is_undone(pg_alias: str) -> None:
    """Migration 0016 drops the address's trigram index, which no search reads; undone, 0010's index is back."""
    assert index_names(pg_alias) == {WORD_INDEX}
    state = ProjectState.from_apps(apps)
    with connections[pg_alias].schema_editor() as editor:
        DropAddressTrigramIndex().database_backwards("django_mailqueue", editor, state, state)
    assert index_names(pg_alias) == {WORD_INDEX, ADDRESS_TRIGRAM_INDEX}
    with connections[pg_alias].schema_editor() as editor:
        DropAddressTrigramIndex().database_forwards("django_mailqueue", editor, state, state)
    assert index_names(pg_alias) == {WORD_INDEX}
    store = OrmStore({"database": pg_alias})
    added = fill(store)
    assert len(store.dialect.search_candidates("ann.smith1", 100) or []) == 3  # 1, 10 and 11: the btree's range
    for search in SEARCHES:
        expected = {i.id for i in added if matches(i, ItemQuery(search=search))}
        assert {i.id for i in store.list(ItemQuery(search=search), limit=100)} == expected, search


def test_the_subject_trigram_index_holds_the_subject_alone_and_the_migration_undone_brings_the_old_one_back(
    pg_alias: str,
) -> None:
    """Migration 0017 replaces 0010's index of the sender and subject by the subject's alone; a word is read from it."""
    conn = connections[pg_alias]
    with conn.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [WORD_INDEX])
        row = cursor.fetchone()
    assert row is not None and "subject gin_trgm_ops" in row[0] and "sender" not in row[0]
    state = ProjectState.from_apps(apps)
    with conn.schema_editor() as editor:
        SubjectTrigramIndex().database_backwards("django_mailqueue", editor, state, state)
    assert index_names(pg_alias) == {TEXT_TRIGRAM_INDEX}
    with conn.schema_editor() as editor:
        SubjectTrigramIndex().database_forwards("django_mailqueue", editor, state, state)
    assert index_names(pg_alias) == {WORD_INDEX}
    store = OrmStore({"database": pg_alias})
    added = fill(store)
    assert len(store.dialect.search_candidates("invoice", 100) or []) == 12  # a word: the subject's index
    with conn.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # a tiny table: the plan the index allows, not its cost
        cursor.execute("EXPLAIN " + statement("postgresql", "search_items"), [r"\yinvoice\y", 10])
        plan = "\n".join(r[0] for r in cursor.fetchall())
    assert WORD_INDEX in plan, plan
    for search in SEARCHES:
        expected = {i.id for i in added if matches(i, ItemQuery(search=search))}
        assert {i.id for i in store.list(ItemQuery(search=search), limit=100)} == expected, search
