"""The ORM store's reading side, the same in every dialect: the admin's filters, pages and counts as
querysets on the item index they read, items loaded with their recipients, and the queue's summary."""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import replace
from datetime import datetime

from django.db import models
from django.db.models import Q

from ...core.clock import to_micros
from ...core.items import ItemOrder, ItemQuery, ItemState, QueueItem, RecipientState
from ...core.search import terms
from ...core.status import QueueSummary
from ...models import QueuedItem, QueuedRecipient
from . import failed
from .base import Dialect
from .portable import due, orm_recipients
from .rows import ITEM_FIELDS, to_item

#: `list`'s orders: the due index (next_attempt, seq) either way, or the primary key (the order of adds).
ORDER_BY = {
    ItemOrder.NEXT_ATTEMPT: ("next_attempt", "seq"),
    ItemOrder.NEXT_ATTEMPT_DESC: ("-next_attempt", "-seq"),
    ItemOrder.OLDEST: ("seq",),
    ItemOrder.NEWEST: ("-seq",),
}
#: The states that are a range of next attempts (before now, after it, `NEVER`): counted in the due index's order.
_RANGES = (ItemState.DUE, ItemState.SCHEDULED, ItemState.FAILED)
_NEVER_US = failed.NEVER_US
#: A search whose indexes find at most this many items lists them by key (on PostgreSQL one array: the list's
#: index walked with a hashed test, 40 blocks for 3,819 candidates at 1 M items); more, it is tested on each row
#: read in the list's order (where matches are that common, a page of them comes early).
SEARCH_BOUND = 20_000
#: A search is first tested on this many of the list's first rows (`Dialect.search_probe`).
SEARCH_PROBE = 1_000


def load(alias: str, rows: models.QuerySet[QueuedItem]) -> list[tuple[int, QueueItem]]:
    """(seq, item) of each row `rows` selects, its recipients read in one more query."""
    items = list(rows.values_list(*ITEM_FIELDS))
    recipients = orm_recipients(alias, [row[0] for row in items])
    return [(row[0], to_item(row, recipients[row[0]])) for row in items]


def matching(alias: str, dialect: Dialect, query: ItemQuery | None) -> models.QuerySet[QueuedItem]:
    """The items `query` selects, unordered."""
    rows = QueuedItem.objects.using(alias).all()
    if query is None:
        return rows
    if query.queue is not None:
        rows = rows.filter(queue=query.queue)
    if query.domain is not None:
        rows = rows.filter(
            seq__in=QueuedRecipient.objects.using(alias).filter(domain=query.domain.lower()).values("item_id")
        )
    if query.id_prefix is not None:
        # a range of the unique index on id: a uuid compares as its hex digits do
        rows = rows.filter(
            id__gte=uuid.UUID(query.id_prefix.ljust(32, "0")), id__lte=uuid.UUID(query.id_prefix.ljust(32, "f"))
        )
    if query.search:
        found = dialect.search_candidates(query.search, SEARCH_BOUND)
        if found is None:
            rows = rows.filter(dialect.search_filter(query.search))
        else:  # one term's items are exactly its candidates; of several, some may have been left out
            rows = rows.filter(dialect.seq_in(found))
            if len(terms(query.search)) > 1:
                rows = rows.filter(dialect.search_filter(query.search))
    if query.state is not None:
        if query.now is None:
            raise ValueError("a state filter needs `now`")
        now_us = to_micros(query.now)
        leased = Q(owner__isnull=False, lease_expires__gt=now_us)
        if query.state is ItemState.LEASED:
            rows = rows.filter(leased)
        elif query.state is ItemState.FAILED:
            rows = rows.filter(next_attempt=_NEVER_US)
        elif query.state is ItemState.DEFERRED:
            rows = rows.filter(attempts__gt=0, next_attempt__lt=_NEVER_US).exclude(leased)
        elif query.state is ItemState.DUE:
            rows = rows.filter(attempts=0, next_attempt__lte=now_us).exclude(leased)
        else:
            rows = rows.filter(attempts=0, next_attempt__gt=now_us, next_attempt__lt=_NEVER_US).exclude(leased)
    return rows


def page(
    alias: str, dialect: Dialect, query: ItemQuery | None, offset: int, limit: int, order: ItemOrder
) -> list[QueueItem]:
    """A page of `list`, in `order`."""
    if query is not None and query.search and limit > 0:
        # a search with a word (which may be in 1 subject of 7: too many for its index to list) is first tested on
        # the list's first rows by its other filters: a whole page there is the page (the first matches in the
        # list's order); else, and for addresses and domains (their indexes read alone), the indexes are asked
        seqs = None
        if any(term.word for term in terms(query.search)):
            scope = matching(alias, dialect, replace(query, search=None)).order_by(*ORDER_BY[order])
            seqs = dialect.search_probe(
                scope, query.search, order_by=ORDER_BY[order], rows=SEARCH_PROBE, offset=offset, limit=limit
            )
        if seqs is None:
            # the page's keys first (the list's index walked alone, each entry tested: 40 blocks on PostgreSQL for
            # `erin.edwa`'s 3,819 candidates), then its rows: asked for whole rows at once, the database reads
            # every candidate's row by its key to sort them (15,000 blocks)
            ordered = matching(alias, dialect, query).order_by(*ORDER_BY[order])
            seqs = list(ordered.values_list("seq", flat=True)[offset : offset + limit])
        found = QueuedItem.objects.using(alias).filter(seq__in=seqs).order_by(*ORDER_BY[order])
        return [item for _, item in load(alias, found)]
    rows = matching(alias, dialect, query).order_by(*ORDER_BY[order])[offset : offset + limit]
    return [item for _, item in load(alias, rows)]


def count(alias: str, dialect: Dialect, query: ItemQuery | None, limit: int | None) -> int:
    """The items `query` selects, at most `limit` of them counted (bounded: read from an index's range)."""
    rows = matching(alias, dialect, query)
    if limit is None:
        return rows.count()
    if query is not None and query.state is ItemState.DEFERRED and query.domain is None and not query.search:
        # from the partial deferred index alone (no heap row read to test a lease): the tried items counted to
        # the bound and as many more as are leased now, less those (few: the workers' leases); in the index's order,
        # else PostgreSQL may plan a table scan that stops at the bound, which reads far more rows than the index
        tried = (
            matching(alias, dialect, replace(query, state=None))
            .filter(attempts__gt=0, next_attempt__lt=_NEVER_US)
            .order_by("next_attempt", "seq")
        )
        leased = matching(alias, dialect, replace(query, state=ItemState.LEASED))
        held = leased.filter(attempts__gt=0, next_attempt__lt=_NEVER_US).count()
        return max(0, min(tried[: limit + held].count() - held, limit))
    if query is not None and query.domain is None and not query.search and query.state in _RANGES:
        # in the list's order, so the database reads the due (or the queue's) index from its range's start up to
        # `limit` entries: unordered it may scan the table from its start, and items added in time order keep
        # the scheduled ones at its end
        rows = rows.order_by("next_attempt", "seq")
    # sliced, Django counts a LIMITed subquery: the database stops at `limit` rows
    return rows[:limit].count()


def after(seq: int, last: QueueItem) -> Q:
    """The rows after (`last`'s next attempt, `seq`) in the due index's order: where `iter_items` resumes."""
    next_us = to_micros(last.next_attempt)
    return Q(next_attempt__gt=next_us) | Q(next_attempt=next_us, seq__gt=seq)


def summary(alias: str, now: datetime) -> QueueSummary:
    """The queue at `now`: one aggregate query per part, whatever the queue's size."""
    now_us = to_micros(now)
    leased = Q(owner__isnull=False, lease_expires__gt=now_us)
    state = models.Case(
        models.When(next_attempt=_NEVER_US, then=models.Value(ItemState.FAILED.value)),
        models.When(leased, then=models.Value(ItemState.LEASED.value)),
        models.When(attempts__gt=0, then=models.Value(ItemState.DEFERRED.value)),
        models.When(next_attempt__lte=now_us, then=models.Value(ItemState.DUE.value)),
        default=models.Value(ItemState.SCHEDULED.value),
        output_field=models.CharField(),
    )
    result = QueueSummary(now=now)
    rows = (
        QueuedItem.objects.using(alias)
        .annotate(state=state)
        .values("queue", "state")
        .annotate(n=models.Count("seq"))
        .order_by()
    )
    for row in rows:
        result.total += row["n"]
        result.by_state[row["state"]] += row["n"]
        result.by_queue.setdefault(row["queue"], Counter())[row["state"]] += row["n"]
    domains = (
        QueuedRecipient.objects.using(alias)
        .filter(state=RecipientState.PENDING.value, item__attempts__gt=0)
        .exclude(item__owner__isnull=False, item__lease_expires__gt=now_us)
        .values("domain")
        .annotate(n=models.Count("id"))
        .order_by("-n", "domain")[:100]
    )
    for by_domain in domains:
        result.deferred_by_domain[by_domain["domain"]] = by_domain["n"]
    oldest = load(alias, due(alias, None, now_us).order_by("next_attempt", "seq")[:1])
    result.oldest_due = oldest[0][1] if oldest else None
    return result
