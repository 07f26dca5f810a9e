"""The suppression list in the Django admin: list and search, add by hand, remove — all through `get_store()`.

`SuppressionAdmin` is registered for `SuppressedAddress` (the ORM store's table) for its place in the admin
index and Django's view, add and delete permissions; no page reads the table: each asks the configured
store, so the pages are the same on the ORM, Redis and memory stores.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.models import ADDITION, DELETION, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, reverse

from ..conf import get_settings
from ..core.clock import Clock, SystemClock
from ..core.errors import QueueError
from ..core.items import Suppression
from ..models import SuppressedAddress
from ..stores import get_store
from ..suppression import BY_HAND_STATUS, by_hand, shown_since
from .headers import page_url, store_pages

#: Addresses one add or remove takes.
MAX_ADDRESSES = 500

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[SuppressedAddress]
else:  # ModelAdmin is generic only in django-stubs
    _ModelAdmin = admin.ModelAdmin


class AddForm(forms.Form):
    addresses = forms.CharField(
        label="Addresses",
        widget=forms.Textarea(attrs={"rows": 4, "cols": 60}),
        help_text=f"One or more, one a line (at most {MAX_ADDRESSES}). Nothing is sent to them until they are "
        "removed or the list's DAYS have passed.",
    )
    status = forms.CharField(
        label="Status",
        initial=BY_HAND_STATUS,
        max_length=16,
        help_text="The enhanced status a message to them fails with (5.1.1: no such user; 5.2.1: disabled).",
    )
    reason = forms.CharField(
        label="Reason", required=False, max_length=500, help_text="Shown with the entry, and in the failures' reply."
    )

    def entries(self, now: datetime) -> list[Suppression]:
        """The entries to add, every address checked; a form error for the first that is wrong."""
        found: dict[str, Suppression] = {}
        lines = [line.strip() for line in self.cleaned_data["addresses"].splitlines() if line.strip()]
        if len(lines) > MAX_ADDRESSES:
            self.add_error("addresses", f"At most {MAX_ADDRESSES} addresses at a time.")
            return []
        for line in lines:
            try:
                entry = by_hand(line, status=self.cleaned_data["status"], reason=self.cleaned_data["reason"], now=now)
            except ValueError as exc:
                self.add_error("status" if "status code" in str(exc) else "addresses", str(exc))
                return []
            found[entry.address] = entry
        return list(found.values())


class SuppressionAdmin(_ModelAdmin):
    """The suppression list's pages (see docs/admin.md, "The suppression list")."""

    list_per_page = 100
    #: where the pages read the time; tests may put a `FakeClock` here
    clock: Clock = SystemClock()

    def has_change_permission(self, request: HttpRequest, obj: SuppressedAddress | None = None) -> bool:
        return False

    def _require(self, request: HttpRequest, allowed: bool) -> None:
        if not allowed:
            raise PermissionDenied

    def get_urls(self) -> list[URLPattern]:
        return store_pages(
            self,
            [
                ("", self.list_page, "changelist"),
                ("add/", self.add_page, "add"),
                ("remove/", self.remove_page, "remove"),
            ],
        )

    def _url(self, name: str) -> str:
        return page_url(self, name)

    def _context(self, request: HttpRequest, title: str, **extra: Any) -> dict[str, Any]:
        return {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": title,
            "list_url": self._url("changelist"),
            "add_url": self._url("add"),
            "remove_url": self._url("remove"),
            **extra,
        }

    # --- the list -------------------------------------------------------------------------

    def list_page(self, request: HttpRequest) -> HttpResponse:
        """The entries that apply, the newest first, a page at a time, searched by address."""
        self._require(request, self.has_view_permission(request))
        search = request.GET.get("q", "").strip()
        try:
            page = max(1, int(request.GET.get("p", "1")))
        except ValueError:
            page = 1
        rule = get_settings().suppression
        since = shown_since(rule, self.clock.now())
        store = get_store()
        entries: list[Suppression] = []
        total = 0
        try:
            per = self.list_per_page
            entries = store.list_suppressed(since=since, search=search or None, offset=(page - 1) * per, limit=per)
            total = store.count_suppressed(since=since, search=search or None)
        except QueueError as exc:
            self.message_user(request, f"The suppression list could not be read: {exc}", messages.ERROR)
        history = reverse(f"{self.admin_site.name}:{self.opts.app_label}_deliveryrecord_changelist")
        rows = [
            {"entry": e, "history_url": f"{history}?{urlencode({'q': str(e.item_id)})}" if e.item_id else ""}
            for e in entries
        ]
        last = max(1, -(-total // self.list_per_page))
        context = self._context(
            request,
            "Suppression list",
            rows=rows,
            search=search,
            total=total,
            page=page,
            prev_url=f"?{urlencode({'q': search, 'p': page - 1})}" if page > 1 else "",
            next_url=f"?{urlencode({'q': search, 'p': page + 1})}" if page < last else "",
            last_page=last,
            rule=rule,
            statuses=", ".join(sorted(rule.statuses)) if rule else "",
            may_add=self.has_add_permission(request),
            may_remove=self.has_delete_permission(request),
            store_name=type(store).__name__,
        )
        return TemplateResponse(request, "django_mailqueue/admin/suppression_list.html", context)

    # --- adding by hand ----------------------------------------------------------------------

    def add_page(self, request: HttpRequest) -> HttpResponse:
        """A form; its POST (with Django's CSRF check) lists the addresses."""
        self._require(request, self.has_add_permission(request))
        form = AddForm(request.POST if request.method == "POST" else None)
        if request.method == "POST" and form.is_valid():
            entries = form.entries(self.clock.now())
            if entries:
                try:
                    get_store().suppress(entries)
                except QueueError as exc:
                    self.message_user(request, f"Nothing was added: {exc}", messages.ERROR)
                else:
                    self._log(request, ADDITION, [e.address for e in entries], "Added to the suppression list.")
                    names = ", ".join(e.address for e in entries[:5]) + (" …" if len(entries) > 5 else "")
                    self.message_user(request, f"{len(entries)} listed: {names}", messages.SUCCESS)
                    return HttpResponseRedirect(self._url("changelist"))
        context = self._context(request, "Add to the suppression list", form=form, rule=get_settings().suppression)
        return TemplateResponse(request, "django_mailqueue/admin/suppression_add.html", context)

    # --- removing ------------------------------------------------------------------------------

    def remove_page(self, request: HttpRequest) -> HttpResponse:
        """POST the addresses: a page asks first; its POST (`confirm=yes`) takes them off the list."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        self._require(request, self.has_delete_permission(request))
        addresses = list(dict.fromkeys(a for a in request.POST.getlist("address") if a))
        if not addresses:
            self.message_user(request, "No address selected: nothing was removed.", messages.WARNING)
            return HttpResponseRedirect(self._url("changelist"))
        if len(addresses) > MAX_ADDRESSES:
            self.message_user(request, f"At most {MAX_ADDRESSES} addresses at a time.", messages.ERROR)
            return HttpResponseRedirect(self._url("changelist"))
        store = get_store()
        if request.POST.get("confirm") != "yes":
            try:
                listed = store.suppressed(addresses, since=shown_since(None, self.clock.now()))
            except QueueError as exc:
                self.message_user(request, f"The suppression list could not be read: {exc}", messages.ERROR)
                return HttpResponseRedirect(self._url("changelist"))
            entries = [listed[a] for a in addresses if a in listed]
            if not entries:
                self.message_user(request, "None of them is on the list any more.", messages.WARNING)
                return HttpResponseRedirect(self._url("changelist"))
            context = self._context(request, "Remove from the suppression list", entries=entries)
            return TemplateResponse(request, "django_mailqueue/admin/suppression_confirm.html", context)
        try:
            removed = store.unsuppress(addresses)
        except QueueError as exc:
            self.message_user(request, f"Nothing was removed: {exc}", messages.ERROR)
            return HttpResponseRedirect(self._url("changelist"))
        self._log(request, DELETION, addresses, "Removed from the suppression list.")
        self.message_user(
            request,
            f"{removed} taken off the suppression list: the next message to "
            f"{'it' if removed == 1 else 'each'} is tried.",
            messages.SUCCESS,
        )
        return HttpResponseRedirect(self._url("changelist"))

    def _log(self, request: HttpRequest, flag: int, addresses: list[str], message: str) -> None:
        """Who added or removed which address, in Django's admin log (one `LogEntry` each)."""
        user_id = request.user.pk
        assert isinstance(user_id, int)
        content_type = ContentType.objects.get_for_model(SuppressedAddress)
        LogEntry.objects.bulk_create(
            [
                LogEntry(
                    user_id=user_id,
                    content_type=content_type,
                    object_id=address[:255],
                    object_repr=address[:200],
                    action_flag=flag,
                    change_message=message,
                )
                for address in addresses
            ]
        )
