"""The queue's admin actions — send now, reschedule, cancel, send again — each with its own permission, done
through the store."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.http import HttpRequest

from ..core.errors import QueueError
from ..core.items import ItemQuery, QueueItem
from ..models import QueuedItem
from ..stores.base import QueueStore

#: A POST naming more items than this is refused: the list shows far fewer per page.
MAX_ITEMS_PER_ACTION = 500
#: An action on every item matching a filter takes the first this many, in list order (docs/admin.md).
MAX_ITEMS_ACROSS = 5_000
#: ... read from the store this many at a time.
ACROSS_BATCH = 500


@dataclass(frozen=True)
class QueueAction:
    """One thing an operator can do to items, and the permission it takes (`app_label.codename`)."""

    name: str
    label: str
    codename: str
    #: what the admin log says was done
    verb: str

    @property
    def permission(self) -> str:
        return f"{QueuedItem._meta.app_label}.{self.codename}"


SEND_NOW = QueueAction("send_now", "Send now", "send_now_queueditem", "Sent now")
RESCHEDULE = QueueAction("reschedule", "Reschedule…", "reschedule_queueditem", "Rescheduled")
CANCEL = QueueAction("cancel", "Cancel…", "cancel_queueditem", "Cancelled")
#: a failed item kept (`KEEP_FAILED`) back in the queue: its failed recipients pending, due now
SEND_AGAIN = QueueAction("send_again", "Send again", "send_again_queueditem", "Sent again")
ACTIONS: tuple[QueueAction, ...] = (SEND_NOW, RESCHEDULE, CANCEL, SEND_AGAIN)
ACTIONS_BY_NAME = {action.name: action for action in ACTIONS}


def allowed_actions(request: HttpRequest) -> list[QueueAction]:
    """The actions the request's user may take: each needs its own permission."""
    return [action for action in ACTIONS if request.user.has_perm(action.permission)]


@dataclass
class ActionResult:
    """What an action did: items changed, items no longer in the queue, items a worker was delivering."""

    done: list[QueueItem] = field(default_factory=list)
    gone: list[uuid.UUID] = field(default_factory=list)
    #: changed while a worker held the lease: its delivery under way goes on
    leased: list[QueueItem] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def matching_ids(store: QueueStore, query: ItemQuery) -> list[uuid.UUID]:
    """The ids of the first `MAX_ITEMS_ACROSS` items passing `query`, read a batch at a time before any changes."""
    return [item.id for item in itertools.islice(store.iter_items(query, batch=ACROSS_BATCH), MAX_ITEMS_ACROSS)]


def move_items(store: QueueStore, ids: Sequence[uuid.UUID], *, at: datetime, now: datetime) -> ActionResult:
    """Move each item's next attempt to `at` (send now: `at` is now), keeping any worker's lease."""
    result = ActionResult()
    for item_id in ids:
        try:
            item = store.get(item_id)
            if item is None or not store.reschedule(item_id, at=at):
                result.gone.append(item_id)
                continue
        except QueueError as exc:
            result.errors.append(f"{item_id}: {exc}")
            continue
        result.done.append(item)
        if item.leased_at(now):
            result.leased.append(item)
    return result


def cancel_items(store: QueueStore, ids: Sequence[uuid.UUID], *, now: datetime) -> ActionResult:
    """Drop each item and its message, `ACROSS_BATCH` in a store call; an item a worker holds may still reach the
    recipients it is delivering to."""
    result = ActionResult()
    for start in range(0, len(ids), ACROSS_BATCH):
        batch = ids[start : start + ACROSS_BATCH]
        try:
            cancelled = store.cancel_many(batch)
        except QueueError as exc:
            result.errors.append(f"{len(batch)} items from {batch[0]}: {exc}")
            continue
        for item_id, item in zip(batch, cancelled, strict=True):
            if item is None:
                result.gone.append(item_id)
                continue
            result.done.append(item)
            if item.leased_at(now):
                result.leased.append(item)
    return result


def send_items_again(store: QueueStore, ids: Sequence[uuid.UUID], *, now: datetime) -> ActionResult:
    """Send each kept failed item again (`QueueStore.send_again`), `ACROSS_BATCH` in a store call; an item not
    failed (any more) is left as it is, counted with those gone."""
    result = ActionResult()
    for start in range(0, len(ids), ACROSS_BATCH):
        batch = ids[start : start + ACROSS_BATCH]
        try:
            again = store.send_again(batch, now=now)
        except QueueError as exc:
            result.errors.append(f"{len(batch)} items from {batch[0]}: {exc}")
            continue
        for item_id, item in zip(batch, again, strict=True):
            if item is None:
                result.gone.append(item_id)
            else:
                result.done.append(item)
    return result


def log_action(user_id: int, action: QueueAction, items: Sequence[QueueItem], detail: str = "") -> None:
    """Record in Django's admin log who did `action` to `items` (one `LogEntry` per item)."""
    if not items:
        return
    content_type = ContentType.objects.get_for_model(QueuedItem, for_concrete_model=False)
    message = f"{action.verb}{' ' + detail if detail else ''}."
    LogEntry.objects.bulk_create(
        [
            LogEntry(
                user_id=user_id,
                content_type=content_type,
                object_id=str(item.id),
                object_repr=item_repr(item)[:200],
                action_flag=DELETION if action is CANCEL else CHANGE,
                change_message=message,
            )
            for item in items
        ]
    )


def item_repr(item: QueueItem) -> str:
    """How an item is named in messages and the admin log."""
    subject = f" “{item.subject}”" if item.subject else ""
    return f"{item.id}{subject} from <{item.sender}>"
