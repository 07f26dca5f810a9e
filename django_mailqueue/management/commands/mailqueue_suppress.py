"""`manage.py mailqueue_suppress list|add|remove`: the suppression list from a shell, through the store."""

from __future__ import annotations

import argparse
import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ...conf import get_settings
from ...core.clock import SystemClock
from ...core.errors import QueueError
from ...core.items import Suppression
from ...stores import get_store
from ...suppression import BY_HAND_STATUS, by_hand, shown_since, suppression_key
from ..options import positive

#: entries read per store call while listing
_PAGE = 500


def entry_json(entry: Suppression) -> dict[str, Any]:
    return {
        "address": entry.address,
        "status": entry.reply.status,
        "code": entry.reply.code,
        "reply": entry.reply.text,
        "since": entry.since.isoformat(),
        "item_id": None if entry.item_id is None else str(entry.item_id),
    }


class Command(BaseCommand):
    help = (
        "The suppression list: addresses a permanent failure (MAILQUEUE['SUPPRESSION']['STATUSES']) put on it, "
        "to which the worker sends nothing until they are removed or DAYS have passed. "
        "list [--search TEXT] [--limit N] [--json] | add ADDRESS ... [--status 5.1.1] [--reason TEXT] | "
        "remove ADDRESS ..."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        verbs = parser.add_subparsers(dest="verb", required=True, metavar="list|add|remove")
        listing = verbs.add_parser("list", help="the addresses listed, the newest first")
        listing.add_argument("--search", default=None, help="only addresses containing this text (any case)")
        listing.add_argument("--limit", type=positive, default=None, help="at most this many (default: all)")
        listing.add_argument("--json", action="store_true", help='one JSON object: {"entries": [...], "count": N}')
        adding = verbs.add_parser("add", help="list addresses by hand: nothing is sent to them")
        adding.add_argument("addresses", nargs="+", metavar="ADDRESS")
        adding.add_argument("--status", default=BY_HAND_STATUS, help=f"the status they fail with ({BY_HAND_STATUS})")
        adding.add_argument("--reason", default="", help="why, shown with the entry and in the failure's reply")
        removing = verbs.add_parser("remove", help="take addresses off the list: the next message is tried")
        removing.add_argument("addresses", nargs="+", metavar="ADDRESS")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            getattr(self, f"_{options['verb']}")(options)
        except QueueError as exc:
            raise CommandError(str(exc)) from None
        if get_settings().suppression is None and options["verb"] != "list":
            self.stderr.write("mailqueue: MAILQUEUE['SUPPRESSION'] is None: the worker does not read the list")

    def _list(self, options: dict[str, Any]) -> None:
        store, limit = get_store(), options["limit"]
        since = shown_since(get_settings().suppression, SystemClock().now())
        entries: list[Suppression] = []
        while limit is None or len(entries) < limit:
            want = _PAGE if limit is None else min(_PAGE, limit - len(entries))
            page = store.list_suppressed(since=since, search=options["search"], offset=len(entries), limit=want)
            entries += page
            if len(page) < want:
                break
        if options["json"]:
            self.stdout.write(json.dumps({"entries": [entry_json(e) for e in entries], "count": len(entries)}))
            return
        if not entries:
            self.stdout.write("mailqueue: no address matches" if options["search"] else "mailqueue: the list is empty")
            return
        for e in entries:
            item = f"item {e.item_id}" if e.item_id else "by hand"
            self.stdout.write(f"{e.address}  {e.reply.status}  since {e.since:%Y-%m-%d %H:%M:%S} UTC  {item}")
            self.stdout.write(f"    {e.reply}")
        self.stdout.write(f"-- {len(entries)} {'address' if len(entries) == 1 else 'addresses'}")

    def _add(self, options: dict[str, Any]) -> None:
        now = SystemClock().now()
        try:
            entries = {
                e.address: e
                for e in (
                    by_hand(a, status=options["status"], reason=options["reason"], now=now)
                    for a in options["addresses"]
                )
            }
        except ValueError as exc:
            raise CommandError(f"nothing added: {exc}") from None
        get_store().suppress(list(entries.values()))
        self.stdout.write(f"mailqueue: {len(entries)} listed: {', '.join(entries)}")

    def _remove(self, options: dict[str, Any]) -> None:
        keys = list(dict.fromkeys(suppression_key(a.strip()) for a in options["addresses"]))
        removed = get_store().unsuppress(keys)
        self.stdout.write(f"mailqueue: {removed} of {len(keys)} taken off the list")
