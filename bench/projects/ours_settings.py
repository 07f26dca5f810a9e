"""django-mailqueue under benchmark: the ORM store on BENCH_DB, or the Redis store (BENCH_STORE=redis)."""

from __future__ import annotations

import os

from bench.projects.common import *  # noqa: F403
from bench.projects.common import SINK_PORT

INSTALLED_APPS = ["django_mailqueue"]
EMAIL_BACKEND = "django_mailqueue.backends.QueueEmailBackend"

if os.environ.get("BENCH_STORE", "orm") in ("redis", "redis-cluster"):
    STORE = {
        "BACKEND": "django_mailqueue.stores.redis.RedisStore",
        "OPTIONS": {"url": os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")},
    }
    if os.environ["BENCH_STORE"] == "redis-cluster":
        STORE["OPTIONS"]["cluster"] = True  # type: ignore[index]
        # the queue in partitions, one a primary (docs/redis.md, "Partitions"); 1: in one slot
        STORE["OPTIONS"]["partitions"] = int(os.environ.get("BENCH_REDIS_PARTITIONS", "3"))  # type: ignore[index]
else:
    STORE = {"BACKEND": "django_mailqueue.stores.orm.OrmStore", "OPTIONS": {}}

# Everything else at its default (CONCURRENCY 20, LEASE 300, POLL_INTERVAL, history kept).
MAILQUEUE: dict[str, object] = {
    "STORE": STORE,
    "HOSTNAME": "bench.example",
    "ROUTES": {"*": {"HOST": "127.0.0.1", "PORT": SINK_PORT, "TLS": "none"}},
}
# `deliver.1.shaped`: traffic-shaping limits on the relay that one process never reaches (issue 20, line 5)
if os.environ.get("BENCH_SHAPED"):
    MAILQUEUE["ROUTES"] = {
        "*": {
            "HOST": "127.0.0.1",
            "PORT": SINK_PORT,
            "TLS": "none",
            "RATE": "100000/s",
            "CONNECTIONS": 100,
            "MESSAGES_PER_CONNECTION": 100000,
        }
    }
if os.environ.get("BENCH_CONCURRENCY"):
    MAILQUEUE["CONCURRENCY"] = int(os.environ["BENCH_CONCURRENCY"])
# `deliver.1.dkim-*`: the same mail signed (bench/measure_delivery.py writes the key)
if os.environ.get("BENCH_DKIM_KEY"):
    MAILQUEUE["DKIM"] = {
        "bench.example": {
            "SELECTOR": "bench",
            "PRIVATE_KEY": os.environ["BENCH_DKIM_KEY"],
            "ALGORITHM": os.environ.get("BENCH_DKIM_ALGORITHM", "rsa-sha256"),
        }
    }
