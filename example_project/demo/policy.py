"""How the sink answers RCPT TO, like the recipients' MX would: accept, greylist, or reject.

Plain Python (no Django), so it can be read — and tested — on its own.
"""

from __future__ import annotations

#: answered 550 at every RCPT: a final failure, and a DSN back to the sender
REJECTED = {"nobody@example.net": "550 5.1.1 No such user"}
#: answered 451 at the first RCPT from a given sender, 250 from then on
GREYLISTED = {"greylisted@example.net"}

ACCEPT = "250 2.1.5 OK"
GREYLIST = "451 4.7.1 Greylisted, try again later"


class MxPolicy:
    """The reply to each RCPT TO. Greylisting remembers (sender, recipient) pairs for the process's life."""

    def __init__(self, rejected: dict[str, str] | None = None, greylisted: set[str] | None = None) -> None:
        self.rejected = {k.lower(): v for k, v in (REJECTED if rejected is None else rejected).items()}
        self.greylisted = {a.lower() for a in (GREYLISTED if greylisted is None else greylisted)}
        self._seen: set[tuple[str, str]] = set()

    def rcpt_reply(self, envelope_from: str, recipient: str) -> str:
        """The reply line for RCPT TO:<recipient> in a transaction from <envelope_from>."""
        address = recipient.lower()
        if address in self.rejected:
            return self.rejected[address]
        if address in self.greylisted:
            pair = (envelope_from.lower(), address)
            if pair not in self._seen:
                self._seen.add(pair)
                return GREYLIST
        return ACCEPT
