"""What the queue holds: items, their recipients and the replies that decided them."""

from __future__ import annotations

import enum
import os
import time
import uuid
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from .clock import from_micros, to_micros
from .search import term_matches, terms

DEFAULT_QUEUE = "default"
#: The next attempt of an item kept failed (`KEEP_FAILED`): never due, after every real time, so the stores'
#: due indexes never meet it (and a float score, as Redis keeps it, holds it exactly: below 2**53 µs).
NEVER = datetime(2200, 1, 1, tzinfo=UTC)


def new_item_id() -> uuid.UUID:
    """A new item's id: a UUID of version 8 (RFC 9562's own layout) whose first 32 bits (the first 8 hex
    digits, as the admin shows an id) count microseconds — the Unix time's, modulo 2**32, a round every
    71.6 minutes — and whose other 90 bits but the version and variant are random.

    Ids made one after the other sort next to each other, so an add writes one place of the id indexes
    (SQLite's and PostgreSQL's) instead of one page of them a message (docs/performance.md, "The bulk
    enqueue floor"); and items made in different microseconds of the same hour differ in their first 8
    digits, which the admin's search by an id's start finds them by.
    """
    micros = time.time_ns() // 1000 & 0xFFFF_FFFF
    rest = int.from_bytes(os.urandom(12)) & ~(0xF << 76 | 0x3 << 62) | 0x8 << 76 | 0x2 << 62
    return uuid.UUID(int=micros << 96 | rest)


def address_domain(address: str) -> str:
    """An envelope address's domain, lowercase; "" for a bare local part ("webmaster")."""
    return address.rpartition("@")[2].lower() if "@" in address else ""


class RecipientState(enum.StrEnum):
    """Where one recipient of an item stands. `delivered` and `failed` are final."""

    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"

    @property
    def final(self) -> bool:
        return self is not RecipientState.PENDING


class ItemState(enum.StrEnum):
    """How an item looks to an operator at a given time."""

    #: never tried, due now
    DUE = "due"
    #: never tried, due later (a not-before time, or rescheduled)
    SCHEDULED = "scheduled"
    #: tried at least once, some recipients still pending
    DEFERRED = "deferred"
    #: held by a worker whose lease has not expired
    LEASED = "leased"
    #: every recipient final, one failed, kept `KEEP_FAILED` to be sent again: never claimed
    FAILED = "failed"


class ItemOrder(enum.StrEnum):
    """The orders `list` gives; a store names the ones it gives cheaply in `QueueStore.orders`."""

    #: earliest next attempt first, then the oldest (the claim's order; the default)
    NEXT_ATTEMPT = "next_attempt"
    #: latest next attempt first, then the newest
    NEXT_ATTEMPT_DESC = "-next_attempt"
    #: in the order they were added, the oldest first
    OLDEST = "oldest"
    #: the newest first
    NEWEST = "newest"


@dataclass(frozen=True, slots=True)
class Reply:
    """A reply that decided (or deferred) a recipient.

    `code` is the SMTP reply code, or None when no server answered (DNS, a
    refused connection, a timeout, the queue's own decision); `status` the
    RFC 3463 enhanced status code ("5.1.1"); `text` the server's words,
    cleaned.
    """

    code: int | None
    status: str
    text: str

    @property
    def permanent(self) -> bool:
        """The enhanced status is 5.x.x (a 5xx reply the queue defers carries 4.x.x)."""
        return self.status.startswith("5") if self.status else (self.code is not None and 500 <= self.code < 600)

    def __str__(self) -> str:
        parts = [str(self.code)] if self.code is not None else []
        if self.status:
            parts.append(self.status)
        parts.append(self.text)
        return " ".join(parts)


@dataclass(frozen=True, slots=True)
class Recipient:
    """One envelope recipient of an item, with its state and the reply that set it."""

    address: str
    state: RecipientState = RecipientState.PENDING
    reply: Reply | None = None
    #: the host that gave `reply`, for the DSN's Remote-MTA and the history
    remote_mta: str = ""

    @property
    def domain(self) -> str:
        return address_domain(self.address)


@dataclass(frozen=True, slots=True)
class QueueItem:
    """An item as a store holds it. Immutable: a store never shares what it keeps."""

    id: uuid.UUID
    sender: str
    recipients: tuple[Recipient, ...]
    size: int
    created: datetime
    next_attempt: datetime
    attempts: int = 0
    queue: str = DEFAULT_QUEUE
    owner: str | None = None
    lease_expires: datetime | None = None
    #: bumped by every claim and every recorded outcome; `complete` needs the value it read
    revision: int = 0
    #: how many times a lease expired before an outcome was recorded
    reclaims: int = 0
    #: a "delayed" DSN was sent for this item already
    delay_warned: bool = False
    message_id: str = ""
    subject: str = ""
    #: kept failed since (`KEEP_FAILED`): its `next_attempt` is `NEVER` until it is sent again; None: not kept
    failed_at: datetime | None = None

    @property
    def pending(self) -> tuple[Recipient, ...]:
        recipients = self.recipients
        for r in recipients:
            if r.state is not RecipientState.PENDING:
                return tuple(r for r in recipients if r.state is RecipientState.PENDING)
        return recipients  # all pending, as a claimed item's usually are: no new tuple (read ~5 times an attempt)

    @property
    def done(self) -> bool:
        """Every recipient is final: the store drops such an item, unless it is kept failed (`kept`)."""
        return all(r.state.final for r in self.recipients)

    @property
    def kept(self) -> bool:
        """Kept failed (`KEEP_FAILED`): in the store, in state failed, until sent again or pruned."""
        return self.failed_at is not None

    def leased_at(self, now: datetime) -> bool:
        return self.owner is not None and self.lease_expires is not None and self.lease_expires > now

    def state_at(self, now: datetime) -> ItemState:
        if self.failed_at is not None:
            return ItemState.FAILED
        if self.leased_at(now):
            return ItemState.LEASED
        if self.attempts > 0:
            return ItemState.DEFERRED
        return ItemState.DUE if self.next_attempt <= now else ItemState.SCHEDULED

    @property
    def last_reply(self) -> Reply | None:
        """The reply of the first recipient that has one, pending ones first."""
        for wanted in (RecipientState.PENDING, RecipientState.FAILED, RecipientState.DELIVERED):
            for r in self.recipients:
                if r.state is wanted and r.reply is not None:
                    return r.reply
        return None


@dataclass(frozen=True, slots=True)
class NewItem:
    """An item to add: the envelope, the message bytes, and where it waits."""

    sender: str
    recipients: tuple[str, ...]
    message: bytes
    queue: str = DEFAULT_QUEUE
    #: not before this time; None: due as soon as it is added
    not_before: datetime | None = None
    message_id: str = ""
    subject: str = ""
    id: uuid.UUID = field(default_factory=new_item_id)


@dataclass(frozen=True, slots=True)
class RecipientOutcome:
    """What an attempt decided for one recipient (pending keeps the newest temporary reply)."""

    address: str
    state: RecipientState
    reply: Reply
    remote_mta: str = ""


@dataclass(frozen=True, slots=True)
class Suppression:
    """An address on the suppression list: the permanent failure that put it there, and since when."""

    #: the list's key: the local part as given, the domain lowercase A-label (`suppression.suppression_key`)
    address: str
    #: the reply that failed it (added by hand: code None, the status and the operator's words)
    reply: Reply
    since: datetime
    #: the item whose attempt failed it; None when added by hand
    item_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class Completion:
    """What `complete` records for an attempt, in one step."""

    outcomes: tuple[RecipientOutcome, ...]
    #: when the recipients still pending are tried next
    next_attempt: datetime
    #: count this attempt in `attempts` (a give-back does not)
    count_attempt: bool = True
    #: mark that the item's "delayed" DSN was sent
    delay_warned: bool = False
    #: DSNs about this attempt, added in the same step as the outcome (both or neither)
    dsns: tuple[NewItem, ...] = ()
    #: when the attempt was recorded: the `created` of `dsns` (needed with them)
    now: datetime | None = None
    #: addresses put on the suppression list by this outcome, in the same step (both or neither)
    suppress: tuple[Suppression, ...] = ()
    #: an item this outcome leaves with every recipient final and one failed is kept in state failed (failed at
    #: `now`, needed with it), its message with it, instead of dropped (`KEEP_FAILED` > 0)
    keep_failed: bool = False


@dataclass(frozen=True, slots=True)
class CompleteRequest:
    """One `complete` call, for `complete_many`."""

    item_id: uuid.UUID
    owner: str
    revision: int
    completion: Completion


@dataclass(frozen=True, slots=True)
class ItemQuery:
    """Filters for `list` and `count`; `now` decides due/scheduled/leased."""

    state: ItemState | None = None
    queue: str | None = None
    #: recipients at this domain (lowercase, A-label form)
    domain: str | None = None
    #: whitespace-separated terms, each a recipient's `@domain`, the start of a recipient's address or a whole
    #: word of the subject, in any case; an item matches every term (`core.search`)
    search: str | None = None
    #: the first hex digits of the item's id (lowercase, no dashes: `uuid.hex`)
    id_prefix: str | None = None
    now: datetime | None = None

    @property
    def unfiltered(self) -> bool:
        """No filter is set: every item passes."""
        return not (self.state or self.queue is not None or self.domain is not None or self.search or self.id_prefix)


def as_added(
    new: NewItem,
    now: datetime,
    now_us: int,
    *,
    text_limits: tuple[int, int] | None = None,
    created: datetime | None = None,
) -> QueueItem:
    """The item as an add at `now` (`now_us`: its microseconds) stores it: due then unless its `not_before`
    is later, its times in whole microseconds; with `text_limits`, its Message-ID and subject cut to that
    many characters (the ORM store's columns). `created`: `from_micros(now_us)`, made once for a batch."""
    if created is None:
        created = from_micros(now_us)
    due_us = due_micros(new, now, now_us)
    message_id, subject = new.message_id, new.subject
    if text_limits is not None:
        message_id, subject = message_id[: text_limits[0]], subject[: text_limits[1]]
    return QueueItem(
        id=new.id,
        sender=new.sender,
        recipients=tuple(map(Recipient, new.recipients)),
        size=len(new.message),
        created=created,
        next_attempt=created if due_us == now_us else from_micros(due_us),
        queue=new.queue,
        message_id=message_id,
        subject=subject,
    )


def due_micros(new: NewItem, now: datetime, now_us: int) -> int:
    """When an item added at `now` (`now_us`: its microseconds) is first due, in microseconds: then, unless
    its `not_before` is later."""
    not_before = new.not_before
    return now_us if not_before is None or not_before <= now else to_micros(not_before)


def apply_completion(item: QueueItem, completion: Completion) -> QueueItem:
    """The item after `completion`: final recipients unchanged, the rest updated.

    Shared by the stores that apply outcomes in Python, so the rule that a final
    state never changes is written once.
    """
    by_address: dict[str, RecipientOutcome] = {}
    for outcome in completion.outcomes:
        by_address[outcome.address] = outcome
    recipients = []
    for r in item.recipients:
        decided = by_address.get(r.address)
        if decided is None or r.state.final:
            recipients.append(r)
        else:
            recipients.append(Recipient(r.address, decided.state, decided.reply, decided.remote_mta))
    # Made whole, not by `dataclasses.replace` (its walk over the fields is most of this function's time).
    after = QueueItem(
        id=item.id,
        sender=item.sender,
        recipients=tuple(recipients),
        size=item.size,
        created=item.created,
        next_attempt=completion.next_attempt,
        attempts=item.attempts + (1 if completion.count_attempt else 0),
        queue=item.queue,
        owner=None,
        lease_expires=None,
        revision=item.revision + 1,
        reclaims=0,
        delay_warned=item.delay_warned or completion.delay_warned,
        message_id=item.message_id,
        subject=item.subject,
        failed_at=item.failed_at,
    )
    if completion.keep_failed and kept_failed(after):
        return replace(after, next_attempt=NEVER, failed_at=completion.now)
    return after


def kept_failed(item: QueueItem) -> bool:
    """Whether an item is one `KEEP_FAILED` keeps after its outcome: every recipient final, one failed."""
    return item.done and any(r.state is RecipientState.FAILED for r in item.recipients)


def sent_again(item: QueueItem, now: datetime) -> QueueItem:
    """A kept failed item sent again at `now` (`QueueStore.send_again`): as if queued anew then — due at
    once, `created` now (a new `MAX_LIFETIME`), no attempt, no "delayed" DSN yet — with its failed recipients
    pending again (their replies cleared: the history keeps them) and its delivered ones left delivered."""
    return replace(
        item,
        recipients=tuple(Recipient(r.address) if r.state is RecipientState.FAILED else r for r in item.recipients),
        created=now,
        next_attempt=now,
        attempts=0,
        owner=None,
        lease_expires=None,
        revision=item.revision + 1,
        reclaims=0,
        delay_warned=False,
        failed_at=None,
    )


def matches(item: QueueItem, query: ItemQuery) -> bool:
    """Whether `item` passes `query` — the reference rule the stores' own filters follow."""
    if query.queue is not None and item.queue != query.queue:
        return False
    if query.domain is not None and not any(r.domain == query.domain.lower() for r in item.recipients):
        return False
    if query.id_prefix is not None and not item.id.hex.startswith(query.id_prefix):
        return False
    if query.search:
        addresses = [r.address for r in item.recipients]
        domains = {r.domain for r in item.recipients}
        if not all(term_matches(term, item.subject, addresses, domains) for term in terms(query.search)):
            return False
    if query.state is not None:
        if query.now is None:
            raise ValueError("a state filter needs `now`")
        if item.state_at(query.now) is not query.state:
            return False
    return True
