"""Suspended destinations in the admin: listed on the overview, resumed now under their own permission."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse

from ..core.errors import QueueError
from ..core.items import ItemQuery, QueueItem
from ..core.shaping import Suspension, key_domain
from ..models import Suspension as SuspensionModel
from ..stores import get_store
from ..stores.base import QueueStore
from .actions import ACROSS_BATCH, MAX_ITEMS_ACROSS
from .listing import span

if TYPE_CHECKING:
    from .queue import QueueAdmin

#: The permission "resume now" takes (viewing the overview takes the queue's view permission).
RESUME_PERMISSION = f"{SuspensionModel._meta.app_label}.resume_suspension"


@dataclass(frozen=True)
class SuspensionRow:
    """A suspension as the overview shows it."""

    suspension: Suspension
    #: how long until it ends, short ("9 min 12 s")
    left: str
    #: the recipient domain it names; None for a ".suffix" or a relay
    domain: str | None
    #: the queue list filtered by that domain
    list_url: str | None


def suspension_rows(model_admin: QueueAdmin, suspensions: list[Suspension], now: datetime) -> list[SuspensionRow]:
    rows = []
    for suspension in suspensions:
        domain = key_domain(suspension.destination)
        rows.append(
            SuspensionRow(
                suspension=suspension,
                left=span(suspension.until - now) or "< 1 s",
                domain=domain,
                list_url=model_admin._url("changelist") + "?" + urlencode({"domain": domain}) if domain else None,
            )
        )
    return rows


def waiting_items(store: QueueStore, suspension: Suspension, now: datetime) -> list[QueueItem]:
    """The items a suspended recipient domain holds back: not leased, every pending recipient at the domain, due
    after now and by the suspension's end — the first `MAX_ITEMS_ACROSS`, read through the domain filter."""
    domain = key_domain(suspension.destination)
    if domain is None:
        return []
    held = (
        item
        for item in store.iter_items(ItemQuery(domain=domain), batch=ACROSS_BATCH)
        if now < item.next_attempt <= suspension.until
        and not item.leased_at(now)
        and item.pending
        and all(r.domain == domain for r in item.pending)
    )
    return list(itertools.islice(held, MAX_ITEMS_ACROSS))


def resume_view(model_admin: QueueAdmin, request: HttpRequest) -> HttpResponse:
    """Resume a suspended destination: a POST asks first, a second POST with `confirm=yes` forgets the suspension
    (its strikes start again) and makes the items it held back due now."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    model_admin._require_view(request)
    if not request.user.has_perm(RESUME_PERMISSION):
        raise PermissionDenied
    overview = model_admin._url("overview")
    destination = request.POST.get("destination", "")
    now = model_admin.clock.now()
    store = get_store()
    try:
        found = store.suspensions(now=now, destinations=[destination]) if destination else []
        if not found:
            model_admin.message_user(request, f"{destination!r} is not suspended (any more).", messages.WARNING)
            return HttpResponseRedirect(overview)
        (suspension,) = found
        waiting = waiting_items(store, suspension, now)
        if request.POST.get("confirm") != "yes":
            context = model_admin._context(
                request,
                "Resume a suspended destination",
                suspension=suspension,
                domain=key_domain(destination),
                waiting=len(waiting),
                capped=len(waiting) >= MAX_ITEMS_ACROSS,
                resume_url=model_admin._url("resume"),
                now=now,
            )
            return TemplateResponse(request, "django_mailqueue/admin/suspension_resume.html", context)
        store.clear_suspension(destination)
        moved = sum(1 for item in waiting if store.reschedule(item.id, at=now))
    except QueueError as exc:
        model_admin.message_user(request, f"The queue could not be read or changed: {exc}", messages.ERROR)
        return HttpResponseRedirect(overview)
    user_id = request.user.pk
    assert isinstance(user_id, int)
    LogEntry.objects.create(
        user_id=user_id,
        content_type=ContentType.objects.get_for_model(SuspensionModel),
        object_id=destination[:200],
        object_repr=destination[:200],
        action_flag=DELETION,
        change_message=f"Resumed now ({suspension.strikes} strikes, until {suspension.until.isoformat()}); "
        f"{moved} items due now.",
    )
    model_admin.message_user(
        request, f"{destination} resumed: workers may connect to it again; {moved} items due now.", messages.SUCCESS
    )
    return HttpResponseRedirect(overview)
