"""An SMTP sink on loopback that logs the arrival time (time.monotonic) of every RCPT, for the latency runs.

Standard library only. Each accepted `RCPT TO:<addr>` appends `<seconds> <addr>`
to the log at once (line-buffered), so the add → RCPT latency of a message can
be read per recipient token. It accepts any number of transactions per
connection, PIPELINING, 8BITMIME, SMTPUTF8 and RSET; it keeps nothing.

    python bench/recording_sink.py --port 2525 --log /tmp/rcpt.log
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import time
from typing import TextIO

EHLO_LINES = ["PIPELINING", "8BITMIME", "SMTPUTF8", "ENHANCEDSTATUSCODES", "SIZE 104857600"]


class Session:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, log: TextIO) -> None:
        self.reader = reader
        self.writer = writer
        self.log = log

    def reply(self, line: str) -> None:
        self.writer.write(line.encode("ascii") + b"\r\n")

    async def run(self) -> None:
        self.reply("220 recording-sink ESMTP")
        await self.writer.drain()
        while True:
            try:
                raw = await self.reader.readuntil(b"\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            except asyncio.LimitOverrunError:
                self.reply("500 5.5.2 line too long")
                return
            line = raw.rstrip(b"\r\n").decode("utf-8", "replace")
            verb = line[:4].upper()
            if verb == "EHLO":
                self.reply("250-recording-sink")
                for i, ext in enumerate(EHLO_LINES):
                    self.reply(("250 " if i == len(EHLO_LINES) - 1 else "250-") + ext)
            elif verb == "HELO":
                self.reply("250 recording-sink")
            elif verb == "MAIL":
                self.reply("250 2.1.0 Ok")
            elif verb == "RCPT":
                address = line[8:].strip()
                if address.startswith("<"):
                    address = address[1 : address.find(">")] if ">" in address else address[1:]
                self.log.write(f"{time.monotonic():.6f} {address}\n")
                self.reply("250 2.1.5 Ok")
            elif verb == "DATA":
                self.reply("354 End data with <CR><LF>.<CR><LF>")
                await self.writer.drain()
                if not await self._data():
                    return
                self.reply("250 2.0.0 Ok: queued")
            elif verb in ("RSET", "NOOP"):
                self.reply("250 2.0.0 Ok")
            elif verb == "QUIT":
                self.reply("221 2.0.0 Bye")
                await self.writer.drain()
                return
            else:
                self.reply("502 5.5.2 Error: command not recognized")
            # Pipelined commands are answered together, as they arrived.
            if not self.reader._buffer:  # type: ignore[attr-defined]
                await self.writer.drain()

    async def _data(self) -> bool:
        while True:
            try:
                chunk = await self.reader.readuntil(b"\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return False
            except asyncio.LimitOverrunError as exc:
                await self.reader.readexactly(exc.consumed)
                continue
            if chunk in (b".\r\n", b".\n"):
                return True


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--log", required=True)
    args = parser.parse_args()
    log = open(args.log, "a", buffering=1)  # noqa: SIM115 - lives as long as the process

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await Session(reader, writer, log).run()
        finally:
            writer.close()

    server = await asyncio.start_server(handle, args.host, args.port, limit=1 << 20, backlog=1000)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with server:
        await stop.wait()
    log.close()


if __name__ == "__main__":
    asyncio.run(main())
