"""The delivery history in the Django admin: listed and shown read-only; only pruning removes records."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.contrib.admin.views.main import ERROR_FLAG, PAGE_VAR, ChangeList
from django.core.paginator import Page, Paginator
from django.db.models import Field, QuerySet
from django.http import HttpRequest
from django.urls import URLPattern, reverse
from django.utils.formats import date_format
from django.utils.functional import cached_property
from django.utils.html import format_html, format_html_join
from django.utils.timezone import localtime

from ..core.errors import QueueError
from ..history import history_alias
from ..models import DeliveryRecord
from ..stores import get_store
from .headers import secure_urls
from .listing import id_prefix, wrappable
from .readonly import ReadOnlyRows

#: Records are counted to this many past the page shown (10 pages), never all of them: "more than 1,000".
COUNT_AHEAD = 1_000
#: A page starting this many records or more in is read keys first (`BoundedPaginator.page`).
KEYS_FIRST_FROM = 1_000
#: Set on each record of a list page: whether its item is still in the queue (then its id links to it).
_PRESENT = "_mq_item_present"

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[DeliveryRecord]
    _Paginator = Paginator[DeliveryRecord]
else:  # ModelAdmin and Paginator are generic only in django-stubs
    _ModelAdmin = admin.ModelAdmin
    _Paginator = Paginator


class BoundedPaginator(_Paginator):
    """Counts the records only up to `bound` (a `COUNT` over a `LIMIT`ed subquery): `more` past it.
    A page past the first `KEYS_FIRST_FROM` records is read by its keys: the keys of the page first (`OFFSET`
    over an index on the list's order, read alone), then those rows — never the rows of every page before it."""

    def __init__(self, object_list: Any, per_page: int, *, bound: int, **kwargs: Any) -> None:
        super().__init__(object_list, per_page, **kwargs)
        self.bound = bound

    @cached_property
    def count(self) -> int:
        records: QuerySet[DeliveryRecord] = self.object_list  # type: ignore[assignment]
        return records[: self.bound + 1].count()  # in the list's order: its index read alone

    def page(self, number: Any) -> Page[DeliveryRecord]:
        number = self.validate_number(number)
        bottom = (number - 1) * self.per_page
        if bottom < KEYS_FIRST_FROM:  # the first pages: their rows straight from the index's first entries
            return super().page(number)
        top = bottom + self.per_page
        if top + self.orphans >= self.count:
            top = self.count
        records: QuerySet[DeliveryRecord] = self.object_list  # type: ignore[assignment]
        keys = list(records.values_list("pk", flat=True)[bottom:top])  # a list: MySQL has no LIMIT in an IN
        return Page(records.filter(pk__in=keys), number, self)

    @property
    def more(self) -> bool:
        return self.count > self.bound


class TextFilter(admin.FieldListFilter):
    """A field's value typed in a box, matched exactly: no list of every value, which Django's filter reads
    with a `SELECT DISTINCT` over the whole history."""

    template = "django_mailqueue/admin/text_filter.html"

    def __init__(
        self, field: Field[Any, Any], request: HttpRequest, params: Any, model: Any, model_admin: Any, field_path: str
    ) -> None:
        self.value = request.GET.get(field_path, "")
        self.others = [
            (name, value)
            for name, values in request.GET.lists()
            for value in values
            if name not in (field_path, PAGE_VAR, ERROR_FLAG)
        ]
        super().__init__(field, request, params, model, model_admin, field_path)

    def expected_parameters(self) -> list[str | None]:
        return [self.field_path]

    def choices(self, changelist: ChangeList) -> Any:
        yield {
            "name": self.field_path,
            "value": self.value,
            "others": self.others,
            "clear_url": changelist.get_query_string(remove=[self.field_path]),
        }


#: What the state column says beside a record's state, why (its title), and the flag that says it.
_NOTES = (
    (
        "possibly delivered",
        "the reply after the final “.” was lost: the recipient may have the message already",
        "possibly_delivered",
    ),
    (
        "lease lost",
        "the worker lost the lease before this attempt's outcome was recorded: the item's outcome is another attempt's",
        "lease_lost",
    ),
)


class DeliveryRecordAdmin(ReadOnlyRows, _ModelAdmin):
    """Every delivered, deferred and failed outcome the worker recorded, filterable and searchable."""

    # the route host under the reply, "possibly delivered" beside the state: the table fits 1,366 px
    list_display = ("recorded_at", "item", "outcome", "to", "envelope_sender", "queue", "reply", "attempt")
    list_display_links = ("recorded_at",)
    list_filter = (
        "state",
        ("recorded", admin.DateFieldListFilter),
        ("queue", TextFilter),
        ("domain", TextFilter),
        "possibly_delivered",
    )
    search_fields = ("recipient", "sender", "message_id")
    search_help_text = (
        "A recipient or sender address (or part of one), a Message-ID, "
        "or an item's id (its first 8 characters or more)."
    )
    list_per_page = 100
    # the history can be long: no count of every row on each page, only to a bound (`get_paginator`)
    show_full_result_count = False
    actions = None
    fields = (
        "recorded",
        "state",
        "item_id",
        "message_id",
        "sender",
        "recipient",
        "domain",
        "queue",
        "attempt",
        "reply_code",
        "reply_status",
        "reply_text",
        "remote_mta",
        "possibly_delivered",
        "lease_lost",
    )
    readonly_fields = fields

    def get_urls(self) -> list[URLPattern]:
        return secure_urls(super().get_urls())

    def get_paginator(
        self,
        request: HttpRequest,
        queryset: QuerySet[DeliveryRecord],
        per_page: int,
        orphans: int = 0,
        allow_empty_first_page: bool = True,
    ) -> BoundedPaginator:
        """A paginator counting to `COUNT_AHEAD` records past the page asked for: the pages up to it are linked."""
        try:
            page = max(1, int(request.GET.get(PAGE_VAR, "1")))
        except ValueError:
            page = 1
        return BoundedPaginator(
            queryset,
            per_page,
            bound=page * per_page + COUNT_AHEAD,
            orphans=orphans,
            allow_empty_first_page=allow_empty_first_page,
        )

    def get_changelist_instance(self, request: HttpRequest) -> ChangeList:
        """The page's records, each told whether its item is still queued (one `store.present` for the page)."""
        changelist = super().get_changelist_instance(request)
        try:
            queued = get_store().present([record.item_id for record in changelist.result_list])
        except QueueError:
            queued = set()
        for record in changelist.result_list:
            setattr(record, _PRESENT, record.item_id in queued)
        return changelist

    @admin.display(description="recorded", ordering="recorded")
    def recorded_at(self, record: DeliveryRecord) -> str:
        return date_format(localtime(record.recorded), "Y-m-d H:i:s")

    @admin.display(description="item")
    def item(self, record: DeliveryRecord) -> str:
        """The first characters of the item's id (the history search finds them), linked to the item while queued."""
        short = f"{record.item_id.hex[:8]}…"
        if getattr(record, _PRESENT, False):
            url = reverse(f"{self.admin_site.name}:django_mailqueue_queueditem_change", args=[record.item_id])
            return format_html('<a href="{}" title="{}" class="mq-item-link">{}</a>', url, record.item_id, short)
        return format_html('<span title="{} (no longer queued)">{}</span>', record.item_id, short)

    @admin.display(description="state", ordering="state")
    def outcome(self, record: DeliveryRecord) -> str:
        notes = [(label, why) for label, why, shown in _NOTES if getattr(record, shown)]
        if not notes:
            return record.state
        spans = format_html_join("", ' <span class="mq-possibly" title="{1}">{0}</span>', notes)
        return format_html("{}{}", record.state, spans)

    @admin.display(description="recipient", ordering="recipient")
    def to(self, record: DeliveryRecord) -> str:
        return wrappable(record.recipient)

    @admin.display(description="sender", ordering="sender")
    def envelope_sender(self, record: DeliveryRecord) -> str:
        if not record.sender:
            return format_html('<span title="{}">&lt;&gt;</span>', "the null sender (a DSN)")
        return wrappable(record.sender)

    @admin.display(description="reply")
    def reply(self, record: DeliveryRecord) -> str:
        code = "" if record.reply_code is None else f"{record.reply_code} "
        text = record.reply_text if len(record.reply_text) <= 120 else record.reply_text[:120] + " …"
        reply = f"{code}{record.reply_status} {text}".strip()
        if not record.remote_mta:
            return reply
        return format_html('{}<div class="mq-route" title="route host">{}</div>', reply, record.remote_mta)

    def get_queryset(self, request: HttpRequest) -> QuerySet[DeliveryRecord]:
        # the database the worker writes the history to (the ORM store's)
        return super().get_queryset(request).using(history_alias(get_store()))

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[DeliveryRecord], search_term: str
    ) -> tuple[QuerySet[DeliveryRecord], bool]:
        prefix = id_prefix(search_term)
        if prefix is None:
            return super().get_search_results(request, queryset, search_term)
        # a range of the item_id index: a uuid compares as its hex digits do
        low, high = uuid.UUID(prefix.ljust(32, "0")), uuid.UUID(prefix.ljust(32, "f"))
        return queryset.filter(item_id__gte=low, item_id__lte=high), False
