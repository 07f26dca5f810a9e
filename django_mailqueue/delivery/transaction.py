"""One message through an open `Session`: its transactions (MAIL FROM, RCPT TO, DATA) and its bytes.

MAIL, RCPT and DATA go as one PIPELINING group when the server offers it.
A message's recipients go in chunks of at most `rcpt_limit`; a 452 after
some were accepted sends the rest again at once. Each recipient keeps its
own RCPT reply; the reply to the final "." applies to those RCPT accepted.
The message is written through `aiosmtplib_adapter`, not aiosmtplib's
`data()` (why: docs/delivery.md, "Bytes on the wire").
"""

from __future__ import annotations

import functools
import logging

from ..core.items import RecipientState
from . import replies
from .session import Session
from .wire import END_OF_DATA

logger = logging.getLogger("django_mailqueue.delivery")

#: Bytes written before waiting for the socket to drain (each wait bounded by DATA_BLOCK).
DATA_BLOCK_SIZE = 64 * 1024


async def transactions(session: Session) -> None:
    """The message's transactions, each of at most `rcpt_limit` recipients, until every recipient is decided
    or the session ends."""
    assert session.smtp is not None
    envelope = session.envelope
    size_limit = size_limit_of(session.smtp.esmtp_extensions.get("size", ""))
    if size_limit and envelope.size > size_limit:
        text = f"message size {envelope.size} exceeds size limit {size_limit} of {session.target.label}"
        reply = session.own(replies.TOO_BIG, text)
        session.report.decide_rest(envelope.recipients, reply, RecipientState.FAILED)
        return
    limit = max(1, envelope.rcpt_limit)
    for start in range(0, len(envelope.recipients), limit):
        chunk = envelope.recipients[start : start + limit]
        while chunk and not session.report.ended:
            chunk = await transaction(session, chunk)  # those the server had no room for: again, at once


async def transaction(session: Session, chunk: tuple[str, ...]) -> tuple[str, ...]:
    """One transaction; the recipients to send again in the next one (RFC 5321 §4.5.3.1.10: a 452 after
    some were accepted), or ()."""
    envelope, timeouts = session.envelope, session.target.timeouts
    utf8 = envelope.utf8_headers or not envelope.sender.isascii() or not all(r.isascii() for r in chunk)
    if utf8 and not session.offers("smtputf8"):
        text = f"SMTPUTF8 is required, but was not offered by {session.target.label}"
        reply = session.own(replies.NEEDS_SMTPUTF8, text)
        session.report.decide_rest(chunk, reply, RecipientState.FAILED)
        return ()
    encoding = "utf-8" if utf8 else "ascii"
    mail = [b"MAIL", b"FROM:<" + envelope.sender.encode(encoding) + b">"]
    if session.offers("size"):
        mail.append(b"SIZE=%d" % envelope.size)
    if envelope.eightbit and session.offers("8bitmime"):
        mail.append(b"BODY=8BITMIME")
    if utf8:
        mail.append(b"SMTPUTF8")
    rcpts = [b"TO:<" + recipient.encode(encoding) + b">" for recipient in chunk]
    if (
        session.access.pipelining
        and session.offers("pipelining")
        and not session.send_group(
            [
                (b" ".join(mail), timeouts.mail, "sending MAIL FROM"),
                *((b"RCPT " + to, timeouts.rcpt, "sending RCPT TO") for to in rcpts),
                (b"DATA", timeouts.data, "sending DATA"),
            ]
        )
    ):
        return ()
    response = await session.command(*mail, timeout=timeouts.mail, doing="sending MAIL FROM")
    if response is None:
        return ()
    session.answered = True
    if not 200 <= response.code < 300:
        reply = session.reply(response.code, response.message)
        session.report.decide_rest(chunk, reply, replies.state_of(reply))
        session.refused = True
        await session.rset()
        return ()
    accepted: list[str] = []
    again: list[str] = []
    for recipient, to in zip(chunk, rcpts, strict=True):
        response = await session.command(b"RCPT", to, timeout=timeouts.rcpt, doing="sending RCPT TO")
        if response is None:
            return ()
        if 200 <= response.code < 300:
            accepted.append(recipient)
        elif replies.too_many_recipients(response.code, len(accepted)):
            again.append(recipient)
        else:
            reply = session.reply(response.code, response.message)
            session.report.decide(recipient, reply, replies.state_of(reply))
    session.refused = not accepted
    if again:
        logger.debug(
            "%s took %d recipients of %d; the other %d go in the next transaction",
            session.target.label,
            len(accepted),
            len(chunk),
            len(again),
        )
    if not accepted:
        await session.rset()
        return ()
    response = await session.command(b"DATA", timeout=timeouts.data, doing="sending DATA")
    if response is None:
        return ()
    if response.code != 354:
        reply = session.reply(response.code, response.message)
        if reply.status.startswith("2"):
            reply = session.own(replies.MALFORMED, f"unexpected reply to DATA from {session.target.label}: {reply}")
        session.report.decide_rest(accepted, reply, replies.state_of(reply))
        await session.rset()
        return tuple(again)
    await send_message(session, accepted)
    return tuple(again)


async def send_message(session: Session, accepted: list[str]) -> None:
    assert session.smtp is not None
    timeouts, data = session.target.timeouts, session.envelope.data
    protocol = session.smtp.protocol
    if protocol is None:
        text = f"lost connection with {session.target.label} while sending the message"
        session.end(session.own(replies.CONNECTION_DROPPED, text))
        return
    session.doing = "sending the message"
    # aiosmtplib keeps incoming bytes only while a reply is expected: expect one now,
    # so a reply that comes while the message is still being written is not lost.
    access = session.access
    access.expect_reply(protocol)
    try:
        # The end-of-data mark goes in the same write as the last block: written apart, it
        # reaches some servers (Postfix's smtp-sink) as a second small segment that waits out
        # their delayed ACK — some 40 ms a message.
        view = memoryview(data)
        last = max(0, (len(data) - 1) // DATA_BLOCK_SIZE * DATA_BLOCK_SIZE)
        for start in range(0, last, DATA_BLOCK_SIZE):
            protocol.write(view[start : start + DATA_BLOCK_SIZE])  # type: ignore[arg-type]  # any buffer
            if access.must_drain(protocol):
                await access.drain(protocol, timeouts.data_block)
        protocol.write(b"".join((view[last:], END_OF_DATA)))  # one copy of the last block, not two
        if access.must_drain(protocol):  # most messages fit the socket's buffer: no coroutine to wait on
            await access.drain(protocol, timeouts.data_block)
    except TimeoutError:
        text = f"conversation with {session.target.label} timed out while sending the message"
        session.end(session.own(replies.NO_ANSWER, text))
        return
    except Exception as exc:
        session.end(session.failure(exc))
        return
    session.report.awaiting_reply.update(accepted)
    session.doing = "waiting for the reply to the end of data"
    try:
        response = await session.access.read_reply(protocol, timeouts.data_end)
    except Exception as exc:
        session.report.possibly_delivered.update(accepted)
        session.report.awaiting_reply.clear()
        lost = session.failure(exc)
        session.end(session.own(lost.status, f"{lost.text}: the message may have been delivered"))
        return
    session.report.awaiting_reply.clear()
    if not replies.is_well_formed(response.code, response.message):
        session.report.possibly_delivered.update(accepted)
        session.end(session.reply(response.code, response.message))
        return
    reply = session.reply(response.code, response.message)
    session.report.decide_rest(accepted, reply, replies.state_of(reply))
    if response.code == 421:
        session.end(reply, broken=False)
    elif logger.isEnabledFor(logging.DEBUG):
        logger.debug("%s answered the end of data for %d recipients: %s", session.target.label, len(accepted), reply)


@functools.lru_cache(maxsize=64)  # the same few servers' SIZE, message after message
def size_limit_of(value: str) -> int:
    """The limit a SIZE extension announces (0: none)."""
    try:
        return max(0, int(value.split()[0])) if value.strip() else 0
    except ValueError:
        return 0


__all__ = ["DATA_BLOCK_SIZE", "send_message", "size_limit_of", "transaction", "transactions"]
