"""SMTP servers on loopback for tests: a recording aiosmtpd server, and a scripted raw one for misbehaviour.

- `SmtpServer`: aiosmtpd, configurable (STARTTLS, implicit TLS, AUTH with
  checked credentials, SIZE, SMTPUTF8, per-recipient / MAIL / DATA replies),
  recording every message (`messages`) and every command verb (`commands`).
- `ScriptedSmtpServer`: a raw asyncio server that answers each command from
  a script — any bytes at all (malformed, overlong, not UTF-8), or `CLOSE`,
  `SILENT`, a `Trickle`, a broken STARTTLS handshake, a drop during DATA —
  and records the raw bytes it got (`data` holds each message exactly as it
  came on the wire, up to and including the first CRLF.CRLF: a strict
  receiver's view).
- `ServerPool` (the `smtp_servers` fixture): starts servers on any loopback
  address (127.0.0.2, 127.0.0.3, ... — Linux routes all of 127/8 to lo) on
  one shared port, since `MX_PORT` is one setting, and stops them all.

Both servers run in a thread of their own with their own event loop, so
they answer whatever the test's event loop is doing.
"""

from __future__ import annotations

import asyncio
import base64
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Self

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from .certs import CertificateAuthority, certificate_authority

LOOPBACK_HOSTS = ("127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5")


def free_port(hosts: tuple[str, ...] = LOOPBACK_HOSTS) -> int:
    """A TCP port free on every one of `hosts` (so servers on several loopback addresses can share it)."""
    for _ in range(50):
        probe = socket.socket()
        probe.bind((hosts[0], 0))
        port = int(probe.getsockname()[1])
        sockets = [probe]
        try:
            for host in hosts[1:]:
                s = socket.socket()
                sockets.append(s)
                s.bind((host, port))
            return port
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise RuntimeError("no port free on every loopback address")


# --- the aiosmtpd server ----------------------------------------------------------------


@dataclass
class ReceivedMessage:
    """One message an `SmtpServer` accepted."""

    mail_from: str
    rcpt_tos: list[str]
    #: the message as the server read it (dot-unstuffed, CRLF line endings as sent)
    data: bytes
    mail_options: list[str]
    smtp_utf8: bool
    #: the session was under TLS (STARTTLS or implicit)
    tls: bool
    #: the login the client authenticated as, if it did
    login: str | None
    #: the EHLO/HELO name the client gave
    helo: str | None


@dataclass
class Recorder:
    """What an `SmtpServer` saw."""

    commands: list[str] = field(default_factory=list)
    messages: list[ReceivedMessage] = field(default_factory=list)
    connections: int = 0
    #: what the `data_check` found wrong in the messages it refused
    problems: list[str] = field(default_factory=list)

    def reset(self) -> None:
        self.commands.clear()
        self.messages.clear()
        self.connections = 0
        self.problems.clear()


class RecordingHandler:
    """An aiosmtpd handler that records messages and answers as scripted.

    `rcpt_replies`: recipient address -> reply line ("550 5.1.1 no such user");
    a 2xx line accepts the recipient. `mail_reply` answers every MAIL FROM;
    `data_reply` the end of every message (default "250 2.0.0 OK").
    `data_check`: says what is wrong with a message's bytes; a message it
    finds fault with is refused (554) and the faults kept in `problems`.
    `rcpt_limit`: the most recipients a transaction takes, more answered as
    Postfix's `smtpd_recipient_limit` does ("452 4.5.3 Error: too many recipients").
    """

    def __init__(
        self,
        recorder: Recorder,
        *,
        rcpt_replies: dict[str, str] | None = None,
        mail_reply: str | None = None,
        data_reply: str | None = None,
        data_check: Callable[[bytes], list[str]] | None = None,
        rcpt_limit: int | None = None,
    ) -> None:
        self.recorder = recorder
        self.rcpt_limit = rcpt_limit
        self.rcpt_replies = dict(rcpt_replies or {})
        self.mail_reply = mail_reply
        self.data_reply = data_reply
        self.data_check = data_check

    async def handle_MAIL(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, mail_options: list[str]
    ) -> str:
        if self.mail_reply is not None:
            return self.mail_reply
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        return "250 2.1.0 OK"

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, rcpt_options: list[str]
    ) -> str:
        if self.rcpt_limit is not None and len(envelope.rcpt_tos) >= self.rcpt_limit:
            return "452 4.5.3 Error: too many recipients"
        reply = self.rcpt_replies.get(address, "250 2.1.5 OK")
        if reply.startswith("2"):
            envelope.rcpt_tos.append(address)
        return reply

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        content = envelope.original_content or b""
        if self.data_check is not None:
            problems = self.data_check(content)
            if problems:
                self.recorder.problems.extend(problems)
                return "554 5.6.0 " + problems[0].encode("ascii", "backslashreplace").decode()[:200]
        login: str | None = None
        if session.authenticated and isinstance(session.auth_data, LoginPassword):
            login = session.auth_data.login.decode()
        self.recorder.messages.append(
            ReceivedMessage(
                mail_from=envelope.mail_from or "",
                rcpt_tos=list(envelope.rcpt_tos),
                data=content,
                mail_options=list(envelope.mail_options),
                smtp_utf8=envelope.smtp_utf8,
                tls=server._tls_protocol is not None or server.transport.get_extra_info("sslcontext") is not None,
                login=login,
                helo=session.host_name,
            )
        )
        return self.data_reply or "250 2.0.0 OK queued"


class PipeliningHandler(RecordingHandler):
    """A RecordingHandler whose server offers PIPELINING (aiosmtpd answers pipelined commands in order)."""

    async def handle_EHLO(
        self, server: SMTP, session: Session, envelope: Envelope, hostname: str, responses: list[str]
    ) -> list[str]:
        session.host_name = hostname
        return [*responses[:-1], "250-PIPELINING", responses[-1]]


def _recording_smtp_class(recorder: Recorder) -> type[SMTP]:
    class RecordingSMTP(SMTP):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            if getattr(self, "transport", None) is None:  # not the STARTTLS upgrade of a connection
                recorder.connections += 1
            super().connection_made(transport)

        async def smtp_EHLO(self, arg: str) -> None:
            recorder.commands.append("EHLO")
            await super().smtp_EHLO(arg)

        async def smtp_HELO(self, arg: str) -> None:
            recorder.commands.append("HELO")
            await super().smtp_HELO(arg)

        async def smtp_STARTTLS(self, arg: str) -> None:
            recorder.commands.append("STARTTLS")
            await super().smtp_STARTTLS(arg)

        async def smtp_AUTH(self, arg: str) -> None:
            recorder.commands.append("AUTH")
            await super().smtp_AUTH(arg)

        async def smtp_MAIL(self, arg: str | None) -> None:
            recorder.commands.append("MAIL")
            await super().smtp_MAIL(arg)

        async def smtp_RCPT(self, arg: str | None) -> None:
            recorder.commands.append("RCPT")
            await super().smtp_RCPT(arg)

        async def smtp_DATA(self, arg: str) -> None:
            recorder.commands.append("DATA")
            await super().smtp_DATA(arg)

        async def smtp_RSET(self, arg: str) -> None:
            recorder.commands.append("RSET")
            await super().smtp_RSET(arg)

        async def smtp_QUIT(self, arg: str) -> None:
            recorder.commands.append("QUIT")
            await super().smtp_QUIT(arg)

    return RecordingSMTP


class _Controller(Controller):
    def __init__(self, handler: Any, *, smtp_class: type[SMTP], **kwargs: Any) -> None:
        self._smtp_class = smtp_class
        super().__init__(handler, **kwargs)

    def factory(self) -> SMTP:
        return self._smtp_class(self.handler, **self.SMTP_kwargs)


class SmtpServer:
    """An aiosmtpd server on `host`:`port` that records what it receives.

    starttls: offer STARTTLS with the test certificate; implicit_tls: TLS from
    the first byte; auth: (login, password) the server accepts (advertised
    only under TLS unless `auth_require_tls=False`); auth_required: refuse
    MAIL before AUTH; size_limit: the SIZE advertised and enforced (None:
    aiosmtpd's default 32 MiB, 0: no SIZE); smtputf8: offer SMTPUTF8;
    pipelining: offer PIPELINING; data_check: see `RecordingHandler`; rcpt_limit: recipients a
    transaction takes (then 452 4.5.3).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        starttls: bool = False,
        implicit_tls: bool = False,
        auth: tuple[str, str] | None = None,
        auth_require_tls: bool = True,
        auth_required: bool = False,
        size_limit: int | None = None,
        smtputf8: bool = True,
        rcpt_replies: dict[str, str] | None = None,
        mail_reply: str | None = None,
        data_reply: str | None = None,
        hostname: str = "mx.test.example",
        ca: CertificateAuthority | None = None,
        pipelining: bool = False,
        data_check: Callable[[bytes], list[str]] | None = None,
        rcpt_limit: int | None = None,
    ) -> None:
        self.host = host
        self.port = port or free_port((host,))
        self.recorder = Recorder()
        handler_class = PipeliningHandler if pipelining else RecordingHandler
        self.handler = handler_class(
            self.recorder,
            rcpt_replies=rcpt_replies,
            mail_reply=mail_reply,
            data_reply=data_reply,
            data_check=data_check,
            rcpt_limit=rcpt_limit,
        )
        self.auth = auth
        ca = ca or certificate_authority()
        kwargs: dict[str, Any] = {
            "hostname": host,
            "port": self.port,
            "server_hostname": hostname,
            "enable_SMTPUTF8": smtputf8,
            # aiosmtpd only counts STARTTLS as TLS: under implicit TLS the channel is encrypted already
            "auth_require_tls": auth_require_tls and not implicit_tls,
            "auth_required": auth_required,
            "authenticator": self._authenticate,
        }
        if size_limit is not None:
            kwargs["data_size_limit"] = size_limit
        if starttls:
            kwargs["tls_context"] = ca.server_context()
        if implicit_tls:
            kwargs["ssl_context"] = ca.server_context()
        self.controller = _Controller(self.handler, smtp_class=_recording_smtp_class(self.recorder), **kwargs)

    def _authenticate(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, auth_data: Any
    ) -> AuthResult:
        if self.auth is None or not isinstance(auth_data, LoginPassword):
            return AuthResult(success=False, handled=False)
        login, password = self.auth
        ok = auth_data.login == login.encode() and auth_data.password == password.encode()
        return AuthResult(success=ok, handled=False, auth_data=auth_data if ok else None)

    @property
    def messages(self) -> list[ReceivedMessage]:
        return self.recorder.messages

    @property
    def commands(self) -> list[str]:
        return self.recorder.commands

    @property
    def connections(self) -> int:
        return self.recorder.connections

    def start(self) -> SmtpServer:
        self.controller.start()
        self.recorder.reset()  # forget the controller's own start-up probe
        return self

    def stop(self) -> None:
        self.controller.stop(no_assert=True)

    def __enter__(self) -> SmtpServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


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


class LoopThreadServer:
    """An asyncio server on an event loop in a thread of its own: `start`, `stop`, and a context manager.

    A subclass sets `host`, `port`, `_loop`, `_server` and `_thread` (None) in its `__init__`,
    opens its listener in `_listen` and closes it (and its connections) in `_shutdown`.
    """

    host: str
    port: int
    thread_name = "smtp-server"
    _loop: asyncio.AbstractEventLoop | None
    _server: asyncio.AbstractServer | None
    _thread: threading.Thread | None

    async def _listen(self) -> asyncio.AbstractServer:
        raise NotImplementedError

    async def _shutdown(self) -> None:
        raise NotImplementedError

    def start(self) -> Self:
        ready = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                self._server = loop.run_until_complete(self._listen())
            except BaseException as exc:  # noqa: BLE001 - handed to the starting thread
                errors.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._shutdown())
            loop.close()

        self._thread = threading.Thread(target=run, name=f"{self.thread_name}-{self.port}", daemon=True)
        self._thread.start()
        ready.wait(10)
        if errors:
            raise errors[0]
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


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


# --- a pool of servers, as a fixture --------------------------------------------------------


class ServerPool:
    """Servers on loopback addresses sharing one `port` (the tests' `MX_PORT`); stops them all at the end."""

    def __init__(self) -> None:
        self.port = free_port()
        self._servers: list[SmtpServer | ScriptedSmtpServer] = []

    def smtp(self, host: str = "127.0.0.2", port: int | None = None, **kwargs: Any) -> SmtpServer:
        """Start an `SmtpServer` (aiosmtpd) on `host`, on the pool's port unless `port` is given."""
        server = SmtpServer(host, self.port if port is None else port, **kwargs).start()
        self._servers.append(server)
        return server

    def scripted(self, host: str = "127.0.0.2", port: int | None = None, **kwargs: Any) -> ScriptedSmtpServer:
        """Start a `ScriptedSmtpServer` on `host`, on the pool's port unless `port` is given."""
        server = ScriptedSmtpServer(host, self.port if port is None else port, **kwargs).start()
        self._servers.append(server)
        return server

    def stop(self) -> None:
        for server in reversed(self._servers):
            server.stop()
        self._servers.clear()


@pytest.fixture
def smtp_servers() -> Iterator[ServerPool]:
    """A `ServerPool`: `smtp_servers.smtp(host, **options)`, `smtp_servers.scripted(host, **script)`, `.port`."""
    pool = ServerPool()
    try:
        yield pool
    finally:
        pool.stop()


__all__ = [
    "BROKEN_TLS",
    "CLOSE",
    "DEFAULT_EHLO",
    "DEFAULT_REPLIES",
    "LOOPBACK_HOSTS",
    "SILENT",
    "DropDuringData",
    "ReceivedMessage",
    "Recorder",
    "RecordingHandler",
    "ScriptedSmtpServer",
    "ServerPool",
    "SmtpServer",
    "Trickle",
    "auth_echo",
    "free_port",
    "smtp_servers",
]
