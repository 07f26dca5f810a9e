"""The one place that touches aiosmtplib's private protocol internals: checked at import, with a public fallback.

`ACCESS` is `PrivateAccess` when `missing_parts()` finds every private part
it needs (PIPELINING, a timer per reply, draining each block), else
`PublicAccess` (no pipelining), announced once as a WARNING. Which parts and
why: docs/delivery.md, "aiosmtplib: private parts in one adapter".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import aiosmtplib.protocol
from aiosmtplib import SMTPReadTimeoutError, SMTPServerDisconnected
from aiosmtplib.protocol import SMTPProtocol
from aiosmtplib.response import SMTPResponse

logger = logging.getLogger("django_mailqueue.delivery")

#: What `PrivateAccess` uses on the protocol class, and on an instance (set by `__init__`).
CLASS_PARTS = ("_read_response_from_buffer", "_drain_helper", "data_received", "read_response", "write")
INSTANCE_PARTS = ("_buffer", "_response_waiter", "_response_pending", "_paused", "_connection_lost", "transport")
#: How often `PublicAccess` looks at the transport's write buffer while it drains.
_POLL = 0.005


def missing_parts(protocol_class: type[SMTPProtocol] = SMTPProtocol) -> tuple[str, ...]:
    """The private parts `PrivateAccess` relies on that `protocol_class` (aiosmtplib's) lacks; () when none."""
    missing = [name for name in CLASS_PARTS if not callable(getattr(protocol_class, name, None))]
    if not isinstance(getattr(aiosmtplib.protocol, "MAX_RESPONSE_LENGTH", None), int):
        missing.append("MAX_RESPONSE_LENGTH")
    loop = asyncio.new_event_loop()  # the instance's attributes exist only once __init__ has run
    try:
        protocol = protocol_class(loop=loop)
        missing.extend(name for name in INSTANCE_PARTS if not hasattr(protocol, name))
    except Exception as exc:  # an __init__ we do not know: nothing of it can be relied on
        missing.append(f"__init__ ({type(exc).__name__})")
    finally:
        loop.close()
    return tuple(missing)


class PrivateAccess:
    """aiosmtplib's protocol used from the inside: pipelined groups, one timer a reply, drains without timers."""

    pipelining = True

    def announce(self) -> None:
        """Nothing to say: this is the normal way."""

    def expect_reply(self, protocol: SMTPProtocol) -> None:
        """Keep incoming bytes from now on (aiosmtplib drops what comes while no reply is expected)."""
        protocol._response_pending = True

    def send_group(self, protocol: SMTPProtocol, data: bytes) -> None:
        """Write a pipelined group; its replies are then read with `buffered_reply` / `read_reply`."""
        protocol.data_received = _keeping_data_received(protocol)  # type: ignore[method-assign,assignment]
        protocol._response_pending = True
        protocol.write(data)

    def buffered_reply(self, protocol: SMTPProtocol) -> SMTPResponse | None:
        """A reply of the group that came with an earlier one, if any."""
        return protocol._read_response_from_buffer()

    def group_reply_read(self, protocol: SMTPProtocol, *, more: bool) -> None:
        """One of the group's replies was read: expect the next, or (none left) restore aiosmtplib's reading."""
        if more:
            protocol._response_pending = True  # read_response stopped expecting
        else:
            vars(protocol).pop("data_received", None)

    def must_drain(self, protocol: SMTPProtocol) -> bool:
        """Whether `drain` has anything to do: the transport is paused, or the connection is lost (it raises).
        Else the write went on its way and no coroutine is needed."""
        return protocol._paused or protocol._connection_lost

    async def drain(self, protocol: SMTPProtocol, timeout: float) -> None:
        """Wait, at most `timeout` seconds, until the transport takes more; no timer when it already does."""
        if not protocol._paused:
            await protocol._drain_helper()  # raises at once if the connection is lost; never waits
            return
        async with asyncio.timeout(timeout):
            await protocol._drain_helper()

    async def read_reply(self, protocol: SMTPProtocol, timeout: float) -> SMTPResponse:
        """The server's next reply, as `protocol.read_response(timeout)` reads it — but awaited on the
        protocol's own future with one timer: `asyncio.wait_for` adds a future, two callbacks and a
        turn of the event loop to every reply, two replies a message."""
        waiter = protocol._response_waiter
        if waiter is None:
            raise SMTPServerDisconnected("Connection lost")
        protocol._response_pending = True
        loop = asyncio.get_running_loop()
        timer = loop.call_later(timeout, _no_reply_in_time, waiter)
        try:
            return await waiter
        finally:
            timer.cancel()
            protocol._response_pending = False
            protocol._response_waiter = None if protocol.transport is None else loop.create_future()


class PublicAccess:
    """aiosmtplib's public protocol API only: one command at a time, the message drained by polling."""

    pipelining = False

    def __init__(self, missing: tuple[str, ...]) -> None:
        self.missing = missing
        self._announced = False

    def announce(self) -> None:
        if not self._announced:
            self._announced = True
            logger.warning(
                "aiosmtplib %s lacks %s: delivering without PIPELINING, through its public API",
                _installed_version(),
                ", ".join(self.missing),
            )

    def expect_reply(self, protocol: SMTPProtocol) -> None:
        """Nothing to do: `read_response` expects the reply when it is awaited."""

    def send_group(self, protocol: SMTPProtocol, data: bytes) -> None:  # pragma: no cover - pipelining is False
        raise RuntimeError("no PIPELINING through aiosmtplib's public API")

    def buffered_reply(self, protocol: SMTPProtocol) -> SMTPResponse | None:  # pragma: no cover
        raise RuntimeError("no PIPELINING through aiosmtplib's public API")

    def group_reply_read(self, protocol: SMTPProtocol, *, more: bool) -> None:  # pragma: no cover
        raise RuntimeError("no PIPELINING through aiosmtplib's public API")

    def must_drain(self, protocol: SMTPProtocol) -> bool:
        """Always: only `drain` looks at the transport."""
        return True

    async def drain(self, protocol: SMTPProtocol, timeout: float) -> None:
        """Wait until the transport has handed every byte written to the kernel; `timeout` bounds each wait
        in which none of them moves."""
        last, since = -1, asyncio.get_running_loop().time()
        while True:
            transport = protocol.transport
            if transport is None or transport.is_closing():
                raise SMTPServerDisconnected("Connection lost")
            left = transport.get_write_buffer_size()  # type: ignore[attr-defined]  # a WriteTransport's
            if not left:
                return
            now = asyncio.get_running_loop().time()
            if left != last:
                last, since = left, now
            elif now - since > timeout:
                raise TimeoutError
            await asyncio.sleep(_POLL)

    async def read_reply(self, protocol: SMTPProtocol, timeout: float) -> SMTPResponse:
        return await protocol.read_response(timeout=timeout)


Access = PrivateAccess | PublicAccess


def access_for(protocol_class: type[SMTPProtocol] = SMTPProtocol) -> Access:
    """`PrivateAccess` when `protocol_class` has every part it needs, else `PublicAccess`."""
    missing = missing_parts(protocol_class)
    return PublicAccess(missing) if missing else PrivateAccess()


def _no_reply_in_time(waiter: asyncio.Future[SMTPResponse]) -> None:
    if not waiter.done():
        waiter.set_exception(SMTPReadTimeoutError("Timed out waiting for server response"))


def _keeping_data_received(protocol: SMTPProtocol) -> Callable[[bytes], None]:
    """`protocol.data_received`, except that bytes arriving while a parsed reply waits to be picked
    up are kept for the next read (aiosmtplib drops them: it expects one reply per command)."""
    original = type(protocol).data_received
    limit: int = aiosmtplib.protocol.MAX_RESPONSE_LENGTH

    def data_received(data: bytes) -> None:
        waiter = protocol._response_waiter
        if waiter is not None and waiter.done() and protocol._response_pending:
            if len(protocol._buffer) + len(data) <= limit:
                protocol._buffer.extend(data)
            return
        original(protocol, data)

    return data_received


def _installed_version() -> str:
    # imported here: importlib.metadata costs a worker's start ~10 ms, and this is only said with the fallback's warning
    from importlib.metadata import PackageNotFoundError, version

    with contextlib.suppress(PackageNotFoundError):
        return version("aiosmtplib")
    return "(version unknown)"


#: How this process's sessions use aiosmtplib, decided once at import.
ACCESS: Access = access_for()

__all__ = [
    "ACCESS",
    "CLASS_PARTS",
    "INSTANCE_PARTS",
    "Access",
    "PrivateAccess",
    "PublicAccess",
    "access_for",
    "missing_parts",
]
