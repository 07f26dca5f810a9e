"""The raw client ceiling: aiosmtplib sending pre-built messages straight to the sink, no queue, no database.

    python bench/raw_client.py --port 2525 --count 5000 --concurrency 20 --mode per-connection
    python bench/raw_client.py --port 2525 --count 5000 --concurrency 20 --mode reuse

`per-connection`: `concurrency` tasks, each connecting, sending one message
(EHLO, MAIL, RCPT, DATA) and quitting, again and again. `reuse`: `concurrency`
connections each sending its share of the messages, with RSET between two
messages. Prints one JSON object: seconds (from the first connect to the last
reply), count, rate.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import aiosmtplib

SENDER = "sender@bench.example"


def message(i: int, size: int) -> bytes:
    head = (
        f"From: {SENDER}\r\nTo: rcpt{i:05d}@bench.example\r\nSubject: bench {i:05d}\r\n"
        f"Message-ID: <raw.{i}@bench.example>\r\nMIME-Version: 1.0\r\n"
        "Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 7bit\r\n\r\n"
    ).encode()
    line = b"raw client ceiling message body text " * 2
    body = b""
    while len(head) + len(body) < size:
        body += line[:74] + b"\r\n"
    return head + body[: max(0, size - len(head) - 2)] + b"\r\n"


async def per_connection(port: int, msgs: list[bytes], concurrency: int) -> None:
    it = iter(enumerate(msgs))

    async def one_task() -> None:
        for i, raw in it:
            smtp = aiosmtplib.SMTP(hostname="127.0.0.1", port=port, local_hostname="bench.example", start_tls=False)
            await smtp.connect()
            await smtp.sendmail(SENDER, [f"rcpt{i:05d}@bench.example"], raw)
            await smtp.quit()

    await asyncio.gather(*(one_task() for _ in range(concurrency)))


async def reuse(port: int, msgs: list[bytes], concurrency: int) -> None:
    it = iter(enumerate(msgs))

    async def one_connection() -> None:
        smtp = aiosmtplib.SMTP(hostname="127.0.0.1", port=port, local_hostname="bench.example", start_tls=False)
        await smtp.connect()
        first = True
        for i, raw in it:
            if not first:
                await smtp.rset()
            first = False
            await smtp.sendmail(SENDER, [f"rcpt{i:05d}@bench.example"], raw)
        await smtp.quit()

    await asyncio.gather(*(one_connection() for _ in range(concurrency)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--count", type=int, default=5000)
    parser.add_argument("--size", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--mode", choices=["per-connection", "reuse"], required=True)
    args = parser.parse_args()
    msgs = [message(i, args.size) for i in range(args.count)]
    run = per_connection if args.mode == "per-connection" else reuse
    started = time.perf_counter()
    asyncio.run(run(args.port, msgs, args.concurrency))
    elapsed = time.perf_counter() - started
    print(json.dumps({"seconds": elapsed, "count": args.count, "rate": args.count / elapsed, "size": len(msgs[0])}))


if __name__ == "__main__":
    main()
