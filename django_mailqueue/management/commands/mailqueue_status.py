"""`manage.py mailqueue_status [--json]`: counts by state and queue, the oldest due item, deferred by domain."""

from __future__ import annotations

import argparse
import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ...core.clock import SystemClock
from ...core.errors import QueueError
from ...core.items import ItemState
from ...stores import get_store


class Command(BaseCommand):
    help = "Show the mail queue: counts by state and queue, the oldest due item, deferred mail by domain."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            summary = get_store().summary(now=SystemClock().now())
        except QueueError as exc:
            raise CommandError(str(exc)) from None
        data = summary.as_dict()
        if options["json"]:
            self.stdout.write(json.dumps(data, indent=2))
            return
        states = [s.value for s in ItemState]
        self.stdout.write(f"{data['total']} items: " + ", ".join(f"{data['by_state'][s]} {s}" for s in states))
        if data["by_queue"]:
            self.stdout.write("")
            self.stdout.write(f"{'queue':<20}" + "".join(f"{s:>11}" for s in states))
            for queue, counts in data["by_queue"].items():
                self.stdout.write(f"{queue:<20}" + "".join(f"{counts[s]:>11}" for s in states))
        oldest = data["oldest_due"]
        if oldest:
            self.stdout.write("")
            self.stdout.write(
                f"oldest due: {oldest['id']} (queue {oldest['queue']}, due since "
                f"{oldest['next_attempt']}, queued {oldest['created']})"
            )
        if data["deferred_by_domain"]:
            self.stdout.write("")
            self.stdout.write("deferred recipients by domain:")
            for domain, count in list(data["deferred_by_domain"].items())[:20]:
                self.stdout.write(f"  {count:>8}  {domain}")
