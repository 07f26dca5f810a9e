"""Seeds the admin benchmark (issue 25): a big queue straight into PostgreSQL (`INSERT … SELECT`, indexes built
after) and 1,000,000 history records, or a big queue into Redis through pipelines — never the enqueue path.

    python -m bench.admin_seed postgres --items 1000000 --history 1000000 --pg-name mq_bench_admin1m
    python -m bench.admin_seed redis --items 1000000 --redis-url redis://127.0.0.1:6391/0
    python -m bench.admin_seed sqlite --items 100000 --history 100000 --sqlite-path /tmp/mq_bench.sqlite3

The data, the same on both stores (item `i` has the id `md5("mqb-<i>")`):

- next attempts spread over a day around the seeding time (half due, half scheduled); every tenth item
  deferred (tried 1 to 3 times, a 451 reply), one in a thousand leased;
- queues `default` (60%), `bulk` (35%), `transactional` (5%) and `rare` (10 items at 1 M);
- 1 to 3 recipients an item (1.57 on average) at 500 domains, skewed: domain rank `r` is taken with
  probability log((r+1)/r) / log(500) — `gmail.com` 11%, the 500th 0.03% — and `rare-domain.example`
  for 20 items at 1 M; addresses `first.last<n>@domain` from 20 first and 20 last names;
- subjects from 7 phrases ("Your invoice #…", 1 in 7) and the word "kumquat" in 10 at 1 M;
- history (PostgreSQL only): records evenly over the last 30 days, 85% delivered, 12% deferred, 3% failed,
  queues as above, 1 in 2,000 possibly delivered.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import time
import uuid

FIRST = "alice bob carol dave erin frank grace heidi ivan judy ken laura mallory nina oscar peggy quinn rupert".split()
FIRST += ["sybil", "trent"]
LAST = "smith jones brown taylor wilson davies evans thomas johnson roberts walker wright robinson thompson".split()
LAST += ["white", "hughes", "edwards", "green", "hall", "wood"]
#: The biggest domains by rank; the rest are `mail<rank>.example`.
NAMED = ["gmail.com", "yahoo.com", "outlook.com", "hotmail.com", "icloud.com", "gmx.de", "web.de", "orange.fr"]
DOMAINS = 500
RARE_DOMAIN = "rare-domain.example"
SUBJECTS = [
    "Your invoice",
    "Password reset",
    "Weekly newsletter",
    "Your order has shipped",
    "Welcome aboard",
    "Payment received",
    "Security alert",
]
RARE_WORD = "kumquat"
MESSAGE = b"From: noreply@shop.example\r\nTo: someone@example.com\r\nSubject: load\r\n\r\nHello.\r\n"
#: The item whose first recipient the measuring step searches for (by full address and by prefix).
PROBE_ITEM = 500_000


def item_id(i: int) -> uuid.UUID:
    return uuid.UUID(hashlib.md5(f"mqb-{i}".encode(), usedforsecurity=False).hexdigest())


# --- PostgreSQL ---------------------------------------------------------------------------------

_DOMAIN_SQL = "(CASE WHEN rank <= {n} THEN (ARRAY[{named}])[rank] ELSE 'mail' || rank || '.example' END)".format(
    n=len(NAMED), named=", ".join(f"'{d}'" for d in NAMED)
)
_RANK_SQL = f"least({DOMAINS}, floor(power({DOMAINS}, random()))::int)"
_LOCAL_SQL = (
    "(ARRAY[{f}])[1 + floor(random() * 20)::int] || '.' || (ARRAY[{l}])[1 + floor(random() * 20)::int]"
    " || floor(random() * 100)::int"
).format(f=", ".join(f"'{w}'" for w in FIRST), l=", ".join(f"'{w}'" for w in LAST))
_QUEUE_SQL = (
    "CASE WHEN i % 100000 = 11 THEN 'rare' WHEN i % 20 = 0 THEN 'transactional'"
    " WHEN i % 20 < 8 THEN 'bulk' ELSE 'default' END"
)

ITEMS_SQL = f"""
INSERT INTO mailqueue_item (id, sender, size, created, next_attempt, attempts, queue, owner, lease_expires,
                            revision, reclaims, delay_warned, message_id, subject)
SELECT md5('mqb-' || i)::uuid,
       CASE WHEN i % 10 < 7 THEN 'noreply@shop.example' WHEN i % 10 < 9 THEN 'billing@shop.example'
            ELSE 'app' || (i % 1000) || '@app.example' END,
       %(size)s, %(now)s - 3600000000 + i, %(now)s - 43200000000 + i * %(step)s,
       CASE WHEN i % 10 = 0 THEN 1 + i % 3 ELSE 0 END,
       {_QUEUE_SQL},
       CASE WHEN i % 1000 = 7 THEN 'worker-' || (i % 8) END,
       CASE WHEN i % 1000 = 7 THEN %(now)s + 300000000 END,
       1, 0, false, '<' || i || '@shop.example>',
       (ARRAY[{", ".join(f"'{s}'" for s in SUBJECTS)}])[1 + i % 7]
         || CASE WHEN i % 100000 = 5 THEN ' {RARE_WORD}' ELSE '' END || ' #' || i
FROM generate_series(1::bigint, %(items)s) AS i
"""

RECIPIENTS_SQL = f"""
INSERT INTO mailqueue_recipient (item_id, position, address, domain, state, reply_code, reply_status, reply_text,
                                 remote_mta)
SELECT seq, p, local || '@' || dom, dom, 'pending',
       CASE WHEN attempts > 0 THEN 451 END, CASE WHEN attempts > 0 THEN '4.7.1' ELSE '' END,
       CASE WHEN attempts > 0 THEN 'Greylisted, try again later' ELSE '' END,
       CASE WHEN attempts > 0 THEN 'mx.' || dom ELSE '' END
FROM (
    SELECT seq, attempts, p, {_LOCAL_SQL} AS local,
           CASE WHEN p = 0 AND seq % 50000 = 17 THEN '{RARE_DOMAIN}' ELSE {_DOMAIN_SQL} END AS dom
    FROM (SELECT seq, attempts, p, {_RANK_SQL} AS rank
          FROM mailqueue_item,
               generate_series(0, CASE WHEN seq % 100 < 12 THEN 2 WHEN seq % 100 < 45 THEN 1 ELSE 0 END) AS p) AS r
) AS x
"""

HISTORY_SQL = f"""
INSERT INTO mailqueue_history (item_id, message_id, sender, recipient, domain, queue, state, reply_code,
                               reply_status, reply_text, remote_mta, attempt, possibly_delivered, recorded, lease_lost)
SELECT md5('mqh-' || (i / 2))::uuid, '<h' || (i / 2) || '@shop.example>', 'noreply@shop.example',
       local || '@' || dom, dom, queue, state,
       CASE state WHEN 'delivered' THEN 250 WHEN 'deferred' THEN 451 ELSE 550 END,
       CASE state WHEN 'delivered' THEN '2.0.0' WHEN 'deferred' THEN '4.7.1' ELSE '5.1.1' END,
       CASE state WHEN 'delivered' THEN 'OK queued' WHEN 'deferred' THEN 'Greylisted' ELSE 'No such user' END,
       'mx.' || dom, 1 + i % 3, i % 2000 = 3,
       to_timestamp(%(now_s)s - i * %(spacing)s), false
FROM (
    SELECT i, {_LOCAL_SQL} AS local,
           CASE WHEN i % 50000 = 17 THEN '{RARE_DOMAIN}' ELSE {_DOMAIN_SQL} END AS dom,
           {_QUEUE_SQL.replace("i % 100000 = 11", "i % 100000 = 13")} AS queue,
           CASE WHEN i % 100 < 85 THEN 'delivered' WHEN i % 100 < 97 THEN 'deferred' ELSE 'failed' END AS state
    FROM (SELECT i, {_RANK_SQL} AS rank FROM generate_series(1::bigint, %(history)s) AS i) AS r
) AS x
"""


def seed_postgres(name: str, port: int, items: int, history: int) -> dict[str, float]:
    """A fresh database `name`, migrated, filled; its indexes built after the rows, then VACUUM ANALYZE."""
    import psycopg

    took: dict[str, float] = {}
    with psycopg.connect(f"host=127.0.0.1 port={port} user=postgres dbname=postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
    _django("postgres", name, port)
    from django.core.management import call_command

    started = time.perf_counter()
    call_command("migrate", verbosity=0)
    took["migrate"] = time.perf_counter() - started
    now_us = int(time.time() * 1_000_000)
    with psycopg.connect(f"host=127.0.0.1 port={port} user=postgres dbname={name}") as conn:
        tables = ("mailqueue_item", "mailqueue_recipient", "mailqueue_message", "mailqueue_history")
        indexes = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = ANY(%s) "
            "AND indexname NOT IN (SELECT conname FROM pg_constraint)",
            [list(tables)],
        ).fetchall()
        for index, _ in indexes:
            conn.execute(f'DROP INDEX "{index}"')
        conn.execute("SELECT setseed(0.25)")
        params = {"items": items, "now": now_us, "step": 86_400_000_000 // max(items, 1), "size": len(MESSAGE)}
        for label, sql, args in (
            ("items", ITEMS_SQL, params),
            ("recipients", RECIPIENTS_SQL, {}),
            ("messages", "INSERT INTO mailqueue_message (item_id, data) SELECT seq, %s FROM mailqueue_item", [MESSAGE]),
            (
                "history",
                HISTORY_SQL,
                {"history": history, "now_s": now_us / 1e6, "spacing": 30 * 86400 / max(history, 1)},
            ),
        ):
            started = time.perf_counter()
            conn.execute(sql.replace(" % ", " %% "), args)  # type: ignore[call-overload]  # a modulo, not a parameter
            took[label] = time.perf_counter() - started
        started = time.perf_counter()
        conn.execute("SET maintenance_work_mem = '512MB'")
        for _, definition in indexes:
            conn.execute(definition)
        took["indexes"] = time.perf_counter() - started
        conn.commit()
        conn.autocommit = True
        started = time.perf_counter()
        for table in tables:
            conn.execute(f"VACUUM ANALYZE {table}")
        took["vacuum analyze"] = time.perf_counter() - started
    return took


# --- Redis --------------------------------------------------------------------------------------


class _Picker:
    """The same skew as the PostgreSQL seed, from Python's random (seeded)."""

    def __init__(self, seed: int) -> None:
        self.rand = random.Random(seed)
        self.first, self.last = FIRST, LAST

    def domain(self) -> str:
        rank = min(DOMAINS, int(DOMAINS ** self.rand.random()))
        return NAMED[rank - 1] if rank <= len(NAMED) else f"mail{rank}.example"

    def address(self, domain: str) -> str:
        r = self.rand
        return f"{r.choice(self.first)}.{r.choice(self.last)}{r.randrange(100)}@{domain}"


def seed_items(items: int, now_us: int):  # type: ignore[no-untyped-def]
    """The items of the seed as `QueueItem`s, in order (item `i` is the `i`-th added): Redis and SQLite."""
    from django_mailqueue.core.clock import from_micros
    from django_mailqueue.core.items import QueueItem, Recipient, RecipientState, Reply

    pick = _Picker(25)
    step = 86_400_000_000 // max(items, 1)
    greylisted = Reply(451, "4.7.1", "Greylisted, try again later")
    for i in range(1, items + 1):
        count = 3 if i % 100 < 12 else 2 if i % 100 < 45 else 1
        attempts = 1 + i % 3 if i % 10 == 0 else 0
        recipients = []
        for p in range(count):
            domain = RARE_DOMAIN if p == 0 and i % 50000 == 17 else pick.domain()
            address = pick.address(domain)
            while any(r.address == address for r in recipients):
                address = pick.address(domain)
            recipients.append(
                Recipient(address, RecipientState.PENDING, greylisted, f"mx.{domain}")
                if attempts
                else Recipient(address)
            )
        leased = i % 1000 == 7
        yield QueueItem(
            id=item_id(i),
            sender="noreply@shop.example"
            if i % 10 < 7
            else "billing@shop.example"
            if i % 10 < 9
            else f"app{i % 1000}@app.example",
            recipients=tuple(recipients),
            size=len(MESSAGE),
            created=from_micros(now_us - 3_600_000_000 + i),
            next_attempt=from_micros(now_us - 43_200_000_000 + i * step),
            attempts=attempts,
            queue="rare"
            if i % 100000 == 11
            else "transactional"
            if i % 20 == 0
            else "bulk"
            if i % 20 < 8
            else "default",
            owner=f"worker-{i % 8}" if leased else None,
            lease_expires=from_micros(now_us + 300_000_000) if leased else None,
            revision=1,
            message_id=f"<{i}@shop.example>",
            subject=SUBJECTS[i % 7] + (f" {RARE_WORD}" if i % 100000 == 5 else "") + f" #{i}",
        )


def seed_redis(url: str, items: int, prefix: str) -> dict[str, float]:
    """Every key of the seed's items written by `redis_layout.seed_commands` (the layout the scripts keep),
    10,000 items a pipeline; the prefix's keys dropped first."""
    import redis

    from django_mailqueue.stores.redis_layout import SEARCH_LAYOUT, Keys, seed_commands

    client = redis.Redis.from_url(url)
    keys = Keys(prefix)
    started = time.perf_counter()
    for key in client.scan_iter(match=f"{prefix}*", count=10_000):
        client.unlink(key)
    took = {"drop": time.perf_counter() - started}
    started = time.perf_counter()
    now_us = int(time.time() * 1_000_000)
    pipe = client.pipeline(transaction=False)
    for seq, item in enumerate(seed_items(items, now_us), start=1):
        for command in seed_commands(keys, item, seq, MESSAGE):
            pipe.execute_command(*command)
        if seq % 10_000 == 0:
            pipe.execute()
    pipe.execute_command("SET", keys.seq, items)
    pipe.execute_command("SET", keys.schema, _layout_version())
    pipe.execute_command("SET", keys.search_layout, SEARCH_LAYOUT)  # every item written with its search terms
    pipe.execute()
    took["items"] = time.perf_counter() - started
    return took


def seed_sqlite(path: str, items: int, history: int) -> dict[str, float]:
    """A fresh SQLite file, migrated, filled with the seed's items (`executemany`) and `history` records."""
    import sqlite3

    from django_mailqueue.core.clock import to_micros

    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    _django("sqlite", "", 0, sqlite_path=path)
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    now_us = int(time.time() * 1_000_000)
    started = time.perf_counter()
    conn = sqlite3.connect(path)
    item_rows, recipient_rows = [], []
    for seq, item in enumerate(seed_items(items, now_us), start=1):
        item_rows.append((
            seq, item.id.hex, item.sender, item.size, to_micros(item.created), to_micros(item.next_attempt),
            item.attempts, item.queue, item.owner, to_micros(item.lease_expires) if item.lease_expires else None,
            item.revision, item.reclaims, 0, item.message_id, item.subject,
        ))  # fmt: skip
        for position, r in enumerate(item.recipients):
            reply = r.reply
            recipient_rows.append((
                seq, position, r.address, r.domain, r.state.value, reply.code if reply else None,
                reply.status if reply else "", reply.text if reply else "", r.remote_mta,
            ))  # fmt: skip
    conn.executemany(
        "INSERT INTO mailqueue_item (seq, id, sender, size, created, next_attempt, attempts, queue, owner, "
        "lease_expires, revision, reclaims, delay_warned, message_id, subject) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        item_rows,
    )
    conn.executemany(
        "INSERT INTO mailqueue_recipient (item_id, position, address, domain, state, reply_code, reply_status, "
        "reply_text, remote_mta) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        recipient_rows,
    )
    conn.executemany(
        "INSERT INTO mailqueue_message (item_id, data) VALUES (?, ?)", ((r[0], MESSAGE) for r in item_rows)
    )
    pick = _Picker(7)
    records = []
    for i in range(1, history + 1):
        domain = RARE_DOMAIN if i % 50000 == 17 else pick.domain()
        state = "delivered" if i % 100 < 85 else "deferred" if i % 100 < 97 else "failed"
        queue = "rare" if i % 100000 == 13 else "transactional" if i % 20 == 0 else "bulk" if i % 20 < 8 else "default"
        recorded = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(now_us / 1e6 - i * 2_592_000 / history))
        records.append((
            item_id(-(i // 2)).hex, f"<h{i // 2}@shop.example>", "noreply@shop.example", pick.address(domain), domain,
            queue, state, 250, "2.0.0", "OK", f"mx.{domain}", 1 + i % 3, i % 2000 == 3, recorded, False,
        ))  # fmt: skip
    conn.executemany(
        "INSERT INTO mailqueue_history (item_id, message_id, sender, recipient, domain, queue, state, reply_code, "
        "reply_status, reply_text, remote_mta, attempt, possibly_delivered, recorded, lease_lost) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        records,
    )
    conn.commit()
    took = {"rows": time.perf_counter() - started}
    started = time.perf_counter()
    conn.execute("ANALYZE")
    conn.close()
    took["analyze"] = time.perf_counter() - started
    return took


def _layout_version() -> str:
    from django_mailqueue.stores.redis_layout import LAYOUT_VERSION

    return LAYOUT_VERSION


def _django(db: str, name: str, port: int, store: str = "orm", redis_url: str = "", sqlite_path: str = "") -> None:
    os.environ.update(
        BENCH_SQLITE_PATH=sqlite_path,
        BENCH_DB=db,
        BENCH_PG_NAME=name,
        BENCH_PG_PORT=str(port),
        BENCH_STORE=store,
        BENCH_REDIS_URL=redis_url,
        DJANGO_SETTINGS_MODULE="bench.projects.admin_settings",
    )
    import django

    django.setup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", choices=["postgres", "redis", "sqlite"])
    parser.add_argument("--sqlite-path", default="/tmp/mq_bench_admin.sqlite3")
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--history", type=int, default=1_000_000)
    parser.add_argument("--pg-name", default="mq_bench_admin")
    parser.add_argument("--pg-port", type=int, default=5432)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--prefix", default="mqb:")
    args = parser.parse_args(argv)
    load = os.getloadavg()
    if args.store == "postgres":
        took = seed_postgres(args.pg_name, args.pg_port, args.items, args.history)
    elif args.store == "sqlite":
        took = seed_sqlite(args.sqlite_path, args.items, args.history)
    else:
        _django("postgres", args.pg_name, args.pg_port, "redis", args.redis_url)
        took = seed_redis(args.redis_url, args.items, args.prefix)
    print(json.dumps({"store": args.store, "items": args.items, "load_before": load, "seconds": took}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
