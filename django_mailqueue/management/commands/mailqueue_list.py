"""`manage.py mailqueue_list [ID ...] [filters] [--limit N] [--json]`: the queue item by item, as Postfix's `mailq`."""

from __future__ import annotations

import argparse
import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ...core.clock import SystemClock
from ...core.errors import QueueError
from ...selection import walk
from ...stores import get_store
from ..mailq import HEADER, item_json, item_lines, size
from ..options import add_selection_arguments, positive, selection_from


class Command(BaseCommand):
    help = (
        "List the queue as Postfix's mailq does: each item's id, size, age, state, attempts, queue and sender, "
        "then its recipients with their state and last reply. Read a batch at a time, printed as it is read."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_selection_arguments(parser)
        parser.add_argument("--limit", type=positive, default=None, help="at most this many items (default: all)")
        parser.add_argument(
            "--json", action="store_true", help='one JSON object: {"items": [...], "count": N, "bytes": N, ...}'
        )

    def handle(self, *args: Any, **options: Any) -> None:
        selection, limit, as_json = selection_from(options), options["limit"], options["json"]
        now = SystemClock().now()
        out = self.stdout
        count = total_bytes = 0
        more = False
        if as_json:  # written as the items come: a long listing is never held whole
            out.write(f'{{"now": {json.dumps(now.isoformat())}, "items": [', ending="")
        try:
            for item in walk(get_store(), selection, now=now):
                if limit is not None and count == limit:
                    more = True
                    break
                if as_json:
                    out.write(("," if count else "") + "\n" + json.dumps(item_json(item, now)), ending="")
                else:
                    out.write("\n".join([*([HEADER] if not count else []), *item_lines(item, now), ""]))
                count += 1
                total_bytes += item.size
        except QueueError as exc:
            raise CommandError(str(exc)) from None
        if as_json:
            out.write(f'\n], "count": {count}, "bytes": {total_bytes}, "more": {json.dumps(more)}}}')
        elif not count:
            out.write("mailqueue: no items match" if selection.narrowed else "mailqueue: the queue is empty")
        else:
            noun = "item" if count == 1 else "items"
            cut = f" (--limit {limit}; more match)" if more else ""
            out.write(f"-- {count} {noun}, {size(total_bytes)}{cut}")
