"""Runs inside one library's virtual environment and Django project: enqueue, fill, count, feed, info.

    BENCH_LIB=ours DJANGO_SETTINGS_MODULE=bench.projects.ours_settings python -m bench.driver enqueue --mode single ...

Each command prints one JSON object on its last line of output. The same
message (subject, body of ≈ --size bytes on the wire, one recipient) is made
for every library, and enqueued the way a Django site calls it: through
Django's own mail API, which hands it to the library's `EMAIL_BACKEND`:

- single: `django.core.mail.send_mail()`, which reaches the backend's `send_messages([one])`;
- batch: `django.core.mail.send_mass_mail(tuples)`, the backend's `send_messages(list)` — ours
  `add_many`, django-mailer's `DbBackend` one `bulk_create`, post-office's `EmailBackend` one
  `create()` a message;
- sendmany: post-office only, its own `mail.send_many(list)` (a second line: its users call it).

A batch runs in one `transaction.atomic()` for every library on a database
(a store that is not a database, Redis, needs none): no library's batch then
pays a commit a message.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import django

SENDER = "sender@bench.example"
DOMAIN = "bench.example"


@dataclass(frozen=True)
class Msg:
    subject: str
    body: str
    sender: str
    to: str


_BODY_CACHE: dict[int, str] = {}
_WORDS = (
    "queue deliver message worker lease retry sink relay transaction recipient envelope status "
    "notification durable outbound connection pipelining benchmark postgres sqlite redis"
).split()


def _text(length: int) -> str:
    """`length` characters of ASCII words in lines of at most 76 characters (CRLF on the wire)."""
    words = " ".join(_WORDS[(i * 7 + i // 13) % len(_WORDS)] for i in range(400)).split()
    lines, line = [], ""
    for word in words:
        if len(line) + 1 + len(word) > 76:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    block = "\n".join(lines) + "\n"
    return (block * (length // len(block) + 1))[:length].rstrip("\n")


def _wire(body: str) -> int:
    from django.core.mail import EmailMessage

    raw = EmailMessage("bench 00000", body, SENDER, [f"rcpt00000@{DOMAIN}"]).message().as_bytes()
    return len(raw) + raw.count(b"\n")  # LF -> CRLF on the wire


def body_for(size: int) -> str:
    """A body that makes the whole message, headers and CRLF line ends included, ≈ `size` bytes."""
    if size not in _BODY_CACHE:
        sample = _text(1000)
        overhead = _wire(sample) - len(sample) - sample.count("\n")
        # each body line costs its characters plus CRLF; lines are ~75 characters
        body = _text(max(1, int((size - overhead) * 76 / 77)))
        body = _text(max(1, len(body) + (size - overhead - len(body) - body.count("\n"))))
        _BODY_CACHE[size] = body
    return _BODY_CACHE[size]


def make(i: int, size: int, to: str | None = None) -> Msg:
    return Msg(f"bench {i:05d}", body_for(size), SENDER, to or f"rcpt{i:05d}@{DOMAIN}")


# --- the libraries ------------------------------------------------------------------------


class Adapter:
    uses_db = True

    def one(self, m: Msg) -> None:
        from django.core.mail import send_mail

        send_mail(m.subject, m.body, m.sender, [m.to])

    def batch(self, msgs: Sequence[Msg], mode: str = "batch") -> None:
        call = self.own_batch if mode == "sendmany" else self.django_batch
        if self.uses_db:
            from django.db import transaction

            with transaction.atomic():
                call(msgs)
        else:
            call(msgs)

    def django_batch(self, msgs: Sequence[Msg]) -> None:
        from django.core.mail import send_mass_mail

        send_mass_mail([(m.subject, m.body, m.sender, [m.to]) for m in msgs])

    def own_batch(self, msgs: Sequence[Msg]) -> None:
        raise SystemExit(f"{type(self).__name__} has no bulk call of its own in this benchmark")

    def queued(self) -> int:
        raise NotImplementedError

    def migrate(self) -> None:
        from django.core.management import call_command

        call_command("migrate", verbosity=0, interactive=False)

    def info(self) -> dict[str, object]:
        return {}


class Ours(Adapter):
    def __init__(self) -> None:
        from django.conf import settings

        self.uses_db = "orm" in settings.MAILQUEUE["STORE"]["BACKEND"]

    def queued(self) -> int:
        from django_mailqueue.stores import get_store

        return int(get_store().count())

    def fill_copies(self, count: int, size: int, batch: int) -> None:
        """Big messages: convert one through the backend's own path, store copies of it (new ids)."""
        import dataclasses
        import uuid

        from django.core.mail import EmailMessage
        from django.utils import timezone

        from django_mailqueue.conf import get_settings
        from django_mailqueue.envelopes import message_to_item
        from django_mailqueue.stores import get_store

        m = make(0, size)
        item = message_to_item(
            EmailMessage(m.subject, m.body, m.sender, [m.to]), max_message_size=get_settings().max_message_size
        )
        store = get_store()
        for i in range(0, count, batch):
            copies = [
                dataclasses.replace(item, id=uuid.uuid4(), recipients=(f"rcpt{i + j:05d}@{DOMAIN}",))
                for j in range(min(batch, count - i))
            ]
            store.add_many(copies, now=timezone.now())

    def info(self) -> dict[str, object]:
        import django_mailqueue
        from django_mailqueue import conf

        budget = [
            {"key": k.name, "default": k.default}
            for k in conf.KEYS
            if "BYTES" in k.name or "BUDGET" in k.name or "INFLIGHT" in k.name
        ]
        settings = conf.get_settings()
        return {
            "version": django_mailqueue.__version__,
            "concurrency": settings.concurrency,
            "byte_budget_keys": budget,
            "byte_budget_key": budget[0]["key"] if budget else None,
            "byte_budget": next(
                (getattr(settings, k.attr) for k in conf.KEYS if k.name in {b["key"] for b in budget}), None
            ),
        }


class Mailer(Adapter):
    def queued(self) -> int:
        from mailer.models import Message

        return int(Message.objects.count())

    def info(self) -> dict[str, object]:
        import mailer

        return {"version": mailer.__version__}


class PostOffice(Adapter):
    def own_batch(self, msgs: Sequence[Msg]) -> None:
        from post_office import mail

        mail.send_many(
            [{"sender": m.sender, "recipients": [m.to], "subject": m.subject, "message": m.body} for m in msgs]
        )

    def queued(self) -> int:
        from post_office.models import STATUS, Email

        return int(Email.objects.filter(status__in=[STATUS.queued, STATUS.requeued]).count())

    def info(self) -> dict[str, object]:
        from importlib.metadata import version

        return {"version": version("django-post-office")}


ADAPTERS: dict[str, Callable[[], Adapter]] = {"ours": Ours, "mailer": Mailer, "postoffice": PostOffice}


# --- commands -----------------------------------------------------------------------------


def cmd_enqueue(a: Adapter, args: argparse.Namespace) -> dict[str, object]:
    size, count = args.size, args.count
    if args.mode == "single":
        for i in range(args.warmup):
            a.one(make(100000 + i, size))
        warm = args.warmup
        gc.collect()  # start-up's garbage collected before the clock, for every library alike
        started, cpu = time.perf_counter(), time.process_time()
        for i in range(count):
            a.one(make(i, size))
        elapsed = time.perf_counter() - started
    else:
        batch = args.batch
        warm = batch if args.warmup else 0
        if warm:
            a.batch([make(100000 + j, size) for j in range(batch)], args.mode)
        # the messages are made before the clock starts for every library alike
        batches = [[make(i + j, size) for j in range(min(batch, count - i))] for i in range(0, count, batch)]
        gc.collect()  # start-up's garbage collected before the clock, for every library alike
        started, cpu = time.perf_counter(), time.process_time()
        for msgs in batches:
            a.batch(msgs, args.mode)
        elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu
    queued = a.queued()
    return {
        "seconds": elapsed,
        "cpu_seconds": cpu,
        "count": count,
        "queued": queued,
        "expected": count + warm,
        "ok": queued == count + warm,
    }


def cmd_fill(a: Adapter, args: argparse.Namespace) -> dict[str, object]:
    started = time.perf_counter()
    if args.size >= 1 << 20 and isinstance(a, Ours):
        a.fill_copies(args.count, args.size, args.batch)
    else:
        for i in range(0, args.count, args.batch):
            a.batch([make(i + j, args.size) for j in range(min(args.batch, args.count - i))])
    queued = a.queued()
    return {"seconds": time.perf_counter() - started, "queued": queued, "ok": queued == args.count}


def cmd_count(a: Adapter, args: argparse.Namespace) -> dict[str, object]:
    return {"queued": a.queued()}


def _arrivals(path: str, prefix: str) -> set[str]:
    seen = set()
    with open(path, errors="replace") as f:
        for line in f:
            _, _, address = line.rstrip("\n").partition(" ")
            if address.startswith(prefix):
                seen.add(address)
    return seen


def _wait_for(path: str, prefix: str, want: set[str], timeout: float) -> set[str]:
    deadline = time.monotonic() + timeout
    seen = _arrivals(path, prefix)
    while not want <= seen and time.monotonic() < deadline:
        time.sleep(0.05)
        seen = _arrivals(path, prefix)
    return want - seen


def cmd_feed(a: Adapter, args: argparse.Namespace) -> dict[str, object]:
    """An idle worker is running: add messages one at a time, `interval` apart; wait for them at the sink."""
    warm = f"{args.prefix}warm@{DOMAIN}"
    started = time.monotonic()
    a.one(make(99999, args.size, to=warm))
    missing = _wait_for(args.sink_log, args.prefix, {warm}, args.warmup_timeout)
    if missing:
        return {"ok": False, "error": f"the warm-up message did not arrive within {args.warmup_timeout} s"}
    warmup = time.monotonic() - started
    time.sleep(args.settle)
    added: dict[str, list[float]] = {}
    t0 = time.monotonic()
    for i in range(args.count):
        delay = t0 + i * args.interval - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        to = f"{args.prefix}{i}@{DOMAIN}"
        before = time.monotonic()
        a.one(make(i, args.size, to=to))
        added[to] = [before, time.monotonic()]
    missing = _wait_for(args.sink_log, args.prefix, set(added), args.timeout)
    return {"ok": not missing, "added": added, "missing": sorted(missing), "warmup_seconds": warmup}


def cmd_noop(a: Adapter, args: argparse.Namespace) -> dict[str, object]:
    return {}


def cmd_migrate(a: Adapter, args: argparse.Namespace) -> dict[str, object]:
    a.migrate()
    return {"ok": True}


def cmd_info(a: Adapter, args: argparse.Namespace) -> dict[str, object]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, object] = {"python": sys.version.split()[0], "django": django.get_version(), **a.info()}
    for dist in ("aiosmtplib", "psycopg", "redis", "hiredis"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            pass
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.driver", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name in ("noop", "migrate", "count", "info"):
        sub.add_parser(name)
    p = sub.add_parser("enqueue")
    p.add_argument("--mode", choices=["single", "batch", "sendmany"], required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--size", type=int, default=2000)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--warmup", type=int, default=20)
    p = sub.add_parser("fill")
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--size", type=int, default=2000)
    p.add_argument("--batch", type=int, default=100)
    p = sub.add_parser("feed")
    p.add_argument("--count", type=int, default=200)
    p.add_argument("--interval", type=float, default=0.05)
    p.add_argument("--size", type=int, default=2000)
    p.add_argument("--prefix", required=True)
    p.add_argument("--sink-log", required=True)
    p.add_argument("--timeout", type=float, default=60)
    p.add_argument("--warmup-timeout", type=float, default=60)
    p.add_argument("--settle", type=float, default=0.5)
    args = parser.parse_args(argv)

    django.setup()
    adapter = ADAPTERS[os.environ["BENCH_LIB"]]()
    result = globals()[f"cmd_{args.cmd}"](adapter, args)
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
