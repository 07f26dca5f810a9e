"""`manage.py mailqueue_cancel [ID ...] [filters] [--all] [--dry-run] [--json]`: drop items and their messages."""

from __future__ import annotations

from ...selection import Action
from ..options import ActionCommand


class Command(ActionCommand):
    help = (
        "Cancel queued items — by id, or every item passing the filters — each dropped with its message, "
        "leased or not, and never delivered again."
    )
    action = Action.CANCEL
    verb = "cancel"
