"""A scripted raw SMTP server on loopback, for misbehaviour: each command answered from a script — any bytes at
all, or `CLOSE`, `SILENT`, a `Trickle`, a broken STARTTLS handshake, a drop during DATA — and the raw bytes it got
recorded (smtp_server.py's `ServerPool` starts it as `smtp_servers.scripted(...)`)."""

from __future__ import annotations

import asyncio
import base64
import threading
from collections.abc import Callable
from dataclasses import dataclass

from .loopback import LoopThreadServer, free_port

# --- the scripted raw server --------------------------------------------------------------


class _Special:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


#: Close the connection instead of answering.
CLOSE = _Special("CLOSE")
#: Never answer (the connection stays open until the client leaves).
SILENT = _Special("SILENT")
#: Answer STARTTLS with 220, then send bytes that are not a TLS handshake and close.
BROKEN_TLS = _Special("BROKEN_TLS")


@dataclass(frozen=True)
class Trickle:
    """Send `data` one byte every `interval` seconds; `forever` repeats it without end."""

    data: bytes
    interval: float = 1.0
    forever: bool = True


@dataclass(frozen=True)
class DropDuringData:
    """After the 354, read `after` bytes of the message, wait `delay` seconds, then reset the connection."""

    after: int = 10
    #: a server slow to drop (as a loaded machine makes one): the client may write on meanwhile
    delay: float = 0.0


Action = bytes | _Special | Trickle | DropDuringData | Callable[[bytes], bytes]

DEFAULT_EHLO = b"250-scripted.test.example\r\n250-8BITMIME\r\n250-SIZE 10000000\r\n250 SMTPUTF8\r\n"
#: The EHLO reply of a scripted server that offers PIPELINING (it answers commands in order as they come).
PIPELINING_EHLO = DEFAULT_EHLO.replace(b"250 SMTPUTF8", b"250-SMTPUTF8\r\n250 PIPELINING")
DEFAULT_REPLIES: dict[str, Action] = {
    "EHLO": DEFAULT_EHLO,
    "HELO": b"250 scripted.test.example\r\n",
    "MAIL": b"250 2.1.0 Ok\r\n",
    "RCPT": b"250 2.1.5 Ok\r\n",
    "DATA": b"354 End data with <CR><LF>.<CR><LF>\r\n",
    "END": b"250 2.0.0 Ok: queued\r\n",
    "RSET": b"250 2.0.0 Ok\r\n",
    "NOOP": b"250 2.0.0 Ok\r\n",
    "QUIT": b"221 2.0.0 Bye\r\n",
    "STARTTLS": b"454 4.7.0 TLS not available\r\n",
    "AUTH": b"535 5.7.8 Authentication failed\r\n",
}


class ScriptedSmtpServer(LoopThreadServer):
    """A raw SMTP server answering from a script; records the bytes it got.

    `replies` overrides `DEFAULT_REPLIES` by verb ("EHLO", "MAIL", "RCPT",
    "DATA", "END" — the reply after the final "." —, "STARTTLS", "AUTH",
    ...). An action is the exact bytes to send (CRLFs included, so anything
    malformed can be sent), `CLOSE`, `SILENT`, a `Trickle`, `BROKEN_TLS`
    (for STARTTLS), `DropDuringData` (for DATA), or a callable taking the
    command line and returning bytes. `rcpt_replies` answers RCPT per
    address (the text between the angle brackets).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        greeting: Action = b"220 scripted ESMTP\r\n",
        replies: dict[str, Action] | None = None,
        rcpt_replies: dict[str, Action] | None = None,
    ) -> None:
        self.host = host
        self.port = port or free_port((host,))
        self.greeting = greeting
        self.replies = {**DEFAULT_REPLIES, **(replies or {})}
        self.rcpt_replies = dict(rcpt_replies or {})
        self.connections = 0
        #: every command line received (without CRLF), in order
        self.lines: list[bytes] = []
        #: every message: the raw bytes after the 354, through the first CRLF.CRLF
        self.data: list[bytes] = []
        #: everything each connection sent, raw
        self.raw: list[bytearray] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def commands(self) -> list[str]:
        return [line.split(b" ", 1)[0].decode("ascii", "replace").upper() for line in self.lines]

    async def _act(self, writer: asyncio.StreamWriter, action: Action, line: bytes) -> bool:
        """Carry out `action`; False when the connection is over."""
        if callable(action) and not isinstance(action, _Special | Trickle | DropDuringData):
            action = action(line)
        if isinstance(action, bytes):
            writer.write(action)
            await writer.drain()
            return True
        if action is CLOSE:
            writer.close()
            return False
        if action is SILENT:
            await asyncio.Event().wait()  # until cancelled: the client gives up and leaves
            return False
        if isinstance(action, Trickle):
            while True:
                for byte in action.data:
                    writer.write(bytes([byte]))
                    await writer.drain()
                    await asyncio.sleep(action.interval)
                if not action.forever:
                    return True
        raise AssertionError(f"action {action!r} does not apply here")

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        raw = bytearray()
        self.raw.append(raw)
        try:
            if not await self._act(writer, self.greeting, b""):
                return
            while True:
                line = await reader.readline()
                if not line:
                    return
                raw.extend(line)
                command = line.rstrip(b"\r\n")
                self.lines.append(command)
                verb = command.split(b" ", 1)[0].decode("ascii", "replace").upper()
                action: Action = self.replies.get(verb, b"502 5.5.2 Command not recognized\r\n")
                if verb == "RCPT":
                    address = command.partition(b"<")[2].partition(b">")[0].decode("utf-8", "replace")
                    action = self.rcpt_replies.get(address, action)
                if verb == "STARTTLS" and action is BROKEN_TLS:
                    writer.write(b"220 2.0.0 Ready to start TLS\r\n")
                    await writer.drain()
                    writer.write(b"this is not a TLS handshake\r\n" * 4)
                    await writer.drain()
                    writer.close()
                    return
                if verb == "DATA":
                    if isinstance(action, DropDuringData):
                        writer.write(b"354 End data with <CR><LF>.<CR><LF>\r\n")
                        await writer.drain()
                        body = await reader.read(action.after)
                        raw.extend(body)
                        if action.delay:
                            await asyncio.sleep(action.delay)
                        writer.transport.abort()
                        return
                    if not await self._act(writer, action, command):
                        return
                    if not isinstance(action, bytes) or not action.startswith(b"354"):
                        continue
                    message = bytearray()
                    while not (message == b".\r\n" or message.endswith(b"\r\n.\r\n")):
                        chunk = await reader.readline()
                        if not chunk:
                            return
                        message.extend(chunk)
                        raw.extend(chunk)
                    self.data.append(bytes(message))
                    if not await self._act(writer, self.replies["END"], b""):
                        return
                    continue
                if not await self._act(writer, action, command):
                    return
                if verb == "QUIT":
                    writer.close()
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            if not writer.is_closing():
                writer.close()

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
            await self._server.wait_closed()

    async def _listen(self) -> asyncio.AbstractServer:
        return await asyncio.start_server(self._track, self.host, self.port)


def auth_echo(line: bytes) -> bytes:
    """An AUTH action that refuses the credentials and echoes them back, decoded and raw (a leaky server)."""
    parts = line.split()
    decoded = ""
    if len(parts) >= 3:
        try:
            decoded = base64.b64decode(parts[2]).replace(b"\0", b" ").decode("utf-8", "replace")
        except ValueError:
            decoded = "?"
    return b"535 5.7.8 credentials " + decoded.encode() + b" (" + b" ".join(parts[1:]) + b") rejected\r\n"
