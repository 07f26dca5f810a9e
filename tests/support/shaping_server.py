"""An SMTP server for the traffic-shaping tests: counts sessions at once, enforces a rate, throttles, or never greets.

`CountingSmtpServer` speaks just enough SMTP (EHLO/HELO, MAIL, RCPT, DATA,
RSET, NOOP, QUIT; PIPELINING offered) and records, with `time.monotonic()`
times, every connection (`sessions`: opened, closed, messages carried), the
most sessions it had open at once (`most_at_once`), every message accepted
(`accepted`: its time, Message-ID and recipients) and every throttling reply
it gave (`throttled`). Modes, changeable while it runs:

- `rate`: the most messages it accepts in any sliding second; past that, a
  `MAIL FROM` is answered `454 4.7.0 Throttling failure: Maximum sending
  rate exceeded` (Amazon SES's words); with `rate_grace`, only the messages
  accepted from that many seconds after the first one count (issue 20's
  line 1 bounds the windows after the first second, whose sessions are
  still being opened);
- `throttle`: a reply line given as the greeting of every connection, which
  is then closed (`b"421 4.7.0 Try again later, closing connection."`);
- `blackhole`: connections are accepted and never greeted;
- `delay`: seconds it takes to answer the end of each message.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from .loopback import LoopThreadServer


@dataclass
class Connection:
    opened: float
    closed: float | None = None
    messages: int = 0
    #: the greeting was a throttling reply
    throttled: bool = False


@dataclass
class Accepted:
    at: float
    message_id: str
    recipients: tuple[str, ...]


@dataclass
class CountingSmtpServer(LoopThreadServer):
    host: str = "127.0.0.1"
    port: int = 0
    rate: int | None = None
    #: seconds after the first accepted message whose messages the rate does not count
    rate_grace: float = 0.0
    throttle: bytes | None = None
    blackhole: bool = False
    #: seconds before the reply to the end of each message
    delay: float = 0.0
    #: hold the reply to MAIL until this many sessions wait for it, or `hold_for` seconds after the first: the
    #: messages whose tokens were taken meanwhile arrive together (once; later MAILs go on at once)
    hold_mail: int = 0
    hold_for: float = 0.0
    sessions: list[Connection] = field(default_factory=list)
    accepted: list[Accepted] = field(default_factory=list)
    throttled: list[float] = field(default_factory=list)
    most_at_once: int = 0
    open_now: int = 0
    thread_name = "counting-smtp"

    def __post_init__(self) -> None:
        self._loop = None
        self._server = None
        self._thread = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._recent: deque[float] = deque()
        self._gate: asyncio.Event | None = None
        self._holding = 0

    def connections_between(self, start: float, end: float) -> list[Connection]:
        return [c for c in self.sessions if start <= c.opened < end]

    def most_in_a_second(self, after: float) -> int:
        """The most messages accepted in any one-second window starting at or after `after`."""
        times = sorted(a.at for a in self.accepted if a.at >= after)
        most, first = 0, 0
        for last, at in enumerate(times):
            while at - times[first] >= 1.0:
                first += 1
            most = max(most, last - first + 1)
        return most

    def _rate_allows(self, now: float) -> bool:
        while self._recent and now - self._recent[0] >= 1.0:
            self._recent.popleft()
        if self.rate is None:
            return True
        if self.rate_grace and self.accepted:
            counted_from = self.accepted[0].at + self.rate_grace
            return sum(1 for at in self._recent if at >= counted_from) < self.rate
        return len(self._recent) < self.rate

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = Connection(opened=time.monotonic())
        self.sessions.append(connection)
        self.open_now += 1
        self.most_at_once = max(self.most_at_once, self.open_now)
        try:
            if self.blackhole:
                await reader.read()  # until the client gives up
                return
            if self.throttle is not None:
                connection.throttled = True
                writer.write(self.throttle.rstrip(b"\r\n") + b"\r\n")
                await writer.drain()
                return
            writer.write(b"220 counting.test ESMTP\r\n")
            recipients: list[str] = []
            mail = False
            while True:
                line = await reader.readline()
                if not line:
                    return
                verb = line[:4].upper()
                if verb in (b"EHLO", b"HELO"):
                    writer.write(b"250-counting.test\r\n250-PIPELINING\r\n250 8BITMIME\r\n")
                elif verb == b"MAIL":
                    recipients = []
                    if self.hold_mail:
                        await self._hold()
                    mail = self._rate_allows(time.monotonic())
                    if mail:
                        writer.write(b"250 2.1.0 OK\r\n")
                    else:
                        self.throttled.append(time.monotonic())
                        writer.write(b"454 4.7.0 Throttling failure: Maximum sending rate exceeded.\r\n")
                elif verb == b"RCPT" and not mail:
                    writer.write(b"503 5.5.1 Error: need MAIL command\r\n")
                elif verb == b"RCPT":
                    recipients.append(line.partition(b"<")[2].partition(b">")[0].decode())
                    writer.write(b"250 2.1.5 OK\r\n")
                elif verb == b"DATA" and not recipients:
                    writer.write(b"554 5.5.1 Error: no valid recipients\r\n")
                elif verb == b"DATA":
                    writer.write(b"354 go ahead\r\n")
                    await writer.drain()
                    message = bytearray()
                    while not message.endswith(b"\r\n.\r\n"):
                        chunk = await reader.readline()
                        if not chunk:
                            return
                        message.extend(chunk)
                    if self.delay:
                        await asyncio.sleep(self.delay)
                    now = time.monotonic()
                    self._recent.append(now)
                    connection.messages += 1
                    self.accepted.append(Accepted(now, _message_id(bytes(message)), tuple(recipients)))
                    writer.write(b"250 2.0.0 OK queued\r\n")
                elif verb == b"RSET":
                    mail, recipients = False, []
                    writer.write(b"250 2.0.0 OK\r\n")
                elif verb == b"NOOP":
                    writer.write(b"250 2.0.0 OK\r\n")
                elif verb == b"QUIT":
                    writer.write(b"221 2.0.0 Bye\r\n")
                    await writer.drain()
                    return
                else:
                    writer.write(b"502 5.5.2 Command not recognized\r\n")
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            connection.closed = time.monotonic()
            self.open_now -= 1
            if not writer.is_closing():
                writer.close()

    async def _hold(self) -> None:
        if self._gate is None:
            self._gate = asyncio.Event()
            asyncio.get_running_loop().call_later(self.hold_for, self._gate.set)
        self._holding += 1
        if self._holding >= self.hold_mail:
            self._gate.set()
        await self._gate.wait()

    def _track(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.get_running_loop().create_task(self._serve(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _listen(self) -> asyncio.AbstractServer:
        # Its clock is the measure (a message is counted when this thread reads it): on a loaded machine a thread
        # not run for a tenth of a second would count that long's arrivals as one moment's. Run before others
        # where the system allows it (root, or CAP_SYS_NICE).
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), -10)
        return await asyncio.start_server(self._track, self.host, self.port)

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()


def _message_id(message: bytes) -> str:
    for line in message.split(b"\r\n"):
        if line.lower().startswith(b"message-id:"):
            return line.split(b":", 1)[1].strip().decode()
        if not line:
            break
    return ""
