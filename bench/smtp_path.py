"""The SMTP client's CPU a message, ours against raw clients, on one smtp-sink: `python -m bench.smtp_path`.

No queue, no store: what a delivered message costs the delivery stack alone.
Each mode runs in a child process of its own, `--concurrency` tasks (20, as
the worker's `CONCURRENCY`) each sending its share over connections kept
open, first `--warm` messages, then `--n` measured ones (the CPU time of the
process, user + system, ÷ n):

- `raw`: aiosmtplib's `sendmail` with RSET between two messages, one command
  a round trip (bench/raw_client.py's `reuse` loop, the `raw.reuse` line of
  `make bench`);
- `floor`: a bare `asyncio.Protocol` writing what our sessions write (MAIL,
  RCPT and DATA in one write, then the message and its "."), no timers, no
  reply objects: the Python floor of the same exchange;
- `transport`: our `SmtpTransport.send` with one `Target` made once;
- `ungated`: our `Deliverer.deliver(sender, [recipient], message)` with the
  worker's connection cache, without its traffic shaping gate;
- `deliverer`: the same as the worker calls it, with the gate (`worker.shaper.Shaper`
  on a `MemoryStore`).

`--callgrind`: each mode under valgrind's callgrind, at `--n` and at `--n` ÷ 4,
instructions a message = the difference ÷ the messages between.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from .raw_client import SENDER, message
from .servers import SmtpSink

MODES = ("raw", "floor", "transport", "ungated", "deliverer")
BENCH_DIR = Path(__file__).resolve().parent


# --- the clients (in the child) ---------------------------------------------------------------
# Each `setup(port)` opens nothing yet and returns (send, close): `send(rcpt, message)` delivers one message (on
# connections kept between messages), `close()` ends them.

Send = Callable[[str, bytes], Awaitable[None]]


async def _raw(port: int) -> tuple[Send, Callable[[], Awaitable[None]]]:
    import aiosmtplib

    idle: list[aiosmtplib.SMTP] = []
    every: list[aiosmtplib.SMTP] = []

    async def send(rcpt: str, raw: bytes) -> None:
        if idle:
            smtp = idle.pop()
            await smtp.rset()
        else:
            smtp = aiosmtplib.SMTP(hostname="127.0.0.1", port=port, local_hostname="bench.example", start_tls=False)
            await smtp.connect()
            every.append(smtp)
        await smtp.sendmail(SENDER, [rcpt], raw)
        idle.append(smtp)

    async def close() -> None:
        for smtp in every:
            await smtp.quit()

    return send, close


class _FloorProtocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.buffer = b""
        self.wanted = 0
        self.waiter: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: Any = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while self.wanted and b"\n" in self.buffer:
            line, _, self.buffer = self.buffer.partition(b"\n")
            if line[3:4] != b"-":
                self.wanted -= 1
        if not self.wanted and self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def expect(self, replies: int) -> asyncio.Future[None]:
        self.wanted = replies
        self.waiter = asyncio.get_running_loop().create_future()
        return self.waiter


async def _floor(port: int) -> tuple[Send, Callable[[], Awaitable[None]]]:
    loop = asyncio.get_running_loop()
    idle: list[_FloorProtocol] = []
    every: list[_FloorProtocol] = []

    async def send(rcpt: str, raw: bytes) -> None:
        if idle:
            protocol = idle.pop()
        else:
            _, protocol = await loop.create_connection(_FloorProtocol, "127.0.0.1", port)
            await protocol.expect(1)  # the greeting
            done = protocol.expect(1)
            protocol.transport.write(b"EHLO bench.example\r\n")
            await done
            every.append(protocol)
        done = protocol.expect(3)
        group = b"MAIL FROM:<%s> SIZE=%d\r\nRCPT TO:<%s>\r\nDATA\r\n" % (SENDER.encode(), len(raw), rcpt.encode())
        protocol.transport.write(group)
        await done
        done = protocol.expect(1)
        protocol.transport.write(raw + b".\r\n")
        await done
        idle.append(protocol)

    async def close() -> None:
        for protocol in every:
            done = protocol.expect(1)
            protocol.transport.write(b"QUIT\r\n")
            await done
            protocol.transport.close()

    return send, close


def _settings(port: int) -> Any:
    import django
    from django.conf import settings

    if not settings.configured:
        settings.configure(
            INSTALLED_APPS=["django_mailqueue"],
            USE_TZ=True,
            DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
        )
        django.setup()
    from django_mailqueue.conf import load_settings

    return load_settings(
        {
            "HOSTNAME": "bench.example",
            "STORE": {"BACKEND": "django_mailqueue.stores.memory.MemoryStore"},
            "ROUTES": {"*": {"HOST": "127.0.0.1", "PORT": port, "TLS": "none"}},
        }
    )


async def _transport(port: int) -> tuple[Send, Callable[[], Awaitable[None]]]:
    from django_mailqueue.delivery.smtp import CACHE_TIME, SmtpTransport
    from django_mailqueue.delivery.transport import Envelope, Target
    from django_mailqueue.delivery.wire import dot_stuff, normalize_line_endings

    settings = _settings(port)
    transport = SmtpTransport(cache_time=CACHE_TIME)
    target = Target(
        host="127.0.0.1",
        address="127.0.0.1",
        port=port,
        tls="none",
        tls_context=None,
        helo_name="bench.example",
        timeouts=settings.timeouts,
        deadline=asyncio.get_running_loop().time() + 3600,
    )

    async def send(rcpt: str, raw: bytes) -> None:
        normalized = normalize_line_endings(raw)
        envelope = Envelope(SENDER, (rcpt,), dot_stuff(normalized), len(normalized), False, False)
        report = await transport.send(target, envelope)
        assert report.outcomes[rcpt].reply.code == 250, report

    return send, transport.aclose


async def _deliverer(port: int, *, gated: bool = True) -> tuple[Send, Callable[[], Awaitable[None]]]:
    settings = _settings(port)  # Django set up before the worker's modules are imported
    from django_mailqueue.core.clock import SystemClock
    from django_mailqueue.stores.memory import MemoryStore
    from django_mailqueue.worker.factory import smtp_deliverer
    from django_mailqueue.worker.shaper import Shaper

    clock = SystemClock()
    shaper = Shaper(settings, MemoryStore(), clock=clock) if gated else None
    deliverer = smtp_deliverer(settings, clock=clock, shaper=shaper)

    async def send(rcpt: str, raw: bytes) -> None:
        result = await deliverer.deliver(SENDER, [rcpt], raw)
        assert result.outcomes[0].reply.code == 250, result

    return send, deliverer.aclose


async def _ungated(port: int) -> tuple[Send, Callable[[], Awaitable[None]]]:
    return await _deliverer(port, gated=False)


CLIENTS = {"raw": _raw, "floor": _floor, "transport": _transport, "ungated": _ungated, "deliverer": _deliverer}


def child(mode: str, port: int, n: int, warm: int, size: int, concurrency: int) -> dict[str, float]:
    import gc

    msgs = [(f"rcpt{i:05d}@bench.example", message(i, size)) for i in range(warm + n)]

    async def main() -> tuple[float, float]:
        send, close = await CLIENTS[mode](port)

        async def run(part: list[tuple[str, bytes]]) -> None:
            it = iter(part)

            async def one_task() -> None:
                for rcpt, raw in it:
                    await send(rcpt, raw)

            await asyncio.gather(*(one_task() for _ in range(concurrency)))

        await run(msgs[:warm])
        gc.collect()
        gc.freeze()  # as the worker's command does after its start
        cpu, wall = time.process_time(), time.perf_counter()
        await run(msgs[warm:])
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        await close()
        return cpu, wall

    cpu, wall = asyncio.run(main())
    return {"cpu_us": 1e6 * cpu / max(1, n), "rate": n / wall}


# --- the parent -------------------------------------------------------------------------------


def _instructions(out: Path) -> int:
    for line in out.read_text().splitlines():
        if line.startswith(("totals:", "summary:")):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {out}")


def _run_child(
    mode: str, port: int, n: int, args: argparse.Namespace, callgrind: Path | None = None
) -> dict[str, float]:
    cmd = [sys.executable, "-m", "bench.smtp_path", "--child", mode, "--port", str(port), "--n", str(n)]
    cmd += ["--warm", str(args.warm), "--size", str(args.size), "--concurrency", str(args.concurrency)]
    if callgrind is not None:
        cmd = ["valgrind", "--tool=callgrind", "--quiet", f"--callgrind-out-file={callgrind}", *cmd]
    env = {**os.environ, "PYTHONPATH": str(BENCH_DIR.parent)}
    res = subprocess.run(cmd, env=env, cwd=BENCH_DIR.parent, capture_output=True, text=True, timeout=1800)
    if res.returncode != 0:
        raise RuntimeError(f"{mode} exited {res.returncode}:\n{res.stderr[-3000:]}")
    out: dict[str, float] = json.loads(res.stdout.strip().splitlines()[-1])
    if callgrind is not None:
        out["instructions"] = _instructions(callgrind)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--n", type=int, default=4000)
    parser.add_argument("--warm", type=int, default=1000)
    parser.add_argument("--size", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--callgrind", action="store_true")
    parser.add_argument("--child", choices=MODES)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.port, args.n, args.warm, args.size, args.concurrency)))
        return
    modes = [m for m in args.modes.split(",") if m]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # the sink is stopped on the way out
    with tempfile.TemporaryDirectory(prefix="smtp-path-") as tmp:
        sink = SmtpSink(root=Path(tmp))
        sink.start()
        try:
            print(f"load {os.getloadavg()[0]:.2f}", flush=True)
            found: dict[str, list[float]] = {m: [] for m in modes}
            for repeat in range(args.repeats):
                for mode in modes:
                    if args.callgrind:
                        small = max(1, args.n // 4)
                        big = _run_child(mode, sink.port, args.n, args, Path(tmp) / f"cg-{mode}-{repeat}-big.out")
                        low = _run_child(mode, sink.port, small, args, Path(tmp) / f"cg-{mode}-{repeat}-small.out")
                        value = (big["instructions"] - low["instructions"]) / (args.n - small)
                        found[mode].append(value)
                        print(f"  {mode}: {value / 1e3:,.1f} k instructions a message", flush=True)
                    else:
                        res = _run_child(mode, sink.port, args.n, args)
                        found[mode].append(res["cpu_us"])
                        print(f"  {mode}: {res['cpu_us']:.1f} µs CPU a message, {res['rate']:,.0f} msg/s", flush=True)
            unit = "k instructions" if args.callgrind else "µs CPU"
            scale = 1e-3 if args.callgrind else 1.0
            print(f"load {os.getloadavg()[0]:.2f}; medians, {unit} a message:")
            for mode in modes:
                print(f"  {mode:10s} {scale * statistics.median(found[mode]):10,.1f}")
        finally:
            sink.stop()


if __name__ == "__main__":
    main()
