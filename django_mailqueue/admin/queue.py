"""The queue in the Django admin: list, item, action and overview pages, all through `get_store()`.

`QueueAdmin` is registered for `QueuedItem` so the queue has its place in the
admin index and Django's permissions, but none of its pages reads the ORM
tables: each asks the configured store, so the pages are the same on the ORM,
Redis and memory stores.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import update_wrapper
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseBase, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.http import url_has_allowed_host_and_scheme

from ..core.clock import Clock, SystemClock
from ..core.errors import QueueError
from ..core.items import ItemQuery, ItemState, QueueItem, RecipientState
from ..history import history_alias
from ..models import QueuedItem
from ..selection import domain_filter
from ..stores import get_store
from .actions import (
    ACTIONS_BY_NAME,
    CANCEL,
    MAX_ITEMS_PER_ACTION,
    RESCHEDULE,
    SEND_NOW,
    ActionResult,
    QueueAction,
    allowed_actions,
    cancel_items,
    item_repr,
    log_action,
    move_items,
)
from .headers import secure_urls
from .overview import hourly_outcomes
from .preview import PREVIEW_CSP, MessagePreview, preview_message

#: The filters the list takes from its query string.
STATE_PARAM, QUEUE_PARAM, DOMAIN_PARAM, SEARCH_PARAM, PAGE_PARAM = "state", "queue", "domain", "q", "p"
#: Recipients named in a list row before "and N more".
RECIPIENTS_SHOWN = 3
#: Paging goes by offset; beyond this page the list stops (narrow it with a filter).
MAX_PAGE = 10_000


if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[QueuedItem]
else:  # ModelAdmin is generic only in django-stubs
    _ModelAdmin = admin.ModelAdmin


class RescheduleForm(forms.Form):
    at = forms.DateTimeField(
        label="Next attempt at",
        help_text="YYYY-MM-DD HH:MM[:SS], in the site's time zone; a past time means due now.",
        widget=forms.DateTimeInput(attrs={"placeholder": "YYYY-MM-DD HH:MM", "size": 20, "autofocus": True}),
    )


@dataclass(frozen=True)
class ItemRow:
    """An item as the list and the action pages show it."""

    item: QueueItem
    state: str
    recipients_shown: tuple[str, ...]
    recipients_more: int
    due: bool
    url: str
    #: "due", "due 5 min", "in 2 h 10 min": the next attempt against now
    next_label: str
    #: how long ago the item was queued, short
    age_label: str


class QueueAdmin(_ModelAdmin):
    """The queue's pages: the list, an item, the actions' forms and the overview (see docs/admin.md)."""

    list_per_page = 50
    #: where the pages read the time; tests may put a `FakeClock` here
    clock: Clock = SystemClock()

    # --- Django's permissions: no add, change or delete of rows; views and actions ---------

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: QueuedItem | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: QueuedItem | None = None) -> bool:
        return False

    def _require_view(self, request: HttpRequest) -> None:
        if not self.has_view_permission(request):
            raise PermissionDenied

    # --- URLs: every page is the store's -------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"

        def wrap(view: Callable[..., HttpResponseBase]) -> Callable[..., HttpResponseBase]:
            def wrapper(*args: Any, **kwargs: Any) -> HttpResponseBase:
                return self.admin_site.admin_view(view)(*args, **kwargs)

            wrapper.model_admin = self  # type: ignore[attr-defined]
            return update_wrapper(wrapper, view)

        return secure_urls(
            [
                path("", wrap(self.queue_view), name=f"{prefix}_changelist"),
                path("overview/", wrap(self.overview_view), name=f"{prefix}_overview"),
                path("actions/", wrap(self.action_view), name=f"{prefix}_action"),
                path("<uuid:item_id>/change/", wrap(self.item_view), name=f"{prefix}_change"),
            ]
        )

    def _url(self, name: str, *args: Any) -> str:
        return reverse(f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_{name}", args=args)

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
            due=item.next_attempt <= now,
            url=self._url("change", item.id),
            next_label=f"due {_span(now - item.next_attempt)}".rstrip()
            if item.next_attempt <= now
            else f"in {_span(item.next_attempt - now) or '< 1 min'}",
            age_label=_span(now - item.created) or "< 1 min",
        )

    # --- the list ------------------------------------------------------------------------

    def queue_view(self, request: HttpRequest) -> HttpResponse:
        """The queue, a page at a time, filtered by state, queue and recipient domain, searched by address."""
        self._require_view(request)
        now = self.clock.now()
        params = _ListParams.from_request(request)
        query = ItemQuery(
            state=ItemState(params.state) if params.state else None,
            queue=params.queue or None,
            domain=params.domain or None,
            search=params.q or None,
            now=now,
        )
        per_page = self.list_per_page
        store = get_store()
        items: list[QueueItem] = []
        try:
            # one more than a page tells whether there is a next page, without counting the queue
            items = store.list(query, offset=(params.page - 1) * per_page, limit=per_page + 1)
        except QueueError as exc:
            self.message_user(request, f"The queue could not be read: {exc}", messages.ERROR)
        has_next = len(items) > per_page and params.page < MAX_PAGE
        rows = [self._row(item, now) for item in items[:per_page]]
        first = (params.page - 1) * per_page + 1
        context = self._context(
            request,
            "Queued messages",
            rows=rows,
            now=now,
            params=params,
            actions=allowed_actions(request),
            state_choices=[
                {"label": "All", "selected": not params.state, "url": params.url(state="")},
                *(
                    {"label": s.value, "selected": params.state == s.value, "url": params.url(state=s.value)}
                    for s in ItemState
                ),
            ],
            hidden_for_search=params.hidden(exclude=SEARCH_PARAM),
            hidden_for_filters=params.hidden(exclude=(QUEUE_PARAM, DOMAIN_PARAM)),
            filtered=params.filtered,
            clear_url=params.url(state="", queue="", domain="", q=""),
            page=params.page,
            first_shown=first if rows else 0,
            last_shown=first + len(rows) - 1,
            prev_url=params.url(page=params.page - 1) if params.page > 1 else "",
            next_url=params.url(page=params.page + 1) if has_next else "",
            store_name=type(store).__name__,
            next_path=request.get_full_path(),
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
            actions=allowed_actions(request),
            item_history_url=reverse(f"{self.admin_site.name}:{self.opts.app_label}_deliveryrecord_changelist")
            + "?"
            + urlencode({"q": str(item.id)}),
            next_path=request.get_full_path(),
        )
        return TemplateResponse(request, "django_mailqueue/admin/queue_item.html", context)

    # --- actions -------------------------------------------------------------------------

    def action_view(self, request: HttpRequest) -> HttpResponse:
        """Run an action on the items a POST names; reschedule and cancel ask first (a second POST confirms)."""
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
        ids = _item_ids(request.POST.getlist("item"))
        if not ids:
            self.message_user(
                request,
                "Items must be selected in order to perform actions on them. No items have been changed.",
                messages.WARNING,
            )
            return HttpResponseRedirect(back)
        if len(ids) > MAX_ITEMS_PER_ACTION:
            self.message_user(request, f"At most {MAX_ITEMS_PER_ACTION} items at a time.", messages.ERROR)
            return HttpResponseRedirect(back)
        now = self.clock.now()
        store = get_store()
        if action is SEND_NOW:
            result = move_items(store, ids, at=now, now=now)
            return self._finish(request, action, result, back, detail="")
        if action is RESCHEDULE:
            form = RescheduleForm(request.POST if request.POST.get("confirm") == "yes" else None)
            if form.is_bound and form.is_valid():
                at: datetime = form.cleaned_data["at"]
                result = move_items(store, ids, at=at, now=now)
                return self._finish(request, action, result, back, detail=f"to {at.isoformat()}")
            return self._confirm(request, action, ids, back, now, form=form)
        assert action is CANCEL
        if request.POST.get("confirm") == "yes":
            result = cancel_items(store, ids, now=now)
            # an item page of a cancelled item has nothing left to show
            if back.startswith(self._url("changelist")) and back.rstrip("/").endswith("/change"):
                back = self._url("changelist")
            return self._finish(request, action, result, back, detail="")
        return self._confirm(request, action, ids, back, now, form=None)

    def _confirm(
        self,
        request: HttpRequest,
        action: QueueAction,
        ids: list[uuid.UUID],
        back: str,
        now: datetime,
        *,
        form: RescheduleForm | None,
    ) -> HttpResponse:
        store = get_store()
        rows, gone = [], []
        for item_id in ids:
            try:
                item = store.get(item_id)
            except QueueError as exc:
                self.message_user(request, f"The queue could not be read: {exc}", messages.ERROR)
                return HttpResponseRedirect(back)
            if item is None:
                gone.append(item_id)
            else:
                rows.append(self._row(item, now))
        if not rows:
            self.message_user(request, "None of the selected items is in the queue any more.", messages.WARNING)
            return HttpResponseRedirect(back)
        context = self._context(
            request,
            "Reschedule queued messages" if action is RESCHEDULE else "Cancel queued messages",
            action=action,
            rows=rows,
            gone=gone,
            any_leased=any(row.state == ItemState.LEASED.value for row in rows),
            form=form,
            back=back,
            now=now,
        )
        template = "queue_reschedule.html" if action is RESCHEDULE else "queue_cancel.html"
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
            what = {SEND_NOW: "due now", RESCHEDULE: f"rescheduled {detail}", CANCEL: "cancelled"}[action]
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
                f"{len(result.gone)} no longer in the queue (delivered, failed or cancelled meanwhile).",
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

    # --- the overview --------------------------------------------------------------------

    def overview_view(self, request: HttpRequest) -> HttpResponse:
        """Counts by state and queue, the oldest due item, deferred mail by domain, outcomes per hour."""
        self._require_view(request)
        now = self.clock.now()
        store = get_store()
        summary = None
        try:
            summary = store.summary(now=now)
        except QueueError as exc:
            self.message_user(request, f"The queue could not be read: {exc}", messages.ERROR)
        states = [state.value for state in ItemState]
        context = self._context(
            request,
            "Mail queue overview",
            now=now,
            summary=summary,
            states=states,
            state_counts=[
                {"state": s, "count": summary.by_state.get(s, 0) if summary else 0, "url": _list_url(self, state=s)}
                for s in states
            ],
            queues=[
                {
                    "name": name,
                    "url": _list_url(self, queue=name),
                    "counts": [counts.get(s, 0) for s in states],
                    "total": sum(counts.values()),
                }
                for name, counts in sorted(summary.by_queue.items())
            ]
            if summary
            else [],
            domains=[
                {"domain": domain, "count": count, "url": _list_url(self, state="deferred", domain=domain)}
                for domain, count in summary.deferred_by_domain.most_common(25)
            ]
            if summary
            else [],
            oldest=self._row(summary.oldest_due, now) if summary and summary.oldest_due else None,
            chart=hourly_outcomes(now=now, alias=history_alias(get_store())),
            store_name=type(store).__name__,
        )
        return TemplateResponse(request, "django_mailqueue/admin/overview.html", context)


@dataclass(frozen=True)
class _ListParams:
    """The list's query string, read leniently: a bad value is ignored, never an error."""

    state: str
    queue: str
    domain: str
    q: str
    page: int

    @classmethod
    def from_request(cls, request: HttpRequest) -> _ListParams:
        get = request.GET
        state = get.get(STATE_PARAM, "")
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
        )

    @property
    def filtered(self) -> bool:
        return bool(self.state or self.queue or self.domain or self.q)

    def _values(self) -> dict[str, str]:
        return {STATE_PARAM: self.state, QUEUE_PARAM: self.queue, DOMAIN_PARAM: self.domain, SEARCH_PARAM: self.q}

    def url(self, *, page: int = 1, **changes: str) -> str:
        """This list's query string with `changes`; any change of filter goes back to page 1."""
        values = {**self._values(), **changes}
        if page > 1:
            values[PAGE_PARAM] = str(page)
        return "?" + urlencode({k: v for k, v in values.items() if v})

    def hidden(self, *, exclude: str | tuple[str, ...]) -> list[tuple[str, str]]:
        """The filters a form must carry along as hidden inputs."""
        skip = (exclude,) if isinstance(exclude, str) else exclude
        return [(k, v) for k, v in self._values().items() if v and k not in skip]


def _span(delta: timedelta) -> str:
    """A duration, short and to the minute ("3 d 4 h", "2 h 5 min", "7 min"); "" under a minute."""
    minutes = int(delta.total_seconds() // 60)
    if minutes < 1:
        return ""
    days, rest = divmod(minutes, 1440)
    hours, minutes = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h" if hours else f"{days} d"
    if hours:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    return f"{minutes} min"


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
