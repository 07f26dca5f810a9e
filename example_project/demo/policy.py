"""How the sink answers RCPT TO, like the recipients' MX would: accept, greylist, reject, or throttle.

Plain Python (no Django), so it can be read — and tested — on its own.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

#: answered 550 at every RCPT: a final failure, and a DSN back to the sender
REJECTED = {"nobody@example.net": "550 5.1.1 No such user"}
#: answered 451 at the first RCPT from a given sender, 250 from then on
GREYLISTED = {"greylisted@example.net"}

#: a domain whose MX takes THROTTLE_COUNT messages every THROTTLE_SECONDS and answers 421 past that, as
#: Gmail does a sender it finds too fast: the worker suspends it (MAILQUEUE["SHAPING"]) until it may go on
THROTTLED = {"busy.example.org"}
THROTTLE_COUNT = 2
THROTTLE_SECONDS = 30.0

ACCEPT = "250 2.1.5 OK"
GREYLIST = "451 4.7.1 Greylisted, try again later"
THROTTLE = "421 4.7.0 Try again later, closing connection."


class MxPolicy:
    """The reply to each RCPT TO. Greylisting remembers (sender, recipient) pairs for the process's life."""

    def __init__(
        self,
        rejected: dict[str, str] | None = None,
        greylisted: set[str] | None = None,
        throttled: set[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rejected = {k.lower(): v for k, v in (REJECTED if rejected is None else rejected).items()}
        self.greylisted = {a.lower() for a in (GREYLISTED if greylisted is None else greylisted)}
        self.throttled = {d.lower() for d in (THROTTLED if throttled is None else throttled)}
        self.clock = clock
        self._seen: set[tuple[str, str]] = set()
        #: when the throttled domains' recipients were last accepted
        self._taken: deque[float] = deque()

    def rcpt_reply(self, envelope_from: str, recipient: str) -> str:
        """The reply line for RCPT TO:<recipient> in a transaction from <envelope_from>."""
        address = recipient.lower()
        if address.rpartition("@")[2] in self.throttled:
            now = self.clock()
            while self._taken and now - self._taken[0] >= THROTTLE_SECONDS:
                self._taken.popleft()
            if len(self._taken) >= THROTTLE_COUNT:
                return THROTTLE
            self._taken.append(now)
            return ACCEPT
        if address in self.rejected:
            return self.rejected[address]
        if address in self.greylisted:
            pair = (envelope_from.lower(), address)
            if pair not in self._seen:
                self._seen.add(pair)
                return GREYLIST
        return ACCEPT
