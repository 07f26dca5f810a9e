"""The signals a worker sends once an outcome is recorded (see docs/guide.md, Events).

Order for one attempt: `suspended` when a destination of it said "slow down" (or
is dead), an `error` for a lost message, then each recipient's `delivered` /
`deferred` / `failed`, then `dsn`. A receiver that raises is
logged and ignored; sync and async receivers both work, and neither blocks the
worker's event loop. `sender` is the store's class.
"""

from django.dispatch import Signal

#: provides args: item_id, recipient, reply, attempt
delivered = Signal()

#: provides args: item_id, recipient, reply, attempt, next_attempt
deferred = Signal()

#: provides args: item_id, recipient, reply, attempt
failed = Signal()

#: provides args: kind ("delayed" | "failed"), dsn_id, of, to, recipients
dsn = Signal()

#: provides args: error (a QueueError), item_id (or None)
error = Signal()

#: provides args: destination (a shaping key), reply (what caused it), until (no new connection before it)
suspended = Signal()
