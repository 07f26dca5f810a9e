"""`manage.py mailqueue_status [--json]`: counts by state and queue, the oldest due item, deferred by domain,
suspended destinations, the limits in force."""

from __future__ import annotations

import argparse
import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ...conf import get_settings
from ...core.clock import SystemClock
from ...core.errors import QueueError
from ...core.items import ItemState
from ...shaping_limits import limits_in_force
from ...stores import get_store


class Command(BaseCommand):
    help = (
        "Show the mail queue: counts by state and queue, the oldest due item, deferred mail by domain, "
        "suspended destinations and the limits in force."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args: Any, **options: Any) -> None:
        now = SystemClock().now()
        store = get_store()
        try:
            summary = store.summary(now=now)
            suspended = store.suspensions(now=now)
        except QueueError as exc:
            raise CommandError(str(exc)) from None
        data = summary.as_dict()
        data["suspended"] = [suspension.as_dict() for suspension in suspended]
        limits = limits_in_force(get_settings())
        data["limits"] = [row.as_dict() for row in limits]
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
        self.stdout.write("")
        if not suspended:
            self.stdout.write("suspended destinations: none")
        else:
            self.stdout.write("suspended destinations (no new connection before the time given):")
        for suspension in suspended:
            left = suspension.until - now
            self.stdout.write(
                f"  {suspension.destination}  until {suspension.until.isoformat(timespec='seconds')} "
                f"(in {int(left.total_seconds())} s), strike {suspension.strikes} since "
                f"{suspension.since.isoformat(timespec='seconds')}: {suspension.reply}"
            )
        if limits:
            self.stdout.write("")
            self.stdout.write("limits in force (rate: every worker together; connections: per worker process):")
            width = max(len(row.destination) for row in limits)
            for row in limits:
                self.stdout.write(
                    f"  {row.destination:<{width}}  rate {row.rate}, {row.connections} connections, "
                    f"{row.messages_per_connection} messages a connection, suspensions {row.suspension}, "
                    f"dead after {row.policy.dead_after}  ({row.source})"
                )
