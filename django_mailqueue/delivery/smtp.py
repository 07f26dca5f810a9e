"""`SmtpTransport`: the SMTP session to one server address, on aiosmtplib, with every reply kept.

One session: connect, greeting, EHLO (HELO fallback), STARTTLS per the
target's policy, AUTH for a relay, then one transaction per chunk of at
most RCPT_LIMIT recipients (MAIL, RCPT, DATA — pipelined when offered),
QUIT; each step under its own timeout (`TIMEOUTS`), the whole session
under the attempt's deadline. The message is written through
`aiosmtplib_adapter`, not aiosmtplib's `data()` (why: docs/delivery.md,
"Bytes on the wire").
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import traceback
from collections import deque
from dataclasses import dataclass
from typing import Literal

import aiosmtplib
from aiosmtplib import (
    SMTPAuthenticationError,
    SMTPConnectError,
    SMTPConnectResponseError,
    SMTPException,
    SMTPHeloError,
    SMTPResponseException,
    SMTPServerDisconnected,
)
from aiosmtplib.response import SMTPResponse

from ..core.errors import Code
from ..core.items import RecipientState, Reply
from . import aiosmtplib_adapter, replies
from .aiosmtplib_adapter import Access
from .transport import DestinationError, Envelope, SessionReport, Target
from .wire import END_OF_DATA

logger = logging.getLogger("django_mailqueue.delivery")

#: Bytes written before waiting for the socket to drain (each wait bounded by DATA_BLOCK).
DATA_BLOCK_SIZE = 64 * 1024
#: The longest wait for the reply to QUIT: the mail is decided by then.
QUIT_TIMEOUT = 2.0


#: Seconds an idle connection is kept for the next message to the same server (Postfix's
#: smtp_connection_cache_time_limit).
CACHE_TIME = 2.0
#: Seconds a connection may be reused for in all (Postfix's smtp_connection_reuse_time_limit).
REUSE_TIME = 300.0
#: The most sessions at once to one server address (Postfix's default_destination_concurrency_limit).
DESTINATION_CONCURRENCY = 20

_CacheKey = tuple[str, int, str, str | None, str, int]


@dataclass
class _Idle:
    smtp: aiosmtplib.SMTP
    tls_active: bool
    opened: float
    idle_since: float


class SmtpTransport:
    """The default `Transport`: aiosmtplib sessions, with a connection cache.

    With `cache_time` above 0 (the worker uses `CACHE_TIME`), a connection
    whose transaction ended well is kept up to `cache_time`
    seconds for the next message to the same server address with
    the same TLS policy and credentials, as Postfix's connection cache does;
    at most `destination_concurrency` sessions run at once to one address. A
    cached connection that turns out to be closed is dropped and the message
    goes through a new one.
    """

    def __init__(
        self,
        *,
        cache_time: float = 0.0,
        reuse_time: float = REUSE_TIME,
        destination_concurrency: int = DESTINATION_CONCURRENCY,
    ) -> None:
        self.cache_time = cache_time
        self.reuse_time = reuse_time
        self.destination_concurrency = destination_concurrency
        self._idle: dict[_CacheKey, list[_Idle]] = {}
        #: one timer a server address closes its pool's connections idle past `cache_time` with
        self._expiry: dict[_CacheKey, asyncio.TimerHandle] = {}
        self._limits: dict[tuple[str, int], asyncio.Semaphore] = {}
        #: QUITs to connections leaving the cache, said in the background (`aclose` waits for them)
        self._quitting: set[asyncio.Task[None]] = set()
        #: how sessions use aiosmtplib (`aiosmtplib_adapter`: its private parts, or its public API only)
        self.access: Access = aiosmtplib_adapter.ACCESS
        self.access.announce()

    @staticmethod
    def _key(target: Target) -> _CacheKey:
        return (target.address, target.port, target.tls, target.username, target.helo_name, id(target.tls_context))

    def _take(self, key: _CacheKey) -> _Idle | None:
        now = asyncio.get_running_loop().time()
        pool = self._idle.get(key)
        while pool:
            idle = pool.pop()
            if (
                now - idle.idle_since <= self.cache_time
                and now - idle.opened <= self.reuse_time
                and idle.smtp.is_connected
            ):
                return idle
            self._retire(idle)
        return None

    def _keep(self, key: _CacheKey, idle: _Idle) -> None:
        pool = self._idle.setdefault(key, [])
        pool.append(idle)  # the pool stays oldest first: `_take` takes the newest
        if key not in self._expiry:
            self._expiry[key] = asyncio.get_running_loop().call_at(
                idle.idle_since + self.cache_time + 0.05, self._expire, key
            )

    def _expire(self, key: _CacheKey) -> None:
        """Close the pool's connections idle past `cache_time`; come back for the oldest left."""
        self._expiry.pop(key, None)
        loop = asyncio.get_running_loop()
        now = loop.time()
        pool = self._idle.get(key, [])
        for idle in [i for i in pool if now - i.idle_since > self.cache_time]:
            pool.remove(idle)
            self._retire(idle)
        if pool:
            self._expiry[key] = loop.call_at(pool[0].idle_since + self.cache_time + 0.05, self._expire, key)

    def _retire(self, idle: _Idle) -> None:
        """A connection leaves the cache: QUIT (RFC 5321 §4.1.1.10) in the background, then close."""
        if not idle.smtp.is_connected:
            idle.smtp.close()
            return
        task = asyncio.get_running_loop().create_task(_quit(idle.smtp, QUIT_TIMEOUT))
        self._quitting.add(task)
        task.add_done_callback(self._quitting.discard)

    async def send(self, target: Target, envelope: Envelope) -> SessionReport:
        limit = self._limits.setdefault((target.address, target.port), asyncio.Semaphore(self.destination_concurrency))
        async with limit:
            key = self._key(target)
            cached = self._take(key)
            if cached is not None:
                report = await self._send(target, envelope, cached, key)
                if not report.stale_connection:
                    return report
                logger.debug("cached connection to %s was closed; opening a new one", target.label)
            return await self._send(target, envelope, None, key)

    async def _send(self, target: Target, envelope: Envelope, cached: _Idle | None, key: _CacheKey) -> SessionReport:
        report = SessionReport(host=target.host)
        session = _Session(target, envelope, report, cached, keep=self.cache_time > 0, access=self.access)
        keep: _Idle | None = None
        try:
            async with asyncio.timeout_at(target.deadline) as scope:
                keep = await session.run()
        except TimeoutError:
            if not scope.expired():  # pragma: no cover - every step catches its own timeouts
                session.internal_error(RuntimeError("a timeout escaped the session"))
            else:
                session.deadline_passed()
        except Exception as exc:
            session.internal_error(exc)
        finally:
            if keep is None:
                session.close()
        if keep is not None:
            self._keep(key, keep)
        return report

    async def aclose(self) -> None:
        """Say QUIT on every cached connection, all at once, and close them: done within `QUIT_TIMEOUT`."""
        pools, self._idle = self._idle, {}
        for timer in self._expiry.values():
            timer.cancel()
        self._expiry.clear()
        for pool in pools.values():
            for idle in pool:
                self._retire(idle)
        if self._quitting:
            await asyncio.gather(*self._quitting, return_exceptions=True)


_Opportunistic = Literal["tls", "plain", "retry", "next"]


class _Session:
    def __init__(
        self,
        target: Target,
        envelope: Envelope,
        report: SessionReport,
        cached: _Idle | None = None,
        *,
        keep: bool = False,
        access: Access = aiosmtplib_adapter.ACCESS,
    ) -> None:
        self.target = target
        self.access = access
        #: keep the connection for the next message when the session ends well
        self.keep = keep
        self.envelope = envelope
        self.report = report
        self.mask = target.mask
        self.cached = cached
        self.smtp: aiosmtplib.SMTP | None = cached.smtp if cached else None
        self.tls_active = cached.tls_active if cached else False
        self.opened = cached.opened if cached else asyncio.get_running_loop().time()
        #: a MAIL FROM was answered in this session (a cached connection is alive)
        self.answered = False
        #: the last transaction had no recipient accepted: the server counts errors, do not keep it
        self.refused = False
        self.doing = "connecting"
        #: the pipelined commands whose replies are still to be read: (timeout, what each does)
        self.unanswered: deque[tuple[float, str]] = deque()

    # --- replies and failures -------------------------------------------------------

    def reply(self, code: int, text: str) -> Reply:
        """A server's reply, or MALFORMED (temporary) when it is not a well-formed reply."""
        if not replies.is_well_formed(code, text):
            return self.own(replies.MALFORMED, f"malformed reply from {self.target.label} while {self.doing}: {text}")
        return replies.server_reply(code, text, mask=self.mask)

    def own(self, status: str, text: str) -> Reply:
        return replies.own_reply(status, text, mask=self.mask)

    def failure(self, exc: BaseException) -> Reply:
        """The temporary reply for an exception raised while `self.doing`."""
        label = self.target.label
        if isinstance(exc, ssl.SSLError):
            reason = exc.reason or str(exc)
            return self.own(replies.TLS_FAILED, f"TLS with {label} failed while {self.doing}: {reason}")
        if isinstance(exc, SMTPResponseException):
            if exc.code > 0:  # a real reply where another was needed: it only ends this session
                return replies.temporary(self.reply(exc.code, exc.message))
            return self.own(replies.MALFORMED, f"malformed reply from {label} while {self.doing}: {exc.message}")
        if isinstance(exc, TimeoutError):
            return self.own(replies.NO_ANSWER, f"conversation with {label} timed out while {self.doing}")
        if isinstance(exc, SMTPServerDisconnected | ConnectionError | OSError):
            return self.own(replies.CONNECTION_DROPPED, f"lost connection with {label} while {self.doing}")
        if isinstance(exc, SMTPException):
            return self.own(replies.CONNECTION_DROPPED, f"SMTP error with {label} while {self.doing}: {exc.message}")
        return self.own(replies.INTERNAL, f"internal error while {self.doing} with {label}: {type(exc).__name__}")

    def operator_error(self, message: str) -> None:
        """A relay problem for the operator: the worker sends it as an `error` and logs a WARNING (once a minute)."""
        error = DestinationError(Code.INVALID_OPTION, self.mask(message), destination=self.target.host)
        if all(str(e) != str(error) for e in self.report.errors):
            self.report.errors.append(error)
        logger.info("%s", error.message)

    def skip_host(self, reply: Reply) -> bool:
        """Give up on this address before any transaction: the caller tries the next one."""
        self.report.next_host = reply
        logger.info("skipping %s: %s", self.target.label, reply)
        return False

    def end(self, reply: Reply, *, broken: bool = True) -> None:
        """The session is over: every recipient not decided yet is pending with `reply`. A broken connection
        (a timeout, a drop, a malformed reply: nothing said now would be understood) is closed at once; after
        a 421 (`broken=False`) `run` says QUIT before it closes."""
        self.report.decide_rest(self.envelope.recipients, reply, RecipientState.PENDING)
        self.report.ended = True
        self.unanswered.clear()
        if broken:
            self.close()
        logger.info("session with %s ended: %s", self.target.label, reply)

    def deadline_passed(self) -> None:
        label = self.target.label
        seconds = self.target.timeouts.session
        if self.report.awaiting_reply:
            self.report.possibly_delivered.update(self.report.awaiting_reply)
            reply = self.own(
                replies.NO_ANSWER,
                f"attempt deadline of {seconds:g} s passed waiting for {label} "
                "to answer the end of data: the message may have been delivered",
            )
        else:
            reply = self.own(
                replies.NO_ANSWER, f"attempt deadline of {seconds:g} s passed while {self.doing} with {label}"
            )
        self.report.next_host = None
        self.end(reply)

    def internal_error(self, exc: BaseException) -> None:
        text = self.mask("".join(traceback.format_exception(exc)))
        logger.error("delivery bug in the session with %s:\n%s", self.target.label, text)
        self.report.next_host = None
        self.end(self.own(replies.INTERNAL, f"internal error while {self.doing} with {self.target.label}"))

    def close(self) -> None:
        if self.smtp is not None:
            self.smtp.close()
            self.smtp = None

    # --- the session ----------------------------------------------------------------

    async def run(self) -> _Idle | None:
        """The session; a connection worth keeping for the next message, or None."""
        if self.cached is not None:
            await self.transactions()
            if self.report.ended and not self.answered:
                self.report.stale_connection = True  # closed while idle: nothing was said, try a new one
                await self.quit()  # still open after a 421 to MAIL FROM
                return None
        else:
            await self.steps()
        if (
            self.smtp is None
            or not self.smtp.is_connected
            or self.report.ended
            or self.report.next_host
            or self.refused
            or not self.keep
        ):
            await self.quit()
            return None
        return await self.release()

    async def release(self) -> _Idle | None:
        """Keep the connection for the next message. Every transaction ended with its reply
        to the final "." or with a RSET, so no transaction is open (RFC 5321 §4.1.1.4):
        nothing needs saying now, and a connection the server closed meanwhile is found at
        the next MAIL FROM and replaced."""
        assert self.smtp is not None
        smtp, self.smtp = self.smtp, None
        loop_time = asyncio.get_running_loop().time()
        return _Idle(smtp=smtp, tls_active=self.tls_active, opened=self.opened, idle_since=loop_time)

    async def steps(self) -> None:
        policy = self.target.tls
        if not await self.open(implicit=policy == "implicit") or not await self.hello():
            return
        if policy == "opportunistic" and self.offers("starttls"):
            outcome = await self.starttls_opportunistic()
            if outcome == "next":
                return
            if outcome == "retry":
                self.close()
                if not await self.open(implicit=False) or not await self.hello():
                    return
        elif policy == "starttls" and not await self.starttls_required():
            return
        if self.target.username is not None and not await self.authenticate():
            return
        await self.transactions()

    def offers(self, extension: str) -> bool:
        return self.smtp is not None and self.smtp.supports_extension(extension)

    async def open(self, *, implicit: bool) -> bool:
        target = self.target
        self.doing = "connecting"
        family = socket.AF_INET6 if ":" in target.address else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            async with asyncio.timeout(target.timeouts.connect):
                await asyncio.get_running_loop().sock_connect(sock, (target.address, target.port))
        except TimeoutError:
            sock.close()
            return self.skip_host(self.own(replies.NO_ANSWER, f"connect to {target.label}: timed out"))
        except OSError as exc:
            sock.close()
            return self.skip_host(self.own(replies.NO_ANSWER, f"connect to {target.label}: {exc.strerror or exc}"))
        self.smtp = aiosmtplib.SMTP(
            hostname=target.host,
            sock=sock,
            local_hostname=target.helo_name,
            timeout=target.timeouts.greeting,
            use_tls=implicit,
            start_tls=False,
            tls_context=target.tls_context if implicit else None,
        )
        self.doing = "receiving the TLS handshake and greeting" if implicit else "receiving the greeting"
        try:
            await self.smtp.connect()
        except SMTPConnectResponseError as exc:
            return self.skip_host(replies.temporary(self.reply(exc.code, exc.message)))
        except ssl.SSLError as exc:
            return self.implicit_tls_failed(exc)
        except TimeoutError:
            return self.skip_host(
                self.own(replies.NO_ANSWER, f"no greeting from {target.label} within {target.timeouts.greeting:g} s")
            )
        except SMTPConnectError as exc:
            if isinstance(exc.__cause__, ssl.SSLError):  # aiosmtplib wraps a failed implicit TLS handshake
                return self.implicit_tls_failed(exc.__cause__)
            return self.skip_host(
                self.own(replies.CONNECTION_DROPPED, f"lost connection with {target.label} while {self.doing}")
            )
        except Exception as exc:
            return self.skip_host(self.failure(exc))
        self.tls_active = implicit
        logger.debug("connected to %s%s", target.label, " over TLS" if implicit else "")
        return True

    def implicit_tls_failed(self, exc: ssl.SSLError) -> bool:
        reply = self.own(replies.TLS_FAILED, f"TLS handshake with {self.target.label} failed: {exc.reason or exc}")
        self.operator_error(f"relay {self.target.label}: TLS handshake failed: {reply.text}")
        return self.skip_host(reply)

    async def hello(self) -> bool:
        assert self.smtp is not None
        helo_name, timeout = self.target.helo_name, self.target.timeouts.greeting
        self.doing = "sending EHLO"
        try:
            await self.smtp.ehlo(hostname=helo_name, timeout=timeout)
            return True
        except SMTPHeloError as exc:
            if exc.code == 421 or not self.smtp.is_connected:
                return self.skip_host(replies.temporary(self.reply(exc.code, exc.message)))
        except Exception as exc:
            return self.skip_host(self.failure(exc))
        self.doing = "sending HELO"
        try:
            await self.smtp.helo(hostname=helo_name, timeout=timeout)
            return True
        except SMTPHeloError as exc:
            return self.skip_host(replies.temporary(self.reply(exc.code, exc.message)))
        except Exception as exc:
            return self.skip_host(self.failure(exc))

    async def _starttls(self) -> None:
        assert self.smtp is not None
        self.doing = "starting TLS"
        await self.smtp.starttls(
            server_hostname=self.target.host, tls_context=self.target.tls_context, timeout=self.target.timeouts.greeting
        )
        # RFC 3207 §4.2: forget what was learned before TLS (aiosmtplib did), ask again
        self.doing = "sending EHLO after STARTTLS"
        await self.smtp.ehlo(hostname=self.target.helo_name, timeout=self.target.timeouts.greeting)
        self.tls_active = True

    async def starttls_opportunistic(self) -> _Opportunistic:
        """STARTTLS on an MX host: encrypted if it works, plain text if it does not (Postfix's `may`)."""
        try:
            await self._starttls()
        except SMTPResponseException as exc:
            if exc.code == 421:
                self.skip_host(self.reply(exc.code, exc.message))
                return "next"
            if (
                exc.code > 0
                and self.smtp is not None
                and self.smtp.is_connected
                and not self.tls_active
                and self.doing == "starting TLS"
            ):
                logger.info(
                    "%s refused STARTTLS (%s %s); going on in plain text",
                    self.target.label,
                    exc.code,
                    self.mask(exc.message),
                )
                return "plain"
            logger.info("TLS with %s failed (%s); retrying in plain text", self.target.label, self.failure(exc).text)
            return "retry"
        except Exception as exc:
            logger.info("TLS with %s failed (%s); retrying in plain text", self.target.label, self.failure(exc).text)
            return "retry"
        logger.debug("TLS with %s established", self.target.label)
        return "tls"

    async def starttls_required(self) -> bool:
        """STARTTLS on a relay: required, the certificate verified; no TLS, no session."""
        label = self.target.label
        if not self.offers("starttls"):
            reply = self.own(replies.TLS_NOT_OFFERED, f"TLS is required, but was not offered by {label}")
            self.operator_error(
                f"relay {label} does not offer STARTTLS, which the route requires "
                '(TLS "starttls"); nothing was sent, no credentials either'
            )
            return self.skip_host(reply)
        try:
            await self._starttls()
        except SMTPResponseException as exc:
            if exc.code > 0 and self.doing == "starting TLS":
                text = self.reply(exc.code, exc.message)
                reply = self.own(replies.TLS_FAILED, f"TLS is required, but {label} refused to start TLS: {text}")
            else:
                reply = self.failure(exc)
            self.operator_error(f"relay {label}: STARTTLS failed: {reply.text}")
            return self.skip_host(reply)
        except Exception as exc:  # the handshake, the certificate, or the first exchange under TLS
            reply = self.own(replies.TLS_FAILED, f"TLS handshake with {label} failed: {self.failure(exc).text}")
            self.operator_error(f"relay {label}: TLS handshake failed: {reply.text}")
            return self.skip_host(reply)
        return True

    async def authenticate(self) -> bool:
        assert self.smtp is not None and self.target.username is not None
        label = self.target.label
        self.doing = "authenticating"
        if not self.tls_active and self.target.tls != "none":  # never a password in plain text unless asked
            self.operator_error(f"relay {label}: credentials withheld, the connection is not encrypted")
            return self.skip_host(self.own(replies.AUTH_FAILED, f"credentials withheld from {label}: no TLS"))
        if not self.offers("auth"):
            self.operator_error(f"relay {label} offers no AUTH mechanism, and the route has USERNAME")
            return self.skip_host(self.own(replies.AUTH_FAILED, f"{label} offered no authentication mechanism"))
        try:
            await self.smtp.login(
                self.target.username, self.target.password or "", timeout=self.target.timeouts.greeting
            )
        except SMTPAuthenticationError as exc:
            reply = replies.temporary(self.reply(exc.code, exc.message))
            self.operator_error(f"relay {label} refused the credentials of {self.target.username!r}: {reply}")
            return self.skip_host(reply)
        except SMTPResponseException as exc:
            return self.skip_host(self.failure(exc))
        except SMTPException as exc:
            if self.smtp.is_connected:
                reply = self.own(replies.AUTH_FAILED, f"authentication with {label} failed: {exc.message}")
                self.operator_error(f"relay {label}: {reply.text}")
                return self.skip_host(reply)
            return self.skip_host(self.failure(exc))
        except Exception as exc:
            return self.skip_host(self.failure(exc))
        logger.debug("authenticated to %s", label)
        return True

    async def command(self, *args: bytes, timeout: float, doing: str) -> SMTPResponse | None:
        """Send one command; None when the session ended (exception, malformed reply, 421).
        While a pipelined group is being answered, its next reply instead (the command went with the group)."""
        assert self.smtp is not None
        if self.unanswered:
            return await self.next_reply()
        self.doing = doing
        try:
            # the protocol's, not SMTP.execute_command: that one closes after a 421 without saying QUIT
            protocol = self.smtp.protocol
            if protocol is None:
                raise SMTPServerDisconnected("Connection lost")
            response = await protocol.execute_command(*args, timeout=timeout)
        except Exception as exc:
            self.end(self.failure(exc))
            return None
        return self.checked(response)

    def checked(self, response: SMTPResponse) -> SMTPResponse | None:
        """`response`, or None after ending the session on a malformed reply or a 421."""
        if not replies.is_well_formed(response.code, response.message):
            self.end(self.reply(response.code, response.message))
            return None
        if response.code == 421:
            self.end(self.reply(response.code, response.message), broken=False)
            return None
        return response

    # --- PIPELINING (RFC 2920) --------------------------------------------------------

    def send_group(self, commands: list[tuple[bytes, float, str]]) -> bool:
        """Write `commands` (each: line, reply timeout, what it does) in one write; `command()` then
        reads their replies in order. False when the session ended."""
        assert self.smtp is not None
        protocol = self.smtp.protocol
        self.doing = commands[0][2]
        try:
            if protocol is None:
                raise SMTPServerDisconnected("Connection lost")
            self.access.send_group(protocol, b"".join(line + b"\r\n" for line, _, _ in commands))
        except Exception as exc:
            self.end(self.failure(exc))
            return False
        self.unanswered.extend((timeout, doing) for _, timeout, doing in commands)
        return True

    async def next_reply(self) -> SMTPResponse | None:
        """The reply to the group's next command; None when the session ended."""
        assert self.smtp is not None
        timeout, self.doing = self.unanswered.popleft()
        protocol = self.smtp.protocol
        try:
            if protocol is None:
                raise SMTPServerDisconnected("Connection lost")
            response = self.access.buffered_reply(protocol)  # came with an earlier reply
            if response is None:
                response = await self.access.read_reply(protocol, timeout)
        except Exception as exc:
            self.end(self.failure(exc))
            return None
        finally:
            if protocol is not None:
                self.access.group_reply_read(protocol, more=bool(self.unanswered))
        return self.checked(response)

    async def end_group(self) -> None:
        """Read the replies the transaction no longer needs; when the server accepted DATA all the
        same, end the (empty) message with a lone "." (RFC 2920 section 3.1)."""
        while self.unanswered and not self.report.ended:
            data = len(self.unanswered) == 1
            response = await self.next_reply()
            if response is not None and data and response.code == 354:
                await self.command(b".", timeout=self.target.timeouts.data_end, doing="ending an empty message")

    async def rset(self) -> None:
        await self.end_group()
        if not self.report.ended:
            await self.command(b"RSET", timeout=self.target.timeouts.greeting, doing="sending RSET")

    async def transactions(self) -> None:
        assert self.smtp is not None
        envelope, label = self.envelope, self.target.label
        size_limit = _size_limit(self.smtp.esmtp_extensions.get("size", ""))
        if size_limit and envelope.size > size_limit:
            reply = self.own(
                replies.TOO_BIG, f"message size {envelope.size} exceeds size limit {size_limit} of {label}"
            )
            self.report.decide_rest(envelope.recipients, reply, RecipientState.FAILED)
            return
        limit = max(1, envelope.rcpt_limit)
        for start in range(0, len(envelope.recipients), limit):
            chunk = envelope.recipients[start : start + limit]
            while chunk and not self.report.ended:
                chunk = await self.transaction(chunk)  # those the server had no room for: again, at once

    async def transaction(self, chunk: tuple[str, ...]) -> tuple[str, ...]:
        """One transaction; the recipients to send again in the next one (RFC 5321 §4.5.3.1.10: a 452 after
        some were accepted), or ()."""
        envelope, timeouts, label = self.envelope, self.target.timeouts, self.target.label
        utf8 = envelope.utf8_headers or not envelope.sender.isascii() or not all(r.isascii() for r in chunk)
        if utf8 and not self.offers("smtputf8"):
            reply = self.own(replies.NEEDS_SMTPUTF8, f"SMTPUTF8 is required, but was not offered by {label}")
            self.report.decide_rest(chunk, reply, RecipientState.FAILED)
            return ()
        encoding = "utf-8" if utf8 else "ascii"
        mail = [b"MAIL", b"FROM:<" + envelope.sender.encode(encoding) + b">"]
        if self.offers("size"):
            mail.append(b"SIZE=%d" % envelope.size)
        if envelope.eightbit and self.offers("8bitmime"):
            mail.append(b"BODY=8BITMIME")
        if utf8:
            mail.append(b"SMTPUTF8")
        rcpts = [b"TO:<" + recipient.encode(encoding) + b">" for recipient in chunk]
        if (
            self.access.pipelining
            and self.offers("pipelining")
            and not self.send_group(
                [
                    (b" ".join(mail), timeouts.mail, "sending MAIL FROM"),
                    *((b"RCPT " + to, timeouts.rcpt, "sending RCPT TO") for to in rcpts),
                    (b"DATA", timeouts.data, "sending DATA"),
                ]
            )
        ):
            return ()
        response = await self.command(*mail, timeout=timeouts.mail, doing="sending MAIL FROM")
        if response is None:
            return ()
        self.answered = True
        if not 200 <= response.code < 300:
            reply = self.reply(response.code, response.message)
            self.report.decide_rest(chunk, reply, replies.state_of(reply))
            self.refused = True
            await self.rset()
            return ()
        accepted: list[str] = []
        again: list[str] = []
        for recipient, to in zip(chunk, rcpts, strict=True):
            response = await self.command(b"RCPT", to, timeout=timeouts.rcpt, doing="sending RCPT TO")
            if response is None:
                return ()
            if 200 <= response.code < 300:
                accepted.append(recipient)
            elif replies.too_many_recipients(response.code, len(accepted)):
                again.append(recipient)
            else:
                reply = self.reply(response.code, response.message)
                self.report.decide(recipient, reply, replies.state_of(reply))
        self.refused = not accepted
        if again:
            logger.debug(
                "%s took %d recipients of %d; the other %d go in the next transaction",
                label,
                len(accepted),
                len(chunk),
                len(again),
            )
        if not accepted:
            await self.rset()
            return ()
        response = await self.command(b"DATA", timeout=timeouts.data, doing="sending DATA")
        if response is None:
            return ()
        if response.code != 354:
            reply = self.reply(response.code, response.message)
            if reply.status.startswith("2"):
                reply = self.own(replies.MALFORMED, f"unexpected reply to DATA from {label}: {reply}")
            self.report.decide_rest(accepted, reply, replies.state_of(reply))
            await self.rset()
            return tuple(again)
        await self.send_message(accepted)
        return tuple(again)

    async def send_message(self, accepted: list[str]) -> None:
        assert self.smtp is not None
        timeouts, label, data = self.target.timeouts, self.target.label, self.envelope.data
        protocol = self.smtp.protocol
        if protocol is None:
            self.end(self.own(replies.CONNECTION_DROPPED, f"lost connection with {label} while sending the message"))
            return
        self.doing = "sending the message"
        # aiosmtplib keeps incoming bytes only while a reply is expected: expect one now,
        # so a reply that comes while the message is still being written is not lost.
        self.access.expect_reply(protocol)
        try:
            # The end-of-data mark goes in the same write as the last block: written apart, it
            # reaches some servers (Postfix's smtp-sink) as a second small segment that waits out
            # their delayed ACK — some 40 ms a message.
            view = memoryview(data)
            last = max(0, (len(data) - 1) // DATA_BLOCK_SIZE * DATA_BLOCK_SIZE)
            for start in range(0, last, DATA_BLOCK_SIZE):
                protocol.write(view[start : start + DATA_BLOCK_SIZE])  # type: ignore[arg-type]  # any buffer
                await self.access.drain(protocol, timeouts.data_block)
            protocol.write(bytes(view[last:]) + END_OF_DATA)
            await self.access.drain(protocol, timeouts.data_block)
        except TimeoutError:
            self.end(self.own(replies.NO_ANSWER, f"conversation with {label} timed out while sending the message"))
            return
        except Exception as exc:
            self.end(self.failure(exc))
            return
        self.report.awaiting_reply.update(accepted)
        self.doing = "waiting for the reply to the end of data"
        try:
            response = await self.access.read_reply(protocol, timeouts.data_end)
        except Exception as exc:
            self.report.possibly_delivered.update(accepted)
            self.report.awaiting_reply.clear()
            lost = self.failure(exc)
            self.end(self.own(lost.status, f"{lost.text}: the message may have been delivered"))
            return
        self.report.awaiting_reply.clear()
        if not replies.is_well_formed(response.code, response.message):
            self.report.possibly_delivered.update(accepted)
            self.end(self.reply(response.code, response.message))
            return
        reply = self.reply(response.code, response.message)
        self.report.decide_rest(accepted, reply, replies.state_of(reply))
        if response.code == 421:
            self.end(reply, broken=False)
        else:
            logger.debug("%s answered the end of data for %d recipients: %s", label, len(accepted), reply)

    async def quit(self) -> None:
        if self.smtp is None or not self.smtp.is_connected:
            return
        self.doing = "sending QUIT"
        smtp, self.smtp = self.smtp, None
        await _quit(smtp, min(self.target.timeouts.greeting, QUIT_TIMEOUT))


async def _quit(smtp: aiosmtplib.SMTP, timeout: float) -> None:
    """Say QUIT, wait at most `timeout` for the reply, and close the connection whatever happens."""
    try:
        await smtp.quit(timeout=timeout)
    except Exception:  # the mail is decided; a QUIT that fails changes nothing
        logger.debug("QUIT to %s failed", smtp.hostname)
    finally:
        smtp.close()


def _size_limit(value: str) -> int:
    try:
        return max(0, int(value.split()[0])) if value.strip() else 0
    except ValueError:
        return 0


__all__ = ["DATA_BLOCK_SIZE", "SmtpTransport"]
