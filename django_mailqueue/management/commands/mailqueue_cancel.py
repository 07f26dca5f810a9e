"""`manage.py mailqueue_cancel ID [ID ...]`: drop items and their messages from the queue, leased or not."""

from __future__ import annotations

import argparse
import uuid
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ...exceptions import QueueError
from ...stores import get_store


def _item_id(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an item id (a UUID)") from None


class Command(BaseCommand):
    help = "Cancel queued items by id: each is dropped with its message, and never delivered again."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("ids", nargs="+", type=_item_id, help="item ids, as the admin and mailqueue_status show")

    def handle(self, *args: Any, **options: Any) -> None:
        store = get_store()
        missing = []
        try:
            for item_id in options["ids"]:
                if store.cancel(item_id) is None:
                    missing.append(str(item_id))
                else:
                    self.stdout.write(f"mailqueue: cancelled {item_id}")
        except QueueError as exc:
            raise CommandError(str(exc)) from None
        if missing:
            raise CommandError(f"no such item: {', '.join(missing)}")
