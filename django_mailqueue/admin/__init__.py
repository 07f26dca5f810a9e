"""Admin pages: the queue (through the configured store), its overview, and the delivery history."""

from __future__ import annotations

from django.contrib import admin

from ..models import DeliveryRecord, QueuedItem, QueueOverview
from .index import OverviewEntryAdmin
from .queue import QueueAdmin
from .records import DeliveryRecordAdmin

admin.site.register(QueuedItem, QueueAdmin)
admin.site.register(QueueOverview, OverviewEntryAdmin)
admin.site.register(DeliveryRecord, DeliveryRecordAdmin)

__all__ = ["DeliveryRecordAdmin", "OverviewEntryAdmin", "QueueAdmin"]
