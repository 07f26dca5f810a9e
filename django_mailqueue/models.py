"""The ORM store's tables: items, recipients, messages, a lock row, shaping's buckets and suspensions, history.

Times are whole microseconds since the Unix epoch (UTC) in integer columns, so
the queue is exact and works the same whatever `USE_TZ` says.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q


class QueuedItem(models.Model):
    """An item of the queue: its envelope sender, schedule, lease and counters."""

    seq = models.BigAutoField(primary_key=True)
    id = models.UUIDField(unique=True, editable=False)
    sender = models.CharField(max_length=320, blank=True)
    size = models.BigIntegerField()
    created = models.BigIntegerField()
    next_attempt = models.BigIntegerField()
    attempts = models.IntegerField(default=0)
    queue = models.CharField(max_length=100, default="default")
    owner = models.CharField(max_length=200, null=True, blank=True)
    lease_expires = models.BigIntegerField(null=True, blank=True)
    revision = models.IntegerField(default=0)
    reclaims = models.IntegerField(default=0)
    delay_warned = models.BooleanField(default=False)
    message_id = models.CharField(max_length=998, blank=True)
    subject = models.CharField(max_length=255, blank=True)
    #: kept failed since (KEEP_FAILED); its next_attempt is then core.items.NEVER, past every due index's range
    failed_at = models.BigIntegerField(null=True, blank=True)

    class Meta:
        db_table = "mailqueue_item"
        verbose_name = "queued message"
        # The admin's actions, each its own permission (viewing takes Django's view permission).
        permissions = [
            ("send_now_queueditem", "Can send queued messages now"),
            ("reschedule_queueditem", "Can reschedule queued messages"),
            ("cancel_queueditem", "Can cancel queued messages"),
            ("send_again_queueditem", "Can send failed messages again"),
        ]
        indexes = [
            # the claim over all queues, and the admin's default order
            models.Index(fields=["next_attempt", "seq"], name="mailqueue_item_due"),
            # the claim of one queue (--queues), and the admin's queue filter
            models.Index(fields=["queue", "next_attempt", "seq"], name="mailqueue_item_queue_due"),
            # the admin's "leased" filter; partial, as the next: a message added touches neither
            models.Index(
                fields=["lease_expires"], name="mailqueue_item_leased", condition=Q(lease_expires__isnull=False)
            ),
            # the admin's "deferred" filter, in its order, of all queues and of one (the overview counts each)
            models.Index(fields=["next_attempt", "seq"], name="mailqueue_item_deferred", condition=Q(attempts__gt=0)),
            models.Index(
                fields=["queue", "next_attempt", "seq"],
                name="mailqueue_item_queue_deferred",
                condition=Q(attempts__gt=0),
            ),
            # the overview's due and scheduled counts of one queue: its untried items alone (a queue nearly all
            # deferred had them walk its whole range of the queue's due index to find none)
            models.Index(
                fields=["queue", "next_attempt", "seq"],
                name="mailqueue_item_queue_untried",
                condition=Q(attempts=0),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} from <{self.sender}>"


class QueuedRecipient(models.Model):
    """One envelope recipient of an item, its state and the reply that set it."""

    STATES = [("pending", "pending"), ("delivered", "delivered"), ("failed", "failed")]

    # No index of its own: the unique (item, position) index serves lookups by item. No foreign key
    # in the database (see QueuedMessage.item).
    item = models.ForeignKey(
        QueuedItem, on_delete=models.CASCADE, related_name="recipient_rows", db_index=False, db_constraint=False
    )
    position = models.SmallIntegerField()
    address = models.CharField(max_length=320)
    domain = models.CharField(max_length=255)
    state = models.CharField(max_length=9, choices=STATES, default="pending")
    reply_code = models.SmallIntegerField(null=True, blank=True)
    reply_status = models.CharField(max_length=16, blank=True)
    reply_text = models.TextField(blank=True)
    remote_mta = models.CharField(max_length=255, blank=True)

    class Meta:
        db_table = "mailqueue_recipient"
        constraints = [models.UniqueConstraint(fields=["item", "position"], name="mailqueue_recipient_position")]
        indexes = [models.Index(fields=["domain", "item"], name="mailqueue_recipient_domain")]

    def __str__(self) -> str:
        return f"{self.address} ({self.state})"


class QueuedMessage(models.Model):
    """An item's message, byte for byte, apart from the item: read only to deliver."""

    # No foreign key in the database: the store writes an item's three rows in one statement (or
    # transaction) and deletes them together, and the ORM cascades deletes itself; the database's
    # check would cost a trigger and a row lock on the item for every message added.
    item = models.OneToOneField(
        QueuedItem, on_delete=models.CASCADE, primary_key=True, related_name="message_row", db_constraint=False
    )
    data = models.BinaryField()

    class Meta:
        db_table = "mailqueue_message"

    def __str__(self) -> str:
        return f"message of {self.item_id}"


class QueueLock(models.Model):
    """A row the store locks to count and add under `MAX_ITEMS` without a race."""

    name = models.CharField(max_length=50, primary_key=True)
    counter = models.BigIntegerField(default=0)

    class Meta:
        db_table = "mailqueue_lock"

    def __str__(self) -> str:
        return self.name


class RateBucket(models.Model):
    """A token bucket of traffic shaping (`QueueStore.take_tokens`), shared by every worker of the store."""

    name = models.CharField(max_length=300, primary_key=True)
    #: the last take's figures: tokens a second, and the most the bucket holds
    rate = models.FloatField()
    burst = models.IntegerField()
    #: the tokens the bucket held at its last take, before it; that take got min(wanted, whole tokens)
    tokens = models.FloatField()
    wanted = models.IntegerField()
    #: when the bucket was last taken from (microseconds since the epoch, the takers' clock)
    updated = models.BigIntegerField()
    #: the window (`core.shaping.Window`): grant times of the tokens in flight and times of those reported done,
    #: microseconds on the store's clock, comma-separated, ascending
    flying = models.TextField(blank=True, default="")
    done = models.TextField(blank=True, default="")

    class Meta:
        db_table = "mailqueue_bucket"
        verbose_name = "rate bucket"

    def __str__(self) -> str:
        return self.name


class Suspension(models.Model):
    """A destination no worker connects to before `until` (`QueueStore.suspend`); kept a day past it."""

    destination = models.CharField(max_length=300, primary_key=True)
    until = models.BigIntegerField(db_index=True)
    since = models.BigIntegerField()
    strikes = models.IntegerField()
    reply_code = models.SmallIntegerField(null=True, blank=True)
    reply_status = models.CharField(max_length=16, blank=True)
    reply_text = models.TextField(blank=True)
    #: the probe in force until then (µs; 0: none), and its holder (`QueueStore.take_probe`): a row with
    #: no strike is a probe only, no suspension record
    probe_until = models.BigIntegerField(default=0)
    probe_holder = models.CharField(max_length=64, blank=True, default="")

    class Meta:
        db_table = "mailqueue_suspension"
        verbose_name = "suspended destination"
        # The admin's "resume now" on the overview page (viewing takes the overview's view permission).
        permissions = [("resume_suspension", "Can resume suspended destinations")]

    def __str__(self) -> str:
        return self.destination


class SuppressedAddress(models.Model):
    """The ORM store's suppression list: an address a permanent failure put on it, and since when.

    Read and written through the store (`QueueStore.suppressed`, `suppress`, ...), as the admin does.
    """

    #: the list's key: the local part as given, the domain lowercase A-label
    address = models.CharField(max_length=320, unique=True)
    reply_code = models.SmallIntegerField(null=True, blank=True)
    reply_status = models.CharField(max_length=16, blank=True)
    reply_text = models.TextField(blank=True)
    #: µs since the epoch, as the queue's times
    since = models.BigIntegerField()
    #: the item whose attempt failed it; null when added by hand
    item_id = models.UUIDField(null=True, blank=True)

    class Meta:
        db_table = "mailqueue_suppression"
        verbose_name = "suppressed address"
        verbose_name_plural = "suppression list"
        # the list's order (newest first) and the prune's range
        indexes = [models.Index(fields=["since", "address"], name="mailqueue_suppression_since")]

    def __str__(self) -> str:
        return self.address


class DeliveryRecord(models.Model):
    """History: one row per final outcome (delivered, failed) and per deferral of a recipient.

    Written by the worker whatever the store, kept `HISTORY_DAYS` days, pruned by
    `manage.py mailqueue_prune_history`.
    """

    STATES = [("delivered", "delivered"), ("deferred", "deferred"), ("failed", "failed")]

    item_id = models.UUIDField(db_index=True)
    message_id = models.CharField(max_length=998, blank=True)
    sender = models.CharField(max_length=320, blank=True)
    recipient = models.CharField(max_length=320, db_index=True)
    domain = models.CharField(max_length=255)
    queue = models.CharField(max_length=100)
    state = models.CharField(max_length=9, choices=STATES)
    reply_code = models.SmallIntegerField(null=True, blank=True)
    reply_status = models.CharField(max_length=16, blank=True)
    reply_text = models.TextField(blank=True)
    remote_mta = models.CharField("route host", max_length=255, blank=True)
    attempt = models.IntegerField()
    #: the reply after the final "." was lost: the recipient may have the message already
    possibly_delivered = models.BooleanField(default=False)
    #: the attempt's worker lost its lease before its outcome was recorded: the row tells what this attempt found
    #: (a server's reply), not the item's outcome — another attempt's is (docs/reliability.md)
    lease_lost = models.BooleanField(default=False)
    recorded = models.DateTimeField()

    class Meta:
        db_table = "mailqueue_history"
        verbose_name = "delivery record"
        ordering = ["-recorded", "-id"]
        # each in the list's whole order (recorded, id): a page is read from an index, with no sort, and a deep
        # page's keys from the index alone (`admin/records.py`, `BoundedPaginator`)
        indexes = [
            # holding the state too (PostgreSQL): the overview's outcomes per hour read the index alone
            models.Index(fields=["recorded", "id"], include=["state"], name="mailqueue_history_recorded"),
            models.Index(fields=["state", "recorded", "id"], name="mailqueue_history_state"),
            models.Index(fields=["domain", "recorded", "id"], name="mailqueue_history_domain"),
            # the admin's queue and "possibly delivered" filters (the latter partial: few rows)
            models.Index(fields=["queue", "recorded", "id"], name="mailqueue_history_queue"),
            models.Index(
                fields=["recorded", "id"], name="mailqueue_history_possibly", condition=Q(possibly_delivered=True)
            ),
        ]

    def __str__(self) -> str:
        return f"{self.state} to <{self.recipient}> ({self.reply_status})"


class QueueOverview(QueuedItem):
    """The queue's overview page, in the admin index and sidebar (a proxy: no table of its own)."""

    class Meta:
        proxy = True
        verbose_name = "queue overview"
        verbose_name_plural = "queue overview"
