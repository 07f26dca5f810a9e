"""The queue in the Django admin: list, item, action and overview pages, all through `get_store()`.

`QueueAdmin` is registered for `QueuedItem` so the queue has its place in the
admin index and Django's permissions, but none of its pages reads the ORM
tables: each asks the configured store, so the pages are the same on the ORM,
Redis and memory stores.
"""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.widgets import AdminSplitDateTime
from django.core.exceptions import PermissionDenied
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
    QueryDict,
)
from django.template.response import TemplateResponse
from django.urls import URLPattern, reverse
from django.utils.http import url_has_allowed_host_and_scheme

from ..conf import get_settings
from ..core.clock import Clock, SystemClock
from ..core.errors import QueueError
from ..core.items import ItemQuery, ItemState, QueueItem, RecipientState
from ..history import history_alias
from ..models import QueuedItem
from ..shaping_limits import limits_in_force
from ..stores import get_store
from ..stores.base import QueueStore
from .actions import (
    ACTIONS_BY_NAME,
    CANCEL,
    MAX_ITEMS_ACROSS,
    MAX_ITEMS_PER_ACTION,
    RESCHEDULE,
    SEND_AGAIN,
    SEND_NOW,
    ActionResult,
    QueueAction,
    allowed_actions,
    cancel_items,
    item_repr,
    log_action,
    matching_ids,
    move_items,
    send_items_again,
)
from .headers import page_url, store_pages
from .listing import (
    DOMAIN_PARAM,
    MAX_PAGE,
    ORDERS,
    QUEUE_PARAM,
    SEARCH_PARAM,
    TOTAL_BOUND,
    ListParams,
    Total,
    span,
    wrappable,
    wrappable_list,
)
from .overview import hourly_outcomes
from .preview import PREVIEW_CSP, MessagePreview, preview_message
from .readonly import ReadOnlyRows
from .suspensions import RESUME_PERMISSION, resume_view, suspension_rows

#: Recipients named in a list row before "and N more".
RECIPIENTS_SHOWN = 3
#: Items named on the confirmation page of an action on every item matching a filter.
ACROSS_SAMPLE = 20


if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[QueuedItem]
else:  # ModelAdmin is generic only in django-stubs
    _ModelAdmin = admin.ModelAdmin


class RescheduleForm(forms.Form):
    at = forms.SplitDateTimeField(
        label="Next attempt at",
        help_text="A date and a time (HH:MM[:SS]) in the site's time zone; a past time means due now.",
        widget=AdminSplitDateTime,
    )


@dataclass(frozen=True)
class ItemRow:
    """An item as the list and the action pages show it."""

    item: QueueItem
    state: str
    recipients_shown: tuple[str, ...]
    recipients_more: int
    #: the sender and the recipients shown, as HTML that breaks only after an "@"
    sender_html: str
    recipients_html: str
    due: bool
    url: str
    #: "due", "due 5 min", "in 2 h 10 min": the next attempt against now
    next_label: str
    #: how long ago the item was queued, short
    age_label: str


class QueueAdmin(ReadOnlyRows, _ModelAdmin):
    """The queue's pages: the list, an item, the actions' forms and the overview (see docs/admin.md)."""

    list_per_page = 50
    #: where the pages read the time; tests may put a `FakeClock` here
    clock: Clock = SystemClock()

    # --- Django's permissions: no add, change or delete of rows (ReadOnlyRows); views and actions ---

    def _require_view(self, request: HttpRequest) -> None:
        if not self.has_view_permission(request):
            raise PermissionDenied

    # --- URLs: every page is the store's -------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        return store_pages(
            self,
            [
                ("", self.queue_view, "changelist"),
                ("overview/", self.overview_view, "overview"),
                ("actions/", self.action_view, "action"),
                ("suspensions/resume/", self.resume_view, "resume"),
                ("<uuid:item_id>/change/", self.item_view, "change"),
            ],
        )

    def _url(self, name: str, *args: Any) -> str:
        return page_url(self, name, *args)

    def _context(self, request: HttpRequest, title: str, **extra: Any) -> dict[str, Any]:
        return {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": title,
            "list_url": self._url("changelist"),
            "overview_url": self._url("overview"),
            "action_url": self._url("action"),
            "history_url": reverse(f"{self.admin_site.name}:{self.opts.app_label}_deliveryrecord_changelist"),
            "preview_csp": PREVIEW_CSP,
            **extra,
        }

    def _row(self, item: QueueItem, now: datetime) -> ItemRow:
        addresses = tuple(r.address for r in item.recipients)
        return ItemRow(
            item=item,
            state=item.state_at(now).value,
            recipients_shown=addresses[:RECIPIENTS_SHOWN],
            recipients_more=max(0, len(addresses) - RECIPIENTS_SHOWN),
            sender_html=wrappable(item.sender),
            recipients_html=wrappable_list(addresses[:RECIPIENTS_SHOWN]),
            due=item.next_attempt <= now,
            url=self._url("change", item.id),
            next_label=next_label(item, now),
            age_label=span(now - item.created) or "< 1 s",
        )

    # --- the list ------------------------------------------------------------------------

    def queue_view(self, request: HttpRequest) -> HttpResponse:
        """The queue, a page at a time, filtered, searched and sorted, with totals counted to a bound."""
        self._require_view(request)
        now = self.clock.now()
        store = get_store()
        params = ListParams.from_query(request.GET, orders=store.orders)
        query = params.query(now)
        per_page = self.list_per_page
        items: list[QueueItem] = []
        total: Total | None = None
        by_state: dict[str, Total] = {}
        try:
            # one more than a page tells whether there is a next page
            items = store.list(query, offset=(params.page - 1) * per_page, limit=per_page + 1, order=params.store_order)
            if _counts_cheaply(store, query):
                if store.bounded_counts and query.domain is None:
                    counts = store.count_by_state(query, limit=TOTAL_BOUND + 1)
                    by_state = {s.value: Total.bounded(n) for s, n in counts.items()}
                total = by_state[params.state] if params.state else Total.of(store, query)
            if not items and params.page > 1 and total is None:
                total = Total.of(store, query)  # past the end: say where the end is, once
        except QueueError as exc:
            self.message_user(request, f"The queue could not be read: {exc}", messages.ERROR)
        has_next = len(items) > per_page and params.page < MAX_PAGE
        rows = [self._row(item, now) for item in items[:per_page]]
        first = (params.page - 1) * per_page + 1
        last_page = max(1, -(-total.count // per_page)) if total is not None else 0
        sortable = {column for column in ("next", "age") if {ORDERS[column], ORDERS[f"-{column}"]} <= store.orders}
        context = self._context(
            request,
            "Queued messages",
            rows=rows,
            now=now,
            params=params,
            actions=allowed_actions(request),
            state_choices=[
                {"label": "All", "value": "", "selected": not params.state, "url": params.url(state="")},
                *(
                    {
                        "label": s.value,
                        "value": s.value,
                        "selected": params.state == s.value,
                        "url": params.url(state=s.value),
                        "total": by_state.get(s.value),
                    }
                    for s in ItemState
                ),
            ],
            hidden_for_search=params.hidden(exclude=SEARCH_PARAM),
            hidden_for_filters=params.hidden(exclude=(QUEUE_PARAM, DOMAIN_PARAM)),
            filtered=params.filtered,
            filters=params.filters(),
            clear_url=params.url(state="", queue="", domain="", q=""),
            sort={column: params.sort_link(column) for column in sortable},
            page=params.page,
            first_shown=first if rows else 0,
            last_shown=first + len(rows) - 1,
            total=total,
            more_than_page=has_next or params.page > 1,
            past_end=not rows and params.page > 1,
            last_page=last_page,
            last_page_url=params.url(page=last_page) if last_page else "",
            prev_url=params.url(page=params.page - 1) if params.page > 1 else "",
            next_url=params.url(page=params.page + 1) if has_next else "",
            max_across=MAX_ITEMS_ACROSS,
            store_name=type(store).__name__,
            next_path=request.get_full_path(),
            media=self.media,
        )
        return TemplateResponse(request, "django_mailqueue/admin/queue_list.html", context)

    # --- one item ------------------------------------------------------------------------

    def item_view(self, request: HttpRequest, item_id: uuid.UUID) -> HttpResponse:
        """One item: its envelope, each recipient's state and reply, the message's headers and a safe preview."""
        self._require_view(request)
        now = self.clock.now()
        store = get_store()
        try:
            item = store.get(item_id)
            message = store.read_message(item_id) if item is not None else None
        except QueueError as exc:
            self.message_user(request, f"The queue could not be read: {exc}", messages.ERROR)
            return HttpResponseRedirect(self._url("changelist"))
        if item is None:
            self.message_user(
                request,
                f"Queued message {item_id} is no longer in the queue: delivered, failed or cancelled "
                "(see the delivery history).",
                messages.WARNING,
            )
            return HttpResponseRedirect(self._url("changelist"))
        preview: MessagePreview | None = preview_message(message) if message is not None else None
        context = self._context(
            request,
            f"Queued message {item.id}",
            row=self._row(item, now),
            item=item,
            now=now,
            leased=item.leased_at(now),
            recipients=[
                {"recipient": r, "final": r.state is not RecipientState.PENDING, "reply": str(r.reply or "")}
                for r in item.recipients
            ],
            preview=preview,
            actions=[a for a in allowed_actions(request) if (a is SEND_AGAIN) is item.kept or a is CANCEL],
            item_history_url=reverse(f"{self.admin_site.name}:{self.opts.app_label}_deliveryrecord_changelist")
            + "?"
            + urlencode({"q": str(item.id)}),
            next_path=request.get_full_path(),
        )
        return TemplateResponse(request, "django_mailqueue/admin/queue_item.html", context)

    # --- actions -------------------------------------------------------------------------

    def action_view(self, request: HttpRequest) -> HttpResponse:
        """Run an action on the items a POST names, or on every item matching its filters (`select_across`);
        all but a send-now of named items ask first (a second POST confirms)."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        self._require_view(request)
        action = ACTIONS_BY_NAME.get(request.POST.get("action", ""))
        back = self._safe_next(request)
        if action is None:
            self.message_user(request, "No action selected.", messages.WARNING)
            return HttpResponseRedirect(back)
        if not request.user.has_perm(action.permission):
            raise PermissionDenied
        now = self.clock.now()
        store = get_store()
        confirmed = request.POST.get("confirm") == "yes"
        form = None
        if action is RESCHEDULE:
            form = RescheduleForm(request.POST if confirmed else None)
            confirmed = form.is_bound and form.is_valid()
        across = request.POST.get("select_across") == "1"
        selection = (
            _Across(ListParams.from_query(QueryDict(request.POST.get("filters", "")), orders=store.orders), now)
            if across
            else _item_ids(request.POST.getlist("item"))
        )
        if isinstance(selection, list) and not selection:
            self.message_user(
                request,
                "Items must be selected in order to perform actions on them. No items have been changed.",
                messages.WARNING,
            )
            return HttpResponseRedirect(back)
        if isinstance(selection, list) and len(selection) > MAX_ITEMS_PER_ACTION:
            self.message_user(request, f"At most {MAX_ITEMS_PER_ACTION} items at a time.", messages.ERROR)
            return HttpResponseRedirect(back)
        at: datetime = form.cleaned_data["at"] if form is not None and confirmed else now
        beyond = self._past_lifetime(store, selection, at) if action is RESCHEDULE and confirmed else 0
        if beyond and request.POST.get("past_lifetime") != "yes":
            confirmed = False
        if not confirmed and (action not in (SEND_NOW, SEND_AGAIN) or across):
            return self._confirm(request, action, selection, back, now, form=form, past_lifetime=beyond)
        try:
            ids = matching_ids(store, selection.query) if isinstance(selection, _Across) else selection
        except QueueError as exc:
            self.message_user(request, f"The queue could not be read: {exc}", messages.ERROR)
            return HttpResponseRedirect(back)
        if action is CANCEL:
            result = cancel_items(store, ids, now=now)
            # an item page of a cancelled item has nothing left to show
            if back.startswith(self._url("changelist")) and back.rstrip("/").endswith("/change"):
                back = self._url("changelist")
            return self._finish(request, action, result, back, detail="")
        if action is SEND_AGAIN:
            return self._finish(request, action, send_items_again(store, ids, now=now), back, detail="")
        result = move_items(store, ids, at=at, now=now)
        return self._finish(request, action, result, back, detail="" if action is SEND_NOW else f"to {at.isoformat()}")

    def _past_lifetime(self, store: QueueStore, selection: _Across | list[uuid.UUID], at: datetime) -> int:
        """How many of the items (of the first `ACROSS_SAMPLE` matching a filter) `at` is past the lifetime of."""
        lifetime = timedelta(seconds=get_settings().max_lifetime)
        try:
            if isinstance(selection, _Across):
                items = store.list(selection.query, limit=ACROSS_SAMPLE)
            else:
                items = [item for item in map(store.get, selection) if item is not None]
        except QueueError:
            return 0
        return sum(1 for item in items if at >= item.created + lifetime)

    def _confirm(
        self,
        request: HttpRequest,
        action: QueueAction,
        selection: _Across | list[uuid.UUID],
        back: str,
        now: datetime,
        *,
        form: RescheduleForm | None,
        past_lifetime: int,
    ) -> HttpResponse:
        store = get_store()
        rows, gone = [], []
        matching: Total | None = None
        try:
            if isinstance(selection, _Across):
                found = store.count(selection.query, limit=MAX_ITEMS_ACROSS + 1)
                matching = Total(min(found, MAX_ITEMS_ACROSS), found > MAX_ITEMS_ACROSS)
                rows = [self._row(item, now) for item in store.list(selection.query, limit=ACROSS_SAMPLE)]
            else:
                for item_id in selection:
                    item = store.get(item_id)
                    if item is None:
                        gone.append(item_id)
                    else:
                        rows.append(self._row(item, now))
        except QueueError as exc:
            self.message_user(request, f"The queue could not be read: {exc}", messages.ERROR)
            return HttpResponseRedirect(back)
        if not rows:
            self.message_user(
                request,
                "No item matches these filters any more."
                if matching is not None
                else "None of the selected items is in the queue any more.",
                messages.WARNING,
            )
            return HttpResponseRedirect(back)
        titles = {
            SEND_NOW: "Send queued messages now",
            RESCHEDULE: "Reschedule queued messages",
            SEND_AGAIN: "Send failed messages again",
        }
        count = matching.count if matching is not None else len(rows)
        context = self._context(
            request,
            titles.get(action, "Cancel queued messages"),
            action=action,
            rows=rows,
            gone=gone,
            count=count,
            matching=matching,
            across=selection if isinstance(selection, _Across) else None,
            unnamed=max(0, count - len(rows)),
            any_leased=any(row.state == ItemState.LEASED.value for row in rows),
            form=form,
            media=self.media + form.media if form is not None else None,
            past_lifetime=past_lifetime,
            max_lifetime=span(timedelta(seconds=get_settings().max_lifetime)),
            back=back,
            now=now,
        )
        template = "queue_reschedule.html" if action is RESCHEDULE else "queue_confirm.html"
        return TemplateResponse(request, f"django_mailqueue/admin/{template}", context)

    def _finish(
        self, request: HttpRequest, action: QueueAction, result: ActionResult, back: str, *, detail: str
    ) -> HttpResponse:
        user_id = request.user.pk
        assert isinstance(user_id, int)
        log_action(user_id, action, result.done, detail)
        done = len(result.done)
        if done:
            noun = "queued message" if done == 1 else "queued messages"
            what = {
                SEND_NOW: "due now",
                RESCHEDULE: f"rescheduled {detail}",
                CANCEL: "cancelled",
                SEND_AGAIN: "sent again: failed recipients pending, due now",
            }[action]
            names = ", ".join(item_repr(item) for item in result.done[:3]) + (" …" if done > 3 else "")
            self.message_user(request, f"{done} {noun} {what}: {names}", messages.SUCCESS)
        if result.leased:
            self.message_user(
                request,
                f"{len(result.leased)} of them held by a worker right now: the delivery under way goes on"
                + (
                    " and may still reach its recipients."
                    if action is CANCEL
                    else "; the new time applies if it defers."
                ),
                messages.WARNING,
            )
        if result.gone:
            self.message_user(
                request,
                f"{len(result.gone)} not failed (only a failed item is sent again), or no longer in the queue."
                if action is SEND_AGAIN
                else f"{len(result.gone)} no longer in the queue (delivered, failed or cancelled meanwhile).",
                messages.WARNING,
            )
        for error in result.errors:
            self.message_user(request, f"Not changed: {error}", messages.ERROR)
        return HttpResponseRedirect(back)

    def _safe_next(self, request: HttpRequest) -> str:
        target = request.POST.get("next", "")
        if target and url_has_allowed_host_and_scheme(
            target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
        ):
            return target
        return self._url("changelist")

    def resume_view(self, request: HttpRequest) -> HttpResponse:
        """Resume a suspended destination now (admin/suspensions.py)."""
        return resume_view(self, request)

    # --- the overview --------------------------------------------------------------------

    def overview_view(self, request: HttpRequest) -> HttpResponse:
        """Counts by state and queue, the oldest due item, deferred mail by domain, suspended destinations,
        outcomes per hour: each count to a bound, never a read of the whole queue (`QueueStore.overview`)."""
        self._require_view(request)
        now = self.clock.now()
        store = get_store()
        summary = None
        suspended = []
        try:
            summary = store.overview(now=now, bound=TOTAL_BOUND)
            suspended = store.suspensions(now=now)
        except QueueError as exc:
            self.message_user(request, f"The queue could not be read: {exc}", messages.ERROR)
        states = [state.value for state in ItemState]

        def total(count: int) -> Total:
            return Total(min(count, TOTAL_BOUND), count > TOTAL_BOUND)

        def queue_row(name: str, counts: Counter[str]) -> dict[str, Any]:
            cells = [total(counts.get(s, 0)) for s in states]
            whole = Total(sum(cell.count for cell in cells), any(cell.more for cell in cells))
            return {"name": name, "url": _list_url(self, queue=name), "counts": cells, "total": whole}

        context = self._context(
            request,
            "Mail queue overview",
            now=now,
            summary=summary,
            total=total(summary.total) if summary else None,
            states=states,
            state_counts=[
                {
                    "state": s,
                    "count": total(summary.by_state.get(s, 0) if summary else 0),
                    "url": _list_url(self, state=s),
                }
                for s in states
            ],
            queues=[queue_row(name, counts) for name, counts in sorted(summary.by_queue.items())] if summary else [],
            domains=[
                {"domain": domain, "count": count, "url": _list_url(self, state="deferred", domain=domain)}
                for domain, count in summary.deferred_by_domain.most_common(25)
            ]
            if summary
            else [],
            oldest=self._row(summary.oldest_due, now) if summary and summary.oldest_due else None,
            suspended=suspension_rows(self, suspended, now),
            limits=limits_in_force(get_settings()),
            may_resume=request.user.has_perm(RESUME_PERMISSION),
            resume_url=self._url("resume"),
            chart=hourly_outcomes(now=now, alias=history_alias(get_store())),
            store_name=type(store).__name__,
        )
        return TemplateResponse(request, "django_mailqueue/admin/overview.html", context)


@dataclass(frozen=True)
class _Across:
    """Every item matching the list's filters, as an action's selection."""

    params: ListParams
    now: datetime

    @property
    def query(self) -> ItemQuery:
        return self.params.query(self.now)

    @property
    def description(self) -> str:
        labels = {"state": "state", "queue": "queue", "domain": "recipient domain", "q": "search"}
        shown = [f"{labels[name]} {value!r}" for name, value in self.params.hidden(exclude=()) if name in labels]
        return ", ".join(shown) or "none (the whole queue)"


def next_label(item: QueueItem, now: datetime) -> str:
    """The list's "next attempt" cell: "due 5 min", "in 2 h 10 min", or for a kept failed item "failed 3 h ago"."""
    if item.failed_at is not None:
        return f"failed {span(now - item.failed_at) or '< 1 s'} ago"
    if item.next_attempt <= now:
        return f"due {span(now - item.next_attempt)}".rstrip()
    return f"in {span(item.next_attempt - now) or '< 1 s'}"


def _counts_cheaply(store: QueueStore, query: ItemQuery) -> bool:
    """The totals are counted on each page view only where the count reads an index, never the whole queue:
    not for a search, nor for a domain and a state together (on PostgreSQL a state is the items' and a domain
    the recipients': a count of both joins them, up to a whole big domain's rows)."""
    return query.unfiltered or (
        store.bounded_counts and not query.search and (query.domain is None or query.state is None)
    )


def _list_url(model_admin: QueueAdmin, **filters: str) -> str:
    return model_admin._url("changelist") + "?" + urlencode(filters)


def _item_ids(values: list[str]) -> list[uuid.UUID]:
    ids: list[uuid.UUID] = []
    for value in values:
        try:
            item_id = uuid.UUID(value)
        except ValueError:
            continue
        if item_id not in ids:
            ids.append(item_id)
    return ids
