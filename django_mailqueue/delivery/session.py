"""`Session`: one SMTP conversation with one server address — opening, commands, replies, ending.

Opening: connect, greeting, EHLO (HELO fallback), STARTTLS per the
target's policy, AUTH for a relay (`start`). Then commands, one at a time
or as a PIPELINING group, each under its own timeout (`TIMEOUTS`), every
reply kept; failures become the queue's own replies; the session ends with
QUIT, or is handed to the connection cache (`release`). The transactions
it carries are in `transaction`; the cache that keeps it, in `smtp`.
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

logger = logging.getLogger("django_mailqueue.delivery")

#: The longest wait for the reply to QUIT: the mail is decided by then.
QUIT_TIMEOUT = 2.0


@dataclass
class Idle:
    """A connection kept between sessions, as the connection cache holds it."""

    smtp: aiosmtplib.SMTP
    tls_active: bool
    opened: float
    idle_since: float
    #: messages the connection has carried
    messages: int = 0
    #: the shaping key of the destination it was last used for (its CONNECTIONS count it while idle)
    destination: str = ""


_Opportunistic = Literal["tls", "plain", "retry", "next"]


class Session:
    """One conversation with `target` for `envelope`, on a new connection or a `cached` one; what it
    decides goes into `report` as it goes."""

    def __init__(
        self,
        target: Target,
        envelope: Envelope,
        report: SessionReport,
        cached: Idle | None = None,
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
        #: messages the connection carried before this session's (MESSAGES_PER_CONNECTION)
        self.carried = cached.messages if cached else 0
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

    def relay_error(self, message: str) -> None:
        """An `operator_error` for a relay; under "verify" (MTA-STS) the `Deliverer` reports it, naming the policy."""
        if self.target.tls != "verify":
            self.operator_error(message)

    def skip_host(self, reply: Reply, *, unreachable: bool = False) -> bool:
        """Give up on this address before any transaction: the caller tries the next one. `unreachable`: the
        server could not be reached (refused, connect timeout, no greeting)."""
        self.report.next_host = reply
        self.report.unreachable = unreachable
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

    # --- opening and ending ---------------------------------------------------------

    async def release(self) -> Idle | None:
        """Keep the connection for the next message. Every transaction ended with its reply
        to the final "." or with a RSET, so no transaction is open (RFC 5321 §4.1.1.4):
        nothing needs saying now, and a connection the server closed meanwhile is found at
        the next MAIL FROM and replaced."""
        assert self.smtp is not None
        smtp, self.smtp = self.smtp, None
        loop_time = asyncio.get_running_loop().time()
        idle = self.cached
        if idle is not None and idle.smtp is smtp:  # the same connection kept again: its entry, not a new one
            idle.idle_since = loop_time
            idle.messages = self.carried + 1
            idle.destination = self.target.destination
            return idle
        return Idle(
            smtp=smtp,
            tls_active=self.tls_active,
            opened=self.opened,
            idle_since=loop_time,
            messages=self.carried + 1,
            destination=self.target.destination,
        )

    async def quit(self) -> None:
        if self.smtp is None or not self.smtp.is_connected:
            return
        self.doing = "sending QUIT"
        smtp, self.smtp = self.smtp, None
        await quit_and_close(smtp, min(self.target.timeouts.greeting, QUIT_TIMEOUT))

    async def start(self) -> bool:
        """Open a new connection: connect, greeting, EHLO, STARTTLS, AUTH. False when the session went no
        further (then `report.next_host` says why)."""
        policy = self.target.tls
        if not await self.open(implicit=policy == "implicit") or not await self.hello():
            return False
        if policy == "opportunistic" and self.offers("starttls"):
            outcome = await self.starttls_opportunistic()
            if outcome == "next":
                return False
            if outcome == "retry":
                self.close()
                if not await self.open(implicit=False) or not await self.hello():
                    return False
        elif policy in ("starttls", "verify") and not await self.starttls_required():
            return False
        return self.target.username is None or await self.authenticate()

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
            return self.skip_host(
                self.own(replies.NO_ANSWER, f"connect to {target.label}: timed out"), unreachable=True
            )
        except OSError as exc:
            sock.close()
            reply = self.own(replies.NO_ANSWER, f"connect to {target.label}: {exc.strerror or exc}")
            return self.skip_host(reply, unreachable=True)
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
                self.own(replies.NO_ANSWER, f"no greeting from {target.label} within {target.timeouts.greeting:g} s"),
                unreachable=True,
            )
        except SMTPConnectError as exc:
            if isinstance(exc.__cause__, ssl.SSLError):  # aiosmtplib wraps a failed implicit TLS handshake
                return self.implicit_tls_failed(exc.__cause__)
            # closed before a greeting: no greeting, unless it was the TLS handshake's end (a TLS failure, say
            # a client certificate refused under TLS 1.3): the server is there
            return self.skip_host(
                self.own(replies.CONNECTION_DROPPED, f"lost connection with {target.label} while {self.doing}"),
                unreachable=not implicit,
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
        """STARTTLS on a relay, or an MX host under MTA-STS ("verify"): required, verified; no TLS, no session."""
        label = self.target.label
        if not self.offers("starttls"):
            reply = self.own(replies.TLS_NOT_OFFERED, f"TLS is required, but was not offered by {label}")
            self.relay_error(
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
            self.relay_error(f"relay {label}: STARTTLS failed: {reply.text}")
            return self.skip_host(reply)
        except Exception as exc:  # the handshake, the certificate, or the first exchange under TLS
            reply = self.own(replies.TLS_FAILED, f"TLS handshake with {label} failed: {self.failure(exc).text}")
            self.relay_error(f"relay {label}: TLS handshake failed: {reply.text}")
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

    # --- commands -------------------------------------------------------------------

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


async def quit_and_close(smtp: aiosmtplib.SMTP, timeout: float) -> None:
    """Say QUIT, wait at most `timeout` for the reply, and close the connection whatever happens."""
    try:
        await smtp.quit(timeout=timeout)
    except Exception:  # the mail is decided; a QUIT that fails changes nothing
        logger.debug("QUIT to %s failed", smtp.hostname)
    finally:
        smtp.close()


__all__ = ["QUIT_TIMEOUT", "Idle", "Session", "quit_and_close"]
