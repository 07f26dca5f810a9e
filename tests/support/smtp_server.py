"""SMTP servers on loopback for tests: a recording aiosmtpd server, and a scripted raw one for misbehaviour.

- `SmtpServer`: aiosmtpd, configurable (STARTTLS, implicit TLS, AUTH with
  checked credentials, SIZE, SMTPUTF8, per-recipient / MAIL / DATA replies),
  recording every message (`messages`) and every command verb (`commands`).
- `ScriptedSmtpServer` (scripted_smtp.py, importable from here): a raw
  asyncio server that answers each command from
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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from .certs import CertificateAuthority, certificate_authority
from .loopback import LOOPBACK_HOSTS, LoopThreadServer, free_port
from .scripted_smtp import (
    BROKEN_TLS,
    CLOSE,
    DEFAULT_EHLO,
    DEFAULT_REPLIES,
    PIPELINING_EHLO,
    SILENT,
    Action,
    DropDuringData,
    ScriptedSmtpServer,
    Trickle,
    auth_echo,
)

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
            # aiosmtpd's 5 s to start and answer its own probe: too little on a loaded machine (load 20)
            "ready_timeout": 60,
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
    "PIPELINING_EHLO",
    "SILENT",
    "Action",
    "DropDuringData",
    "LoopThreadServer",
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
