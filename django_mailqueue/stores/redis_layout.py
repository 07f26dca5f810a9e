"""The Redis store's keys, and how an item is written in them (see docs/redis.md)."""

from __future__ import annotations

import binascii
import bisect
import builtins
import json
import math
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any

from ..core.clock import from_micros, to_micros
from ..core.items import NewItem, QueueItem, Recipient, RecipientState, Reply, Suppression
from ..core.search import subject_words
from . import redis_scripts as scripts

#: What `<prefix>schema` holds: the layout of the keys below, version 1.
LAYOUT_VERSION = "django-mailqueue:1"
#: What `<prefix>search_layout` holds once the search's indexes (`words`, `addrs`) hold every item.
SEARCH_LAYOUT = "2"


def layout_prefix(key_prefix: str, *, cluster: bool = False, partition: int = 0, partitions: int = 1) -> str:
    """What every key's name starts with: `key_prefix` on one Redis; on a Redis Cluster, `key_prefix` and a hash
    tag (`mailqueue:{mailqueue:0}:`), so that every key of one partition hashes to one slot and each script may
    touch any of them (Cluster runs a script only on keys of one slot). Partition 0's tag is `<key_prefix>0`
    whatever `partitions` is (a queue of one partition keeps its keys when more are added); see `partition_tag`."""
    if not cluster:
        return key_prefix
    return tagged_prefix(key_prefix, partition_tag(key_prefix, partition, partitions))


def tagged_prefix(key_prefix: str, tag: str) -> str:
    """The keys' prefix on a Cluster for the hash tag `tag`: `mailqueue:{mailqueue:0}:`."""
    return f"{key_prefix}{{{tag}}}:"


#: The hash slots of a Redis Cluster.
SLOTS = 16384


def partition_tag(key_prefix: str, partition: int, partitions: int) -> str:
    """Partition `partition`'s hash tag: `<key_prefix>0` for the first; for the others `<key_prefix><p>-<k>`,
    the first `k` whose slot is in the middle half of the `p`-th `1/partitions` of the slots after partition 0's.
    With the slots split evenly over as many primaries as partitions (as `redis-cli --cluster create` splits
    them), each partition is then on a primary of its own (docs/redis.md, "Partitions")."""
    first = f"{key_prefix}0"
    if partition == 0:
        return first
    width = SLOTS / partitions
    part = (int(key_slot(first) // width) + partition) % partitions
    low, high = part * width + width / 4, part * width + 3 * width / 4
    k = 0
    while not low <= key_slot(f"{key_prefix}{partition}-{k}") < high:
        k += 1
    return f"{key_prefix}{partition}-{k}"


def every_partition_tag(key_prefix: str, most: int) -> dict[tuple[int, int], str]:
    """`partition_tag(key_prefix, p, n)` of every partition `p` > 0 of every count `n` up to `most`, by `(p, n)`.
    A partition's candidates `<key_prefix><p>-<k>` are the same for every count: their slots are computed once,
    and each count's tag is the first candidate in its range (~2,000 tags, checked at each worker's start)."""
    first_part = key_slot(f"{key_prefix}0")
    out: dict[tuple[int, int], str] = {}
    for partition in range(1, most):
        ranges = {}
        for count in range(partition + 1, most + 1):
            width = SLOTS / count
            part = (int(first_part // width) + partition) % count
            low, high = part * width + width / 4, part * width + 3 * width / 4
            ranges[count] = (math.ceil(low), math.ceil(high))  # the integers s with low <= s < high
        # CRC16 continues over more bytes: the candidates' common start is hashed once, their numbers in C (`map`);
        # each count's range is then found by bisection in the candidates sorted by slot (docs/performance.md,
        # "The worker's start").
        start = binascii.crc_hqx(f"{key_prefix}{partition}-".encode(), 0)
        slots: list[int] = []
        size = 512
        while ranges:
            slots += map((SLOTS - 1).__and__, map(binascii.crc_hqx, _numbers(len(slots), size), repeat(start)))
            by_slot = sorted(range(size), key=slots.__getitem__)  # the candidates k, by their slot
            sorted_slots = builtins.list(map(slots.__getitem__, by_slot))
            for count, (low_slot, high_slot) in builtins.list(ranges.items()):
                first = bisect.bisect_left(sorted_slots, low_slot)
                last = bisect.bisect_left(sorted_slots, high_slot, first)
                if first < last:  # every candidate below `size` was looked at: the least k in the range is the first
                    out[(partition, count)] = f"{key_prefix}{partition}-{min(by_slot[first:last])}"
                    del ranges[count]
            size *= 2
    return out


#: Candidates' numbers as bytes, `b"0"`, `b"1"`, ..., made as far as a search has needed them.
_NUMBERS: list[bytes] = []


def _numbers(start: int, stop: int) -> list[bytes]:
    if len(_NUMBERS) < stop:
        _NUMBERS.extend(str(k).encode() for k in range(len(_NUMBERS), stop))
    return _NUMBERS[start:stop]


def key_slot(tag: str) -> int:
    """The Cluster slot of a key whose hash tag is `tag` (CRC16/XMODEM of its bytes, modulo 16384: `crc_hqx` is
    that CRC, in C; E030's ~1,400 tags took 2.2 s of CPU in Python's loop at each check and worker start)."""
    return binascii.crc_hqx(tag.encode(), 0) % SLOTS


@dataclass(frozen=True)
class Keys:
    """The names of a queue's keys under its prefix (see docs/redis.md)."""

    prefix: str

    @property
    def schema(self) -> str:
        return f"{self.prefix}schema"

    @property
    def seq(self) -> str:
        return f"{self.prefix}seq"

    @property
    def items(self) -> str:
        return f"{self.prefix}items"

    @property
    def leases(self) -> str:
        return f"{self.prefix}leases"

    @property
    def queues(self) -> str:
        return f"{self.prefix}queues"

    @property
    def wakeup(self) -> str:
        """The pub/sub channel an add publishes to."""
        return f"{self.prefix}wakeup"

    @property
    def suppressed(self) -> str:
        """The suppression list: a hash, address -> entry."""
        return f"{self.prefix}suppressed"

    @property
    def suppressed_by_time(self) -> str:
        """The suppression list's addresses, scored by minus their time (µs): the newest first."""
        return f"{self.prefix}suppressed:by_time"

    def item(self, item_id: uuid.UUID | str) -> str:
        return f"{self.prefix}item:{item_id}"

    def message(self, item_id: uuid.UUID | str) -> str:
        return f"{self.prefix}message:{item_id}"

    def ready(self, queue: str) -> str:
        return f"{self.prefix}ready:{queue}"

    # traffic shaping (core/shaping.py)

    def bucket(self, key: str) -> str:
        return f"{self.prefix}bucket:{key}"

    @property
    def suspended(self) -> str:
        """The sorted set of suspended destinations by until; each has a hash `suspension(destination)`."""
        return f"{self.prefix}suspended"

    def suspension(self, destination: str) -> str:
        return f"{self.prefix}suspension:{destination}"

    def probe(self, destination: str) -> str:
        """A destination's probe (`take_probe`): a hash, until and holder."""
        return f"{self.prefix}probe:{destination}"

    # a partitioned queue's share of MAX_ITEMS (lua/quota.lua)

    @property
    def quota(self) -> str:
        """The partition's share of MAX_ITEMS: a hash, `share` and the `bound` (`M:N`) it was set for."""
        return f"{self.prefix}quota"

    @property
    def quota_out(self) -> str:
        """The shares taken from this partition for another and not yet given: token -> `<to>:<k>:<ms>`."""
        return f"{self.prefix}quota:out"

    def quota_in(self, token: str) -> str:
        """A transfer given to this partition's share (`1`, living `QUOTA_GIVEN_MS`): given once."""
        return f"{self.prefix}quota:in:{token}"

    def replay(self, lifetime_ms: int, token: str) -> str:
        """A call's marker (see lua/replay.lua): its name gives how long it lives."""
        return f"{self.prefix}replay:{lifetime_ms}:{token}"

    # the admin's indexes (store_items.lua keeps them)

    @property
    def queue_names(self) -> str:
        """Every queue name an item was added with (`queues()` keeps those whose `queue` set exists)."""
        return f"{self.prefix}queue_names"

    @property
    def ids(self) -> str:
        """Every item's id as 32 hex digits, all scored 0: an id prefix is a range of its bytes."""
        return f"{self.prefix}ids"

    def queue(self, queue: str) -> str:
        return f"{self.prefix}queue:{queue}"

    def domain(self, domain: str) -> str:
        return f"{self.prefix}domain:{domain}"

    @property
    def failed(self) -> str:
        """The items kept failed (`KEEP_FAILED`), scored by when they failed (µs)."""
        return f"{self.prefix}failed"

    @property
    def tried(self) -> str:
        return f"{self.prefix}tried"

    def tried_queue(self, queue: str) -> str:
        return f"{self.prefix}tried_queue:{queue}"

    def tried_domain(self, domain: str) -> str:
        return f"{self.prefix}tried_domain:{domain}"

    @property
    def words(self) -> str:
        """Every subject word with its item, `<word>\\0<member>`, all scored 0 (the search's words)."""
        return f"{self.prefix}words"

    def word(self, word: str) -> str:
        """A subject word's items by next attempt: the search's index before `words` (reindex.lua deletes it)."""
        return f"{self.prefix}word:{word}"

    @property
    def addrs(self) -> str:
        """Every recipient address with its item, `<address>\\0<member>`, all scored 0 (the search's starts)."""
        return f"{self.prefix}addrs"

    @property
    def search_layout(self) -> str:
        """`SEARCH_LAYOUT` once `words` and `addrs` hold every item: set by schema.lua for a new prefix, else by
        `RedisStore.build_search_index` (`manage.py mailqueue_search_index`)."""
        return f"{self.prefix}search_layout"

    @property
    def search_index(self) -> str:
        """The mark of the layout before (`word:<w>` and `addrs` held every item): build_search_index deletes it."""
        return f"{self.prefix}search_index"

    # what a script that writes items declares (every key it touches is in KEYS: lua/keys.lua)

    def of_item(self, item_id: uuid.UUID | str, shape: tuple[str, str, str]) -> builtins.list[str]:
        """An item's keys, its queue's ready set and the admin indexes it is in or may enter (`shape`: its queue,
        and its recipients' domains as its hash keeps them; its words name no key: `words` is one of `indexes`)."""
        return [self.item(item_id), self.message(item_id), *self.of_shape(shape[0], shape[1])]

    def of_shape(self, queue: str, item_domains: str) -> builtins.list[str]:
        """The keys of the indexes an item of that queue and those recipient domains is in or may enter."""
        names = [self.ready(queue), self.queue(queue), self.tried_queue(queue)]
        for domain in item_domains.split():
            names += [self.domain(domain), self.tried_domain(domain)]
        return names

    @property
    def indexes(self) -> builtins.list[str]:
        """The indexes every item is in or may enter (store_items.lua's `index_item`, complete.lua's `keep`)."""
        return [self.ids, self.queue_names, self.tried, self.failed, self.words, self.addrs]


#: The fields of an item's hash that name its keys, and never change: `queue`, `domains`, `words`.
SHAPE = ("queue", "domains", "words")


class Shapes:
    """The queue, recipient domains and subject words of the items a store met (none ever changes): the keys a
    script that writes an item declares, known without reading it first. Forgets everything past `MOST` items."""

    MOST = 100_000

    def __init__(self) -> None:
        self._known: dict[uuid.UUID, tuple[str, str, str]] = {}

    def note(self, item_id: uuid.UUID, found: dict[str, str]) -> tuple[str, str, str]:
        """From an item's hash (its fields)."""
        shape = (found["queue"], found.get("domains", ""), found.get("words", ""))
        self.add(item_id, shape)
        return shape

    def add(self, item_id: uuid.UUID, shape: tuple[str, str, str]) -> None:
        if len(self._known) >= self.MOST:
            self._known.clear()
        self._known[item_id] = shape

    def get(self, item_id: uuid.UUID) -> tuple[str, str, str] | None:
        return self._known.get(item_id)

    def forget(self, item_id: uuid.UUID) -> None:
        self._known.pop(item_id, None)


def item_args(
    new: NewItem, item: QueueItem, now_us: int, shape: tuple[str, str, str] | None = None
) -> builtins.list[scripts.Arg]:
    """The 13 values add.lua and complete.lua take per item they store (`shape`: the item's, when known)."""
    _queue, item_domains, item_words = shape or (item.queue, domains(item.recipients), words(item.subject))
    return [
        str(new.id),
        new.queue,
        str(to_micros(item.next_attempt)),
        str(now_us),
        new.sender,
        dump_recipients(item.recipients),
        str(item.size),
        new.message_id,
        new.subject,
        bytes(new.message),
        item_domains,
        item_words,
        addresses(r.address for r in item.recipients),
    ]


def words(subject: str) -> str:
    """The subject's words as the item's hash keeps them (`words`, the search's `words` set): lowercase,
    distinct, space-separated (`core.search.subject_words`: a word holds no space)."""
    return " ".join(sorted(subject_words(subject)))


def addresses(recipients: Iterable[str]) -> str:
    """The recipients' addresses as the item's hash keeps them (`addrs`, the search's `addrs` set): lowercase,
    distinct, one a line (an address holds no line break nor NUL: `check_address`)."""
    return "\n".join(dict.fromkeys(address.lower() for address in recipients))


def domains(recipients: Sequence[Recipient]) -> str:
    """The recipients' domains as the item's hash keeps them (`domains`): distinct, space-separated. An
    address holds no space (`check_address`), nor then does its domain."""
    return " ".join(dict.fromkeys(r.domain for r in recipients if r.domain))


def seed_commands(keys: Keys, item: QueueItem, seq: int, message: bytes) -> builtins.list[tuple[scripts.Arg, ...]]:
    """The commands that write `item` (with sequence number `seq`) as the scripts would have: for loading a
    big queue fast (bench/admin_seed.py) — store_items.lua, claim.lua and complete.lua are the reference."""
    member = f"{seq:016d}:{item.id}"
    due = str(to_micros(item.next_attempt))
    listed = [r.address for r in item.recipients]
    fields: builtins.list[scripts.Arg] = [
        "id", str(item.id), "member", member, "queue", item.queue, "next", due,
        "created", str(to_micros(item.created)), "sender", item.sender, "rcpts", dump_recipients(item.recipients),
        "size", str(item.size), "mid", item.message_id, "subject", item.subject,
        "domains", domains(item.recipients), "words", words(item.subject), "addrs", addresses(listed),
        "attempts", str(item.attempts), "rev", str(item.revision),
        "reclaims", str(item.reclaims), "delay", "1" if item.delay_warned else "0",
    ]  # fmt: skip
    commands: builtins.list[tuple[scripts.Arg, ...]] = []
    if item.failed_at is not None:
        fields += ["failed", str(to_micros(item.failed_at))]
        commands.append(("ZADD", keys.failed, str(to_micros(item.failed_at)), member))
    elif item.owner is not None and item.lease_expires is not None:
        expires = to_micros(item.lease_expires)
        fields += ["owner", item.owner, "expires", str(expires)]
        commands.append(("ZADD", keys.leases, str(max(expires, to_micros(item.next_attempt))), member))
    else:
        commands.append(("ZADD", keys.ready(item.queue), due, member))
    commands += [
        ("HSET", keys.item(item.id), *fields),
        ("SET", keys.message(item.id), message),
        ("ZADD", keys.items, due, member),
        ("SADD", keys.queues, item.queue),
        ("SADD", keys.queue_names, item.queue),
        ("ZADD", keys.ids, "0", item.id.hex),
        ("ZADD", keys.queue(item.queue), due, member),
        *(("ZADD", keys.domain(domain), due, member) for domain in domains(item.recipients).split()),
        *(("ZADD", keys.words, "0", f"{word}\0{member}") for word in words(item.subject).split()),
        *(
            ("ZADD", keys.addrs, "0", f"{address}\0{member}")
            for address in addresses(r.address for r in item.recipients).split("\n")
            if address
        ),
    ]
    if item.attempts and item.failed_at is None:
        commands += [("ZADD", keys.tried, due, member), ("ZADD", keys.tried_queue(item.queue), due, member)]
        commands += [("ZADD", keys.tried_domain(domain), due, member) for domain in domains(item.recipients).split()]
    return commands


def dump_recipients(recipients: Sequence[Recipient]) -> str:
    """Recipients as JSON: `[address, state, [code, status, text] or null, remote MTA]` each."""
    return json.dumps(
        [
            [
                r.address,
                r.state.value,
                None if r.reply is None else [r.reply.code, r.reply.status, r.reply.text],
                r.remote_mta,
            ]
            for r in recipients
        ],
        ensure_ascii=False,
        separators=(",", ":"),
    )


def load_recipients(text: str) -> tuple[Recipient, ...]:
    return tuple(
        Recipient(address, RecipientState(state), None if reply is None else Reply(*reply), remote)
        for address, state, reply, remote in json.loads(text)
    )


def suppression_args(entries: Sequence[Suppression]) -> builtins.list[scripts.Arg]:
    """m, then the 3 values store_suppressions.lua takes per entry: address, entry (JSON), minus its time."""
    args: builtins.list[scripts.Arg] = [str(len(entries))]
    for e in entries:
        since = to_micros(e.since)
        item = None if e.item_id is None else str(e.item_id)
        entry = [e.reply.code, e.reply.status, e.reply.text, since, item]
        args += [e.address, json.dumps(entry, ensure_ascii=False, separators=(",", ":")), str(-since)]
    return args


def load_suppression(address: str, raw: Any) -> Suppression:
    """An entry from its JSON in the suppression hash."""
    code, status, reply_text, since, item = json.loads(text(raw))
    item_id = None if item is None else uuid.UUID(item)
    return Suppression(address, Reply(code, status, reply_text), from_micros(since), item_id)


def text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return str(value)


def fields(raw: Any) -> dict[str, str]:
    """A hash as HGETALL gives it (a dict) or a script does (a flat list), its names and values as text."""
    pairs = raw.items() if isinstance(raw, dict) else zip(raw[::2], raw[1::2], strict=True)
    # bytes from the server (the store's clients do not decode); the worker reads some 40 fields a message
    return {k.decode() if type(k) is bytes else text(k): v.decode() if type(v) is bytes else text(v) for k, v in pairs}


def to_item(raw: Any) -> QueueItem:
    """An item from its hash, as HGETALL gives it (a dict) or a script does (a flat list)."""
    return item_of(fields(raw))


def item_of(f: dict[str, str]) -> QueueItem:
    """An item from its hash's `fields`."""
    return QueueItem(
        id=uuid.UUID(f["id"]),
        sender=f["sender"],
        recipients=load_recipients(f["rcpts"]),
        size=int(f["size"]),
        created=from_micros(int(f["created"])),
        next_attempt=from_micros(int(f["next"])),
        attempts=int(f["attempts"]),
        queue=f["queue"],
        owner=f.get("owner"),
        lease_expires=from_micros(int(f["expires"])) if "expires" in f else None,
        revision=int(f["rev"]),
        reclaims=int(f["reclaims"]),
        delay_warned=f["delay"] == "1",
        message_id=f["mid"],
        subject=f["subject"],
        failed_at=from_micros(int(f["failed"])) if "failed" in f else None,
    )


def to_item_or_none(raw: Any) -> QueueItem | None:
    return to_item(raw) if raw else None


def bytes_or_none(raw: Any) -> bytes | None:
    return bytes(raw) if raw is not None else None
