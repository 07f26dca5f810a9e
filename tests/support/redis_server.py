"""Helpers for the Redis store's tests: private redis-server processes, and a unique key prefix per test."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from pathlib import Path
from types import TracebackType

import redis

from tests.support.services import skip_or_fail

#: The server binary the tests start (a single server, a Cluster's nodes, Sentinel's): `MAILQUEUE_TEST_REDIS_SERVER`
#: names another, e.g. a `valkey-server` (docs/redis.md, "Valkey").
REDIS_SERVER = os.environ.get("MAILQUEUE_TEST_REDIS_SERVER") or shutil.which("redis-server") or "/usr/bin/redis-server"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A redis-server of the test's own on a free loopback port, its files in `directory`.

    `start()` waits until it answers; `kill()` ends it with SIGKILL (a crash: only
    what was on disk survives); `start()` again brings it back on the same port
    and directory.
    """

    def __init__(self, directory: Path, *options: str) -> None:
        if not Path(REDIS_SERVER).exists():
            skip_or_fail(f"redis-server is not installed at {REDIS_SERVER}")
        self.directory = directory
        self.options = options
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)

    def start(self) -> RedisServer:
        command = [
            REDIS_SERVER,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.directory),
            "--save",
            "",
            "--daemonize",
            "no",
            "--logfile",
            str(self.directory / "redis.log"),
            *self.options,
        ]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                with self.client() as probe:
                    # ours, not a server another test run started on the port between free_port() and now
                    if probe.ping() and int(probe.info("server")["process_id"]) == self.process.pid:
                        return self
            except redis.ConnectionError:
                pass
            except redis.exceptions.BusyLoadingError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                log = (self.directory / "redis.log").read_text(errors="replace")[-2000:]
                self.kill()
                raise RuntimeError(f"redis-server did not start on port {self.port}:\n{log}")
            time.sleep(0.02)

    def kill(self) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(10)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.kill()


def unique_prefix(tag: str = "t") -> str:
    """A key prefix no other test uses, valid for `key_prefix`."""
    return f"mqtest-{tag}-{uuid.uuid4().hex[:12]}:"


def delete_prefix(url: str, prefix: str) -> None:
    with redis.Redis.from_url(url, socket_timeout=5) as client:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        if keys:
            client.delete(*keys)
