"""The overview's place in the admin index and sidebar: the admin of a proxy model, leading to the overview page."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponseBase, HttpResponseRedirect
from django.urls import URLPattern, path, reverse

from ..models import QueuedItem, QueueOverview
from .readonly import ReadOnlyRows

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[QueueOverview]
else:  # ModelAdmin is generic only in django-stubs
    _ModelAdmin = admin.ModelAdmin


class OverviewEntryAdmin(ReadOnlyRows, _ModelAdmin):
    """Listed as **Queue overview** for whoever may view the queue; its one page sends them to the overview."""

    def _may_view_queue(self, request: HttpRequest) -> bool:
        opts = QueuedItem._meta
        perms = (f"{opts.app_label}.{action}_{opts.model_name}" for action in ("view", "change"))
        return any(request.user.has_perm(perm) for perm in perms)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self._may_view_queue(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._may_view_queue(request)

    def get_urls(self) -> list[URLPattern]:
        name = f"{self.opts.app_label}_{self.opts.model_name}_changelist"
        return [path("", self.admin_site.admin_view(self.to_overview), name=name)]

    def to_overview(self, request: HttpRequest) -> HttpResponseBase:
        if not self._may_view_queue(request):
            raise PermissionDenied
        return HttpResponseRedirect(reverse(f"{self.admin_site.name}:django_mailqueue_queueditem_overview"))
