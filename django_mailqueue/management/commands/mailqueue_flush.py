"""`manage.py mailqueue_flush`: make deferred (and scheduled) mail due now, as Postfix's `postqueue -f`."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ...clock import SystemClock
from ...exceptions import QueueError
from ...items import ItemQuery, ItemState
from ...stores import get_store


class Command(BaseCommand):
    help = "Make deferred mail due now (and scheduled mail too, with --scheduled); leased items are left alone."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--queue", default=None, help="only this queue")
        parser.add_argument("--domain", default=None, help="only items with a recipient at this domain")
        parser.add_argument("--scheduled", action="store_true", help="also items never tried whose time is later")

    def handle(self, *args: Any, **options: Any) -> None:
        store, now = get_store(), SystemClock().now()
        states = [ItemState.DEFERRED] + ([ItemState.SCHEDULED] if options["scheduled"] else [])
        moved = 0
        try:
            for state in states:
                query = ItemQuery(state=state, queue=options["queue"], domain=options["domain"], now=now)
                # Moving an item makes it due, so it leaves the filter: always read the first page.
                while page := [item for item in store.list(query, limit=500) if item.next_attempt > now]:
                    for item in page:
                        moved += store.reschedule(item.id, at=now)
                    if len(page) < 500:
                        break
        except QueueError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"mailqueue: {moved} items due now")
