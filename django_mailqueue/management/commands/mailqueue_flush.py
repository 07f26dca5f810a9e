"""`manage.py mailqueue_flush`: make deferred (and scheduled) mail due now, as Postfix's `postqueue -f`."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ...core.clock import SystemClock
from ...core.errors import QueueError
from ...core.items import ItemState
from ...selection import Action, Outcome, Selection, run_action
from ...stores import get_store
from ..options import domain


class Command(BaseCommand):
    help = "Make deferred mail due now (and scheduled mail too, with --scheduled); leased items are left alone."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--queue", default=None, help="only this queue")
        parser.add_argument("--domain", type=domain, default=None, help="only items with a recipient at this domain")
        parser.add_argument("--scheduled", action="store_true", help="also items never tried whose time is later")

    def handle(self, *args: Any, **options: Any) -> None:
        states = (ItemState.DEFERRED, ItemState.SCHEDULED) if options["scheduled"] else (ItemState.DEFERRED,)
        selection = Selection(states=states, queue=options["queue"], domain=options["domain"])
        try:
            report = run_action(get_store(), Action.RETRY, selection, now=SystemClock().now())
        except QueueError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"mailqueue: {report.count(Outcome.MADE_DUE)} items due now")
