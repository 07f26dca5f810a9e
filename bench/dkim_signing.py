"""DKIM signing costs, one 2 kB bench message: `python -m bench.dkim_signing` (not part of `make bench`).

Prints, for RSA-2048 and Ed25519: the CPU of the worker's event-loop share of a
signature (`DkimSigner.prepare` + `finish`'s folding) and of the private-key
operation; the operation's wall time per signature with 1 and 2 threads signing
at once (2 threads twice as fast = the operation runs without the GIL, on two
cores); and whether a thread signing holds the GIL (with a long switch
interval a thread that keeps the GIL starves the main thread of it); and,
for RSA, the event loop thread's CPU a signed message with 50 signing at once:
the operation on the loop, handed to a thread one at a time
(`run_in_executor`), and handed over in batches (`delivery/signing.py`, the
worker's); and the RSA signatures a second of a loop busy in Python (an SMTP
session's shape: ~1 ms of Python a message, with socket round trips between),
with the loop handing the GIL to the signing thread and without
(`SigningThread._nudge`), each against that loop unsigned. Read the wall times
only on a quiet machine (the load average is printed); the hand-off's A/B is run
interleaved.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import os
import socket
import sys
import threading
import time
from collections.abc import Callable

import django

SIZE = 2000


def cpu_per_call(f: Callable[[], object], n: int) -> float:
    start = time.process_time()
    for _ in range(n):
        f()
    return (time.process_time() - start) / n


def wall_per_call(f: Callable[[], object], n: int, threads: int) -> float:
    def work() -> None:
        for _ in range(n // threads):
            f()

    workers = [threading.Thread(target=work) for _ in range(threads)]
    start = time.perf_counter()
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    return (time.perf_counter() - start) / n


def holds_gil(f: Callable[[], object], sleeps: int = 5, interval: float = 0.5) -> bool:
    """Whether `f`, called in a loop by another thread, keeps the main thread from the GIL: with a switch
    interval of `interval` s, `sleeps` short sleeps then take ~sleeps × interval instead of milliseconds."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(interval)
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            f()

    thread = threading.Thread(target=spin)
    try:
        thread.start()
        time.sleep(0.01)
        start = time.perf_counter()
        for _ in range(sleeps):
            time.sleep(0.0005)
        took = time.perf_counter() - start
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(old)
    return took > sleeps * interval / 2


def loop_cpu_per_signature(signer: object, normalized: bytes, how: str, n: int = 4000, at_once: int = 50) -> float:
    """The event loop thread's CPU (ms) a signature, `n` signatures with `at_once` in flight: `how` is "loop"
    (all on it), "thread" (`run_in_executor`, one hand-over a signature) or "batched" (`SigningThread`)."""
    from django_mailqueue.delivery.signing import SigningThread
    from django_mailqueue.dkim import DkimSigner

    assert isinstance(signer, DkimSigner)
    pool = concurrent.futures.ThreadPoolExecutor(1)
    batched = SigningThread(signer)

    async def one() -> bytes:
        pending = signer.prepare(normalized)
        assert not isinstance(pending, bytes)
        if how == "loop":
            return signer.finish(pending, pending.private_key_operation)
        if how == "thread":
            run = functools.partial(signer.finish, pending, pending.private_key_operation)
            return await asyncio.get_running_loop().run_in_executor(pool, run)
        return await batched.sign(pending)

    async def run() -> float:
        slots = asyncio.Semaphore(at_once)

        async def slot() -> None:
            async with slots:
                await one()

        start = time.thread_time()
        await asyncio.gather(*(slot() for _ in range(n)))
        return (time.thread_time() - start) / n

    try:
        return 1000 * asyncio.run(run())
    finally:
        pool.shutdown()
        batched.close()


def busy_loop_rate(signer: object, normalized: bytes, mode: str, n: int = 2000, slots: int = 20) -> tuple[float, float]:
    """(messages a second, the signing thread's wall ms a signature) of an event loop whose `slots` attempts each
    sign a message (`mode`: "unsigned", "hand-off" as the worker does, "no hand-off") and then run ~1 ms of Python
    in 8 steps with a socket round trip after each."""
    from unittest import mock

    from django_mailqueue.delivery.signing import SigningThread
    from django_mailqueue.dkim import DkimSigner

    assert isinstance(signer, DkimSigner)
    thread = SigningThread(signer)
    spent = [0, 0.0]
    operation = thread._operation

    def timed(pending: object) -> Callable[[], bytes]:
        inner = operation(pending)  # type: ignore[arg-type]

        def run() -> bytes:
            start = time.perf_counter()
            try:
                return inner()
            finally:
                spent[0] += 1
                spent[1] += time.perf_counter() - start

        return run

    async def run() -> float:
        loop = asyncio.get_running_loop()
        pairs = [socket.socketpair() for _ in range(slots)]
        for pair in pairs:
            for end in pair:
                end.setblocking(False)
        todo = iter(range(n))

        async def slot(a: socket.socket, b: socket.socket) -> None:
            for _ in todo:
                if mode != "unsigned":
                    pending = signer.prepare(normalized)
                    assert not isinstance(pending, bytes)
                    await thread.sign(pending)
                for _ in range(8):
                    sum(range(3000))  # ~0.1 ms of Python
                    await loop.sock_sendall(a, b"x" * 100)
                    await loop.sock_recv(b, 100)

        start = time.perf_counter()
        await asyncio.gather(*(slot(a, b) for a, b in pairs))
        took = time.perf_counter() - start
        for pair in pairs:
            for end in pair:
                end.close()
        return took

    nudge = mock.patch.object(thread, "_nudge", lambda: None) if mode == "no hand-off" else contextlib.nullcontext()
    try:
        with mock.patch.object(thread, "_operation", timed), nudge:
            took = asyncio.run(run())
    finally:
        thread.close()
    return n / took, 1000 * spent[1] / max(spent[0], 1)


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    django.setup()
    from django.core.mail import EmailMessage

    from bench.driver import SENDER, body_for
    from django_mailqueue.delivery.wire import normalize_line_endings
    from django_mailqueue.dkim import DkimEntry, DkimSigner, PendingSignature, load_key
    from django_mailqueue.management.commands.mailqueue_dkim_keygen import generate_pem

    message = EmailMessage("bench 00001", body_for(SIZE), SENDER, ["rcpt00001@example.net"]).message()
    normalized = normalize_line_endings(message.as_bytes())
    print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs, a {len(normalized):,}-byte message")
    print(f"pure-Python loop holds the GIL (the check's control): {holds_gil(lambda: sum(range(300)))}")
    for algorithm, n in (("rsa-sha256", 2000), ("ed25519-sha256", 20000)):
        entry = DkimEntry("*", "bench.example", "bench", generate_pem(algorithm).decode(), algorithm)
        signer = DkimSigner({"*": load_key(entry)})
        pending = signer.prepare(normalized)
        assert isinstance(pending, PendingSignature)
        signature = pending.private_key_operation()
        prepare = functools.partial(signer.prepare, normalized)
        loop = cpu_per_call(prepare, n) + cpu_per_call(functools.partial(pending.field, signature), n)
        operation = pending.private_key_operation
        one, two = wall_per_call(operation, n, 1), wall_per_call(operation, n, 2)
        print(
            f"{algorithm}: loop's share {1000 * loop:.3f} ms CPU, key operation {1000 * cpu_per_call(operation, n):.3f}"
            f" ms CPU; wall per signature 1 thread {1000 * one:.3f} ms, 2 threads {1000 * two:.3f} ms"
            f" ({one / two:.2f}× the throughput); the operation holds the GIL: {holds_gil(operation)}"
        )
        if algorithm == "rsa-sha256":
            shares = {how: loop_cpu_per_signature(signer, normalized, how) for how in ("loop", "thread", "batched")}
            print(
                f"{algorithm}: the loop thread's CPU a signature, 50 at once: all on it {shares['loop']:.3f} ms,"
                f" one hand-over each {shares['thread']:.3f} ms, batched {shares['batched']:.3f} ms"
            )
            for _ in range(3):  # interleaved: the machine's load moves
                for mode in ("unsigned", "hand-off", "no hand-off"):
                    rate, wall = busy_loop_rate(signer, normalized, mode)
                    thread_wall = f", the thread {wall:.3f} ms wall a signature" if mode != "unsigned" else ""
                    print(
                        f"{algorithm}: a loop busy in Python, {mode:11}: {rate:,.0f} messages a second{thread_wall}"
                        f" (load {os.getloadavg()[0]:.1f})",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
