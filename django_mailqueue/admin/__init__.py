"""Admin pages: the queue and the suppression list (through the configured store), the queue's overview, and the
delivery history."""

from __future__ import annotations

from django.contrib import admin

from ..models import DeliveryRecord, QueuedItem, QueueOverview, SuppressedAddress
from .index import OverviewEntryAdmin
from .queue import QueueAdmin
from .records import DeliveryRecordAdmin
from .suppression import SuppressionAdmin

admin.site.register(QueuedItem, QueueAdmin)
admin.site.register(QueueOverview, OverviewEntryAdmin)
admin.site.register(DeliveryRecord, DeliveryRecordAdmin)
admin.site.register(SuppressedAddress, SuppressionAdmin)

__all__ = ["DeliveryRecordAdmin", "OverviewEntryAdmin", "QueueAdmin", "SuppressionAdmin"]
