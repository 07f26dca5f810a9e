"""The delivery history in the Django admin: listed and shown read-only; only pruning removes records."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import URLPattern

from ..history import history_alias
from ..models import DeliveryRecord
from ..stores import get_store
from .headers import secure_urls

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[DeliveryRecord]
else:  # ModelAdmin is generic only in django-stubs
    _ModelAdmin = admin.ModelAdmin


class DeliveryRecordAdmin(_ModelAdmin):
    """Every delivered, deferred and failed outcome the worker recorded, filterable and searchable."""

    list_display = (
        "recorded",
        "state",
        "recipient",
        "sender",
        "queue",
        "reply",
        "remote_mta",
        "attempt",
        "possibly_delivered",
    )
    list_display_links = ("recorded",)
    list_filter = (
        "state",
        ("recorded", admin.DateFieldListFilter),
        "queue",
        "domain",
        "possibly_delivered",
    )
    search_fields = ("recipient", "sender", "message_id")
    search_help_text = "A recipient or sender address (or part of one), a Message-ID, or an item's id."
    list_per_page = 100
    # the history can be long: no count of every row on each page
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
    )
    readonly_fields = fields

    @admin.display(description="reply")
    def get_urls(self) -> list[URLPattern]:
        return secure_urls(super().get_urls())

    def reply(self, record: DeliveryRecord) -> str:
        code = "" if record.reply_code is None else f"{record.reply_code} "
        text = record.reply_text if len(record.reply_text) <= 120 else record.reply_text[:120] + " …"
        return f"{code}{record.reply_status} {text}".strip()

    def get_queryset(self, request: HttpRequest) -> QuerySet[DeliveryRecord]:
        # the database the worker writes the history to (the ORM store's)
        return super().get_queryset(request).using(history_alias(get_store()))

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[DeliveryRecord], search_term: str
    ) -> tuple[QuerySet[DeliveryRecord], bool]:
        try:
            item_id = uuid.UUID(search_term.strip())
        except ValueError:
            return super().get_search_results(request, queryset, search_term)
        return queryset.filter(item_id=item_id), False

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
