"""Servers on loopback for tests: a port free on every loopback address, and `LoopThreadServer`, an asyncio server
on an event loop in a thread of its own (so it answers whatever the test's loop is doing)."""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Self

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
