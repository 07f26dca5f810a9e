"""The queue list's query string — filters, search, sort, page — and its totals, counted only to a bound."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlencode

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from ..core.items import ItemOrder, ItemQuery, ItemState
from ..selection import domain_filter
from ..stores.base import QueueStore

#: The filters the list takes from its query string.
STATE_PARAM, QUEUE_PARAM, DOMAIN_PARAM, SEARCH_PARAM = "state", "queue", "domain", "q"
#: The page and the sort.
PAGE_PARAM, ORDER_PARAM = "p", "o"
#: Paging goes by offset; beyond this page the list stops (narrow it with a filter).
MAX_PAGE = 10_000
#: Totals are counted up to this many; past it the page says "more than 10,000".
TOTAL_BOUND = 10_000

#: The sortable columns' `o` values and the store order each asks for (the age column: newest first is "age").
ORDERS = {
    "next": ItemOrder.NEXT_ATTEMPT,
    "-next": ItemOrder.NEXT_ATTEMPT_DESC,
    "age": ItemOrder.NEWEST,
    "-age": ItemOrder.OLDEST,
}
#: 8 to 32 hex digits, dashes allowed where a uuid has them, maybe followed by the "…" the list shows.
_ID_PREFIX = re.compile(r"[0-9a-f]{8}(?:-?[0-9a-f]{1,4}){0,6}(?:…|\.\.\.)?")


def wrappable(address: str) -> SafeString:
    """An address, escaped, that a narrow column breaks only after its "@" (never mid-word)."""
    local, at, domain = address.rpartition("@")
    return format_html("{}@<wbr>{}", local, domain) if at else format_html("{}", address)


def wrappable_list(addresses: tuple[str, ...]) -> SafeString:
    return format_html_join(", ", "{}", ((wrappable(a),) for a in addresses))


def id_prefix(search: str) -> str | None:
    """The hex digits of an item id (or the first 8 or more of one, as the list shows them), else None."""
    text = search.strip().lower()
    if not _ID_PREFIX.fullmatch(text):
        return None
    digits = text.rstrip(".…").replace("-", "")
    return digits if len(digits) <= 32 else None


@dataclass(frozen=True)
class Total:
    """A count up to `TOTAL_BOUND`: `more` when there are more than that."""

    count: int
    more: bool

    @classmethod
    def of(cls, store: QueueStore, query: ItemQuery) -> Total:
        return cls.bounded(store.count(query, limit=TOTAL_BOUND + 1))

    @classmethod
    def bounded(cls, found: int) -> Total:
        """A count taken to `TOTAL_BOUND + 1`."""
        return cls(min(found, TOTAL_BOUND), found > TOTAL_BOUND)

    def __str__(self) -> str:
        return f"more than {self.count:,}" if self.more else f"{self.count:,}"


@dataclass(frozen=True)
class ListParams:
    """The list's query string, read leniently: a bad value is ignored, never an error."""

    state: str
    queue: str
    domain: str
    q: str
    page: int
    order: str

    @classmethod
    def from_query(cls, get: Mapping[str, str], *, orders: frozenset[ItemOrder]) -> ListParams:
        state = get.get(STATE_PARAM, "")
        order = get.get(ORDER_PARAM, "")
        try:
            page = min(max(1, int(get.get(PAGE_PARAM, "1"))), MAX_PAGE)
        except ValueError:
            page = 1
        return cls(
            state=state if state in {s.value for s in ItemState} else "",
            queue=get.get(QUEUE_PARAM, "").strip()[:100],
            domain=domain_filter(get.get(DOMAIN_PARAM, "")),
            q=get.get(SEARCH_PARAM, "").strip()[:320],
            page=page,
            order=order if order in ORDERS and ORDERS[order] in orders else "",
        )

    def query(self, now: datetime) -> ItemQuery:
        """The store query: `q` is an id (or its first 8+ hex digits) or else a part of an address or subject."""
        prefix = id_prefix(self.q) if self.q else None
        return ItemQuery(
            state=ItemState(self.state) if self.state else None,
            queue=self.queue or None,
            domain=self.domain or None,
            search=None if prefix else self.q or None,
            id_prefix=prefix,
            now=now,
        )

    @property
    def store_order(self) -> ItemOrder:
        return ORDERS.get(self.order, ItemOrder.NEXT_ATTEMPT)

    @property
    def filtered(self) -> bool:
        return bool(self.state or self.queue or self.domain or self.q)

    def _values(self) -> dict[str, str]:
        return {
            STATE_PARAM: self.state,
            QUEUE_PARAM: self.queue,
            DOMAIN_PARAM: self.domain,
            SEARCH_PARAM: self.q,
            ORDER_PARAM: self.order,
        }

    def url(self, *, page: int = 1, **changes: str) -> str:
        """This list's query string with `changes`; any change of filter or order goes back to page 1."""
        values = {**self._values(), **changes}
        if page > 1:
            values[PAGE_PARAM] = str(page)
        return "?" + urlencode({k: v for k, v in values.items() if v})

    def filters(self) -> str:
        """The filters alone (no page, no order), as a query string an action carries."""
        return urlencode({k: v for k, v in self._values().items() if v and k != ORDER_PARAM})

    def hidden(self, *, exclude: str | tuple[str, ...]) -> list[tuple[str, str]]:
        """The filters a form must carry along as hidden inputs."""
        skip = (exclude,) if isinstance(exclude, str) else exclude
        return [(k, v) for k, v in self._values().items() if v and k not in skip]

    def sort_link(self, column: str) -> dict[str, str | bool]:
        """A sortable column's header: the URL that sorts by it (the other way when it sorts now), and how it sorts."""
        current = self.order or "next"
        active = current.lstrip("-") == column
        descending = active and current.startswith("-")
        target = f"-{column}" if active and not descending else column
        return {"url": self.url(o="" if target == "next" else target), "active": active, "descending": descending}


def span(delta: timedelta) -> str:
    """A duration, short: "3 d 4 h", "2 h 5 min", "7 min 12 s", "12 s"; "" under a second."""
    seconds = int(delta.total_seconds())
    if seconds < 1:
        return ""
    minutes, seconds = divmod(seconds, 60)
    days, rest = divmod(minutes, 1440)
    hours, minutes = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h" if hours else f"{days} d"
    if hours:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    if minutes:
        return f"{minutes} min {seconds} s" if seconds else f"{minutes} min"
    return f"{seconds} s"
