"""Admin pages whose rows no one adds, changes or deletes through Django's forms."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest


class ReadOnlyRows:
    """Mixed into a `ModelAdmin` (before it): no add, change or delete permission, whoever asks; what may be
    viewed stays the admin's own (`has_view_permission`). The queue's actions have permissions of their own."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
