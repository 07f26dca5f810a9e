"""A fast recording SMTP server on loopback that injects faults at set rates, for the reliability suite.

    server = FaultySmtpServer("127.0.0.2", port, FaultRates(refuse=0.03, reply_lost=0.03, ...), seed=7).start()
    ...
    server.accepted          # every (Message-ID, recipient) answered 250 after the final "."
    server.reply_lost        # every (Message-ID, recipient) recorded, then its reply withheld
    server.faults            # Counter of faults injected, by kind
    server.stop()

A raw asyncio server (no aiosmtpd: thousands of messages a minute on one
thread) in a thread of its own with its own event loop. It speaks just
enough ESMTP for the queue's client: EHLO/HELO, MAIL, RCPT, DATA, RSET,
NOOP, QUIT; no STARTTLS. PIPELINING is offered on a share of the
connections (`pipelining`, half by default): it answers commands in order
as they come, so a pipelined group meets every fault below too.

Faults, each drawn with its own rate from a seeded RNG:

- `refuse`: the connection is reset as soon as it is accepted (the client
  tries the next address, or defers);
- `greeting_421`: the greeting is a 421 and the connection closes;
- `mail_421`: MAIL FROM is answered 421 and the connection closes;
- `stall`: MAIL FROM is never answered (the client's MAIL timeout ends it);
- `rcpt_452`: one RCPT of the transaction is answered 452 (that recipient
  is deferred);
- `drop_data`: after the 354, part of the message is read, then the
  connection is reset;
- `data_451`: the whole message is read, then answered 451 (not recorded);
- `reply_lost`: the whole message is read and *recorded as delivered*, then
  the connection closes without a reply — the documented duplicate window:
  the client cannot know, defers, and sends it again;
- `trickle`: the 250 after the final "." comes one byte at a time (slow but
  within the client's timeouts; recorded as delivered).

Recipients in `bounce` (by local part prefix, "bounce" by default) are
always answered 550 5.1.1 at RCPT, so their expected outcome is known.

Each acceptance records the client's EHLO name, so a harness that gives
every worker its own HOSTNAME knows which worker delivered each copy.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import NamedTuple

from .loopback import LoopThreadServer, free_port

FAULT_KINDS = (
    "refuse",
    "greeting_421",
    "mail_421",
    "stall",
    "rcpt_452",
    "drop_data",
    "data_451",
    "reply_lost",
    "trickle",
)

_EHLO = b"250-faulty.test.example\r\n250-8BITMIME\r\n250-SIZE 200000000\r\n250-SMTPUTF8\r\n250 ENHANCEDSTATUSCODES\r\n"
_EHLO_PIPELINING = _EHLO.replace(b"250 ENHANCEDSTATUSCODES", b"250-ENHANCEDSTATUSCODES\r\n250 PIPELINING")
#: The largest message (and line) the server reads.
READ_LIMIT = 256 * 1024 * 1024


@dataclass(frozen=True)
class FaultRates:
    """The probability of each fault (0 to 1), drawn per connection (`refuse`, `greeting_421`) or per
    transaction (the others)."""

    refuse: float = 0.0
    greeting_421: float = 0.0
    mail_421: float = 0.0
    stall: float = 0.0
    rcpt_452: float = 0.0
    drop_data: float = 0.0
    data_451: float = 0.0
    reply_lost: float = 0.0
    trickle: float = 0.0

    @classmethod
    def every(cls, rate: float) -> FaultRates:
        """Every fault at `rate`."""
        return cls(**dict.fromkeys(FAULT_KINDS, rate))


class Acceptance(NamedTuple):
    """One (message, recipient) the server took responsibility for."""

    message_id: str
    recipient: str
    sender: str
    #: the client's EHLO name (the harness's worker name)
    helo: str
    #: time.time() when it was recorded
    at: float
    #: recorded, but the reply after the final "." was withheld (the client saw a lost reply)
    reply_lost: bool


@dataclass
class _Transaction:
    sender: str = ""
    recipients: list[str] = field(default_factory=list)
    fault: str | None = None


def message_id_of(data: bytes) -> str:
    """The Message-ID header's value (unfolded, stripped) of a raw message, or ""."""
    head = data.split(b"\r\n\r\n", 1)[0]
    lower = head.lower()
    start = lower.find(b"\nmessage-id:")
    if start < 0:
        if not lower.startswith(b"message-id:"):
            return ""
        start = -1
    start += len(b"\nmessage-id:")
    end = head.find(b"\r\n", start)
    while end >= 0 and head[end + 2 : end + 3] in (b" ", b"\t"):
        end = head.find(b"\r\n", end + 2)
    value = head[start:] if end < 0 else head[start:end]
    return " ".join(value.decode("utf-8", "replace").split())


class FaultySmtpServer(LoopThreadServer):
    """The server: `start()`, `stop()`; what it saw in `accepted`, `faults`, `connections`.

    `stall_seconds` is how long a stalled MAIL waits before closing (longer than
    the client's MAIL timeout); `trickle_interval` the pause between the bytes
    of a trickled reply.
    """

    thread_name = "faulty-smtp"

    def __init__(
        self,
        host: str = "127.0.0.2",
        port: int = 0,
        rates: FaultRates | None = None,
        *,
        seed: int = 0,
        bounce_prefix: str = "bounce",
        stall_seconds: float = 30.0,
        trickle_interval: float = 0.02,
        pipelining: float = 0.5,
    ) -> None:
        self.host = host
        self.port = port or free_port((host,))
        self.rates = rates or FaultRates()
        self.bounce_prefix = bounce_prefix
        self.stall_seconds = stall_seconds
        self.trickle_interval = trickle_interval
        self.pipelining = pipelining
        #: connections offered PIPELINING
        self.pipelining_offered = 0
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        #: every acceptance, in order (reply-lost ones included)
        self.accepted: list[Acceptance] = []
        #: faults injected, by kind
        self.faults: Counter[str] = Counter()
        self.connections = 0
        self.transactions = 0
        #: 550 answers given to `bounce` recipients
        self.bounced: Counter[str] = Counter()
        #: the messages from the null sender (the DSNs), whole
        self.dsn_data: list[bytes] = []
        #: set False to stop injecting faults (the rest of the run converges faster)
        self.injecting = True
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    # --- what was seen ---------------------------------------------------------------

    def snapshot(self) -> list[Acceptance]:
        with self._lock:
            return list(self.accepted)

    def pair_counts(self) -> Counter[tuple[str, str]]:
        """How many times each (Message-ID, recipient) was accepted."""
        return Counter((a.message_id, a.recipient) for a in self.snapshot())

    @property
    def reply_lost(self) -> list[Acceptance]:
        return [a for a in self.snapshot() if a.reply_lost]

    def last_activity(self) -> float:
        with self._lock:
            return self.accepted[-1].at if self.accepted else 0.0

    # --- faults ------------------------------------------------------------------------

    def _draw(self, kind: str) -> bool:
        rate = getattr(self.rates, kind)
        if not self.injecting or rate <= 0:
            return False
        with self._lock:
            hit = self._rng.random() < rate
            if hit:
                self.faults[kind] += 1
        return hit

    def _transaction_fault(self) -> str | None:
        for kind in ("mail_421", "stall", "rcpt_452", "drop_data", "data_451", "reply_lost", "trickle"):
            if self._draw(kind):
                return kind
        return None

    # --- the session ---------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with self._lock:
            self.connections += 1
        if self._draw("refuse"):
            writer.transport.abort()
            return
        helo = ""
        with self._lock:
            pipelining = self._rng.random() < self.pipelining
            self.pipelining_offered += pipelining
        try:
            if self._draw("greeting_421"):
                writer.write(b"421 4.3.2 faulty.test.example busy, try again later\r\n")
                await writer.drain()
                return
            writer.write(b"220 faulty.test.example ESMTP\r\n")
            transaction: _Transaction | None = None
            while True:
                line = await reader.readline()
                if not line:
                    return
                command = line.rstrip(b"\r\n")
                verb = command[:4].upper()
                if verb in (b"EHLO", b"HELO"):
                    helo = command[5:].decode("utf-8", "replace").strip()
                    ehlo = _EHLO_PIPELINING if pipelining else _EHLO
                    writer.write(ehlo if verb == b"EHLO" else b"250 faulty.test.example\r\n")
                    transaction = None
                elif verb == b"MAIL":
                    fault = self._transaction_fault()
                    if fault == "mail_421":
                        writer.write(b"421 4.3.2 shutting down\r\n")
                        await writer.drain()
                        return
                    if fault == "stall":
                        await asyncio.sleep(self.stall_seconds)
                        return
                    transaction = _Transaction(sender=_between_brackets(command), fault=fault)
                    writer.write(b"250 2.1.0 Ok\r\n")
                elif verb == b"RCPT":
                    if transaction is None:
                        writer.write(b"503 5.5.1 MAIL first\r\n")
                        continue
                    address = _between_brackets(command)
                    if address.startswith(self.bounce_prefix):
                        with self._lock:
                            self.bounced[address] += 1
                        writer.write(b"550 5.1.1 <" + address.encode() + b">: no such user here\r\n")
                    elif transaction.fault == "rcpt_452":
                        transaction.fault = None  # one recipient of the transaction
                        writer.write(b"452 4.2.2 mailbox full, try later\r\n")
                    else:
                        transaction.recipients.append(address)
                        writer.write(b"250 2.1.5 Ok\r\n")
                elif verb == b"DATA":
                    if transaction is None or not transaction.recipients:
                        writer.write(b"503 5.5.1 no valid recipients\r\n")
                        continue
                    writer.write(b"354 End data with <CR><LF>.<CR><LF>\r\n")
                    await writer.drain()
                    if transaction.fault == "drop_data":
                        await reader.read(200)
                        writer.transport.abort()
                        return
                    data = await reader.readuntil(b"\r\n.\r\n")
                    if not await self._end_of_data(writer, transaction, data, helo):
                        return
                    transaction = None
                elif verb == b"RSET":
                    transaction = None
                    writer.write(b"250 2.0.0 Ok\r\n")
                elif verb == b"NOOP":
                    writer.write(b"250 2.0.0 Ok\r\n")
                elif verb == b"QUIT":
                    writer.write(b"221 2.0.0 Bye\r\n")
                    await writer.drain()
                    return
                else:
                    writer.write(b"502 5.5.2 command not recognized\r\n")
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            return
        finally:
            if not writer.is_closing():
                writer.close()

    async def _end_of_data(
        self, writer: asyncio.StreamWriter, transaction: _Transaction, data: bytes, helo: str
    ) -> bool:
        """Answer the final "."; False when the connection is over."""
        with self._lock:
            self.transactions += 1
        if transaction.fault == "data_451":
            writer.write(b"451 4.3.0 local error in processing\r\n")
            await writer.drain()
            return True
        message_id = message_id_of(data)
        lost = transaction.fault == "reply_lost"
        now = time.time()
        with self._lock:
            for recipient in transaction.recipients:
                self.accepted.append(Acceptance(message_id, recipient, transaction.sender, helo, now, lost))
            if transaction.sender == "":
                self.dsn_data.append(data)
        if lost:
            writer.transport.abort()  # recorded, never answered
            return False
        reply = b"250 2.0.0 Ok: queued\r\n"
        if transaction.fault == "trickle":
            for byte in reply:
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(self.trickle_interval)
        else:
            writer.write(reply)
        return True

    # --- running -------------------------------------------------------------------------

    def _track(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.get_running_loop().create_task(self._serve(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)

    async def _listen(self) -> asyncio.AbstractServer:
        return await asyncio.start_server(self._track, self.host, self.port, limit=READ_LIMIT, backlog=512)


def _between_brackets(command: bytes) -> str:
    return command.partition(b"<")[2].partition(b">")[0].decode("utf-8", "replace")


__all__ = ["FAULT_KINDS", "Acceptance", "FaultRates", "FaultySmtpServer", "message_id_of"]
