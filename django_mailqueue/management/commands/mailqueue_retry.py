"""`manage.py mailqueue_retry [ID ...] [filters] [--all] [--dry-run] [--json]`: send items now (due at once),
and failed items kept (`KEEP_FAILED`) again."""

from __future__ import annotations

from ...selection import Action
from ..options import ActionCommand


class Command(ActionCommand):
    help = (
        "Send queued items now — by id, or every item passing the filters: each becomes due at once. "
        "Items a worker is delivering (leased) are left to it. A failed item (kept KEEP_FAILED seconds) is sent "
        "again: its failed recipients pending, due now, a new lifetime (--state failed: only those)."
    )
    action = Action.RETRY
    verb = "retry"
