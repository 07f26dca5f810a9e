"""`manage.py mailqueue_cancel [ID ...] [filters] [--all] [--dry-run] [--json]`: drop items and their messages."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ...clock import SystemClock
from ...exceptions import QueueError
from ...selection import Action, run_action
from ...stores import get_store
from ..filters import action_selection, add_action_arguments, item_printer, print_report


class Command(BaseCommand):
    help = (
        "Cancel queued items — by id, or every item passing the filters — each dropped with its message, "
        "leased or not, and never delivered again."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_action_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        selection = action_selection(options, "cancel")
        try:
            report = run_action(
                get_store(),
                Action.CANCEL,
                selection,
                now=SystemClock().now(),
                dry_run=options["dry_run"],
                on_item=item_printer(self.stdout, options),
            )
        except QueueError as exc:
            raise CommandError(str(exc)) from None
        print_report(self.stdout, report, options)
