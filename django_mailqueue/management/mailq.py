"""The queue as `mailqueue_list` prints it: an item's lines, as Postfix's `mailq` shows one, and its JSON."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from ..core.items import QueueItem, Reply

#: the header line over the items; each item's first line has these columns
HEADER = f"{'-Queue ID-':<36} {'-Size-':>7} {'-Age-':>6} {'-State-':<9} {'-Tries-':>7} {'-Queue-':<14} -Sender-"
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def printable(text: str) -> str:
    """`text` with control characters shown as escapes: an address or reply cannot move a terminal's cursor."""
    return _UNPRINTABLE.sub(lambda m: repr(m.group())[1:-1], text)


def envelope(address: str) -> str:
    """An envelope sender as SMTP writes it: `<>` for the null sender."""
    return f"<{printable(address)}>"


def age(seconds: float) -> str:
    """A duration in its two largest units: 45s, 12m, 3h05m, 2d04h."""
    seconds = max(0, int(seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m"
    return f"{secs}s"


def size(n: int) -> str:
    """Bytes as 980, 12.3K, 4.5M (powers of 1024)."""
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return str(n)


def item_lines(item: QueueItem, now: datetime) -> list[str]:
    """The item's line under `HEADER`, then one line a recipient: its state, address and the reply that set it."""
    state = item.state_at(now).value
    next_attempt = item.next_attempt - now
    when = f"next in {age(next_attempt.total_seconds())}" if next_attempt.total_seconds() > 0 else "due now"
    if item.leased_at(now):
        when = f"held by {printable(item.owner or '')}"
    if item.failed_at is not None:
        when = f"failed {age((now - item.failed_at).total_seconds())} ago, kept to be sent again"
    lines = [
        f"{item.id!s:<36} {size(item.size):>7} {age((now - item.created).total_seconds()):>6} {state:<9} "
        f"{item.attempts:>7} {printable(item.queue):<14} {envelope(item.sender)}  ({when})"
    ]
    width = max(len(printable(r.address)) for r in item.recipients)
    for r in item.recipients:
        reply = f"  ({printable(str(r.reply))})" if r.reply is not None else ""
        lines.append(f"    {r.state.value:<9} {printable(r.address):<{width}}{reply}")
    return lines


def _reply(reply: Reply | None) -> dict[str, Any] | None:
    return None if reply is None else {"code": reply.code, "status": reply.status, "text": reply.text}


def item_json(item: QueueItem, now: datetime) -> dict[str, Any]:
    """The item as `mailqueue_list --json` gives it: what the text shows, in full, and times as ISO 8601."""
    return {
        "id": str(item.id),
        "state": item.state_at(now).value,
        "queue": item.queue,
        "sender": item.sender,
        "size": item.size,
        "created": item.created.isoformat(),
        "age_seconds": round((now - item.created).total_seconds(), 3),
        "next_attempt": None if item.kept else item.next_attempt.isoformat(),
        "failed_at": item.failed_at.isoformat() if item.failed_at is not None else None,
        "attempts": item.attempts,
        "owner": item.owner if item.leased_at(now) else None,
        "lease_expires": item.lease_expires.isoformat() if item.leased_at(now) and item.lease_expires else None,
        "message_id": item.message_id,
        "subject": item.subject,
        "recipients": [
            {"address": r.address, "state": r.state.value, "reply": _reply(r.reply), "remote_mta": r.remote_mta}
            for r in item.recipients
        ],
    }
