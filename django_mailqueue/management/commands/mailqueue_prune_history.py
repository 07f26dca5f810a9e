"""`manage.py mailqueue_prune_history`: delete delivery history older than `HISTORY_DAYS`, in batches, the
failed items kept longer than `KEEP_FAILED`, and the suppression list's entries older than `SUPPRESSION["DAYS"]`."""

from __future__ import annotations

import argparse
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ...conf import get_settings
from ...core.clock import SystemClock
from ...core.errors import QueueError
from ...history import history_alias, prune
from ...stores import get_store


class Command(BaseCommand):
    help = (
        "Delete delivery history records older than MAILQUEUE['HISTORY_DAYS'] days (0: all of them), failed "
        "items kept longer than MAILQUEUE['KEEP_FAILED'] seconds, and suppression list entries older than "
        "MAILQUEUE['SUPPRESSION']['DAYS']."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--days", type=int, default=None, help="keep this many days instead of HISTORY_DAYS")
        parser.add_argument("--batch", type=int, default=5000, help="rows deleted per statement (default 5000)")
        parser.add_argument(
            "--database",
            default=None,
            help="the database holding the history (default: the ORM store's, else 'default')",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        settings, now = get_settings(), SystemClock().now()
        days = options["days"] if options["days"] is not None else settings.history_days
        alias = options["database"] or history_alias(get_store())
        removed = prune(days=days, now=now, batch=max(1, options["batch"]), alias=alias)
        self.stdout.write(f"mailqueue: {removed} history records older than {days} days deleted")
        try:
            dropped = get_store().prune_failed(before=now - timedelta(seconds=settings.keep_failed))
        except QueueError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"mailqueue: {dropped} failed items kept longer than {settings.keep_failed} s deleted")
        rule = settings.suppression
        if rule is None:
            return  # no list: what it holds stays, for when it is turned on again
        try:
            pruned = get_store().prune_suppressed(before=rule.cut_off(now))
        except QueueError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"mailqueue: {pruned} suppression list entries older than {rule.days} days deleted")
