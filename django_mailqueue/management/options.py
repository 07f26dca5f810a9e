"""The command-line options the management commands share — ids, filters, `--all`, `--dry-run`, whole
numbers — and the bulk actions' command (mailqueue_cancel, mailqueue_retry) with how it prints its report."""

from __future__ import annotations

import argparse
import json
import uuid
from collections.abc import Callable
from typing import Any

from django.core.management.base import BaseCommand, CommandError, OutputWrapper

from ..core.clock import SystemClock
from ..core.errors import QueueError
from ..core.items import ItemState
from ..selection import Action, BulkReport, Outcome, Selection, domain_filter, parse_age, run_action
from ..stores import get_store
from .arguments import positive as positive  # the commands' whole numbers, here too

FILTER_OPTIONS = "--state, --queue, --domain, --search, --older-than"


def item_id(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an item id (a UUID)") from None


def states(value: str) -> tuple[ItemState, ...]:
    names = [name.strip().lower() for name in value.split(",") if name.strip()]
    known = [s.value for s in ItemState]
    wrong = [name for name in names if name not in known]
    if not names or wrong:
        raise argparse.ArgumentTypeError(f"{value!r}: name one or more of {', '.join(known)}, comma-separated")
    return tuple(ItemState(name) for name in names)


def domain(value: str) -> str:
    found = domain_filter(value)
    if not found:
        raise argparse.ArgumentTypeError(f"{value!r} is not a domain")
    return found


def search(value: str) -> str:
    if not value.strip():
        raise argparse.ArgumentTypeError("give some text to search for")
    return value.strip()


def age(value: str) -> Any:
    try:
        return parse_age(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_selection_arguments(parser: argparse.ArgumentParser) -> None:
    """Item ids, then the filters; an item must pass every filter given."""
    parser.add_argument("ids", nargs="*", type=item_id, metavar="ID", help="item ids (as mailqueue_list shows)")
    states_known = ", ".join(s.value for s in ItemState)
    parser.add_argument("--state", type=states, default=(), help=f"only items in these states ({states_known})")
    parser.add_argument("--queue", default=None, help="only items of this queue")
    parser.add_argument("--domain", type=domain, default=None, help="only items with a recipient at this domain")
    parser.add_argument(
        "--search",
        type=search,
        default=None,
        help="only items with a recipient at @DOMAIN, a recipient address starting so, or this word in the subject",
    )
    parser.add_argument(
        "--older-than",
        type=age,
        default=None,
        metavar="AGE",
        help="only items queued at least this long ago (30m, 2h, 1d)",
    )


def add_action_arguments(parser: argparse.ArgumentParser) -> None:
    add_selection_arguments(parser)
    parser.add_argument("--all", action="store_true", help="every item in the queue, when no id or filter is given")
    parser.add_argument("--dry-run", action="store_true", help="say what would be done, and change nothing")
    parser.add_argument("--json", action="store_true", help="print one JSON object: the counts and ids by outcome")


def selection_from(options: dict[str, Any]) -> Selection:
    return Selection(
        ids=tuple(options["ids"]),
        states=tuple(options["state"]),
        queue=options["queue"],
        domain=options["domain"],
        search=options["search"],
        older_than=options["older_than"],
    )


def action_selection(options: dict[str, Any], verb: str) -> Selection:
    """The selection an action runs on; refuses to act on every item unless `--all` says so."""
    selection = selection_from(options)
    if not selection.narrowed and not options["all"]:
        raise CommandError(f"name the items to {verb}: ids, a filter ({FILTER_OPTIONS}), or --all for every item")
    return selection


#: how each outcome is said, done and in a dry run
_SAID = {
    Outcome.CANCELLED: ("cancelled", "would cancel"),
    Outcome.MADE_DUE: ("due now", "would make due now"),
    Outcome.ALREADY_DUE: ("already due", "already due"),
    Outcome.SENT_AGAIN: ("failed, sent again", "failed, would send again"),
    Outcome.LEASED: ("being delivered (leased), left to its worker", "being delivered (leased), would be left alone"),
    Outcome.MISSING: ("not in the queue", "not in the queue"),
    Outcome.FILTERED_OUT: ("does not pass the filters, left alone", "does not pass the filters, would be left alone"),
}


def item_printer(stdout: OutputWrapper, options: dict[str, Any]) -> Callable[[uuid.UUID, Outcome], None] | None:
    """A line an item as it is done, unless `--json` or `-v 0` asked for quiet."""
    if options["json"] or int(options["verbosity"]) < 1:
        return None
    dry_run = bool(options["dry_run"])

    def say(item_id: uuid.UUID, outcome: Outcome) -> None:
        stdout.write(f"mailqueue: {_SAID[outcome][dry_run]} {item_id}")

    return say


def print_report(stdout: OutputWrapper, report: BulkReport, options: dict[str, Any]) -> None:
    """The report's totals (or the whole report as JSON); exits 1 through CommandError for ids not in the queue."""
    if options["json"]:
        stdout.write(json.dumps(report.as_dict(), indent=2))
    else:
        counts = [f"{report.count(o)} {_SAID[o][report.dry_run]}" for o in Outcome if report.count(o)]
        total = sum(report.count(o) for o in Outcome)
        noun = "item" if total == 1 else "items"
        prefix = "dry run, nothing changed: " if report.dry_run else ""
        stdout.write(f"mailqueue: {prefix}{total} {noun} selected" + (": " + ", ".join(counts) if counts else ""))
    missing = report.ids.get(Outcome.MISSING, [])
    if missing and report.selection.ids:
        raise CommandError(f"no such item: {', '.join(str(i) for i in missing)}")


class ActionCommand(BaseCommand):
    """A bulk action as a command: ids or filters, `--all`, `--dry-run`, `--json`; the work is `run_action`'s."""

    action: Action
    #: how the refusal to act on every item names the action
    verb: str

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_action_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        selection = action_selection(options, self.verb)
        try:
            report = run_action(
                get_store(),
                self.action,
                selection,
                now=SystemClock().now(),
                dry_run=options["dry_run"],
                on_item=item_printer(self.stdout, options),
            )
        except QueueError as exc:
            raise CommandError(str(exc)) from None
        print_report(self.stdout, report, options)
