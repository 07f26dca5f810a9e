"""A Redis Sentinel setup of the test's own: a primary, its replicas and three sentinels on loopback.

`SentinelSetup(directory, replicas=1)` starts `redis-server` processes (the
sentinels are `redis-server sentinel.conf --sentinel`, what Debian's
`redis-sentinel` runs), waits until every sentinel knows the primary, its
replicas and the two other sentinels, and gives the store's `options()`.
`kill_primary()` SIGKILLs the primary; `wait_for_failover()` returns once the
sentinels name another one. Sentinel's timings are short (down after 1.5 s),
so a failover takes a few seconds.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import redis

from tests.support.redis_server import REDIS_SERVER, RedisServer, free_port

SERVICE = "mq-primary"
# Short, not shortest: below about a second, a sentinel that has just switched to the new primary can find it
# "down" before its first PING is answered on a busy machine, and fail over again (a second, a third primary).
DOWN_AFTER_MS = 1500
FAILOVER_TIMEOUT_MS = 10000


class _Node(RedisServer):
    """A data node: the primary, or a replica of it; with `requirepass` when the setup has a password."""

    def __init__(self, directory: Path, password: str | None, *options: str) -> None:
        self.password = password
        auth = ("--requirepass", password, "--masterauth", password) if password else ()
        directory.mkdir(parents=True, exist_ok=True)
        # diskless syncs start at once (Redis waits 5 s by default for more replicas to join one)
        super().__init__(directory, "--appendonly", "no", "--repl-diskless-sync-delay", "0", *auth, *options)

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, password=self.password, socket_timeout=5)


class _Sentinel:
    def __init__(self, directory: Path, primary_port: int, password: str | None, sentinel_password: str | None):
        self.port = free_port()
        self.password = sentinel_password
        directory.mkdir(parents=True, exist_ok=True)
        lines = [
            f"port {self.port}",
            "bind 127.0.0.1",
            "daemonize no",
            f"dir {directory}",
            f"logfile {directory / 'sentinel.log'}",
            f"sentinel monitor {SERVICE} 127.0.0.1 {primary_port} 2",
            f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}",
            f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}",
            f"sentinel parallel-syncs {SERVICE} 1",
        ]
        if password:
            lines.append(f"sentinel auth-pass {SERVICE} {password}")
        if sentinel_password:
            lines.append(f"requirepass {sentinel_password}")
        self.config = directory / "sentinel.conf"
        self.config.write_text("\n".join(lines) + "\n")  # Sentinel rewrites it: its own file
        self.log = directory / "sentinel.log"
        self.process = subprocess.Popen(
            [REDIS_SERVER, str(self.config), "--sentinel"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, password=self.password, socket_timeout=5)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


class SentinelSetup:
    """A primary, `replicas` replicas and three sentinels, each a process of the test's own."""

    def __init__(
        self,
        directory: Path,
        *,
        replicas: int = 1,
        password: str | None = None,
        sentinel_password: str | None = None,
    ) -> None:
        self.directory = directory
        self.password = password
        self.sentinel_password = sentinel_password
        self.primary = _Node(directory / "primary", password)
        self.replicas: list[_Node] = []
        self.sentinels: list[_Sentinel] = []
        self.replica_count = replicas

    def start(self) -> SentinelSetup:
        try:
            self.primary.start()
            for n in range(self.replica_count):
                node = _Node(
                    self.directory / f"replica{n}", self.password, "--replicaof", "127.0.0.1", str(self.primary.port)
                )
                self.replicas.append(node.start())
            self.sentinels = [
                _Sentinel(self.directory / f"sentinel{n}", self.primary.port, self.password, self.sentinel_password)
                for n in range(3)
            ]
            self._wait_until_known()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_until_known(self, timeout: float = 60.0) -> None:
        """Until the replicas are in sync and each sentinel knows them and the two other sentinels."""
        deadline = time.monotonic() + timeout
        while True:
            state = self._state()
            if state is None:
                return
            if time.monotonic() > deadline:
                logs = "\n".join(s.log.read_text(errors="replace")[-1500:] for s in self.sentinels if s.log.exists())
                raise RuntimeError(f"the Sentinel setup did not come up: {state}\n{logs}")
            time.sleep(0.1)

    def _state(self) -> str | None:
        """What is not ready yet, or None."""
        try:
            with self.primary.client() as primary:
                replication = primary.info("replication")
            online = [n for n in range(len(self.replicas)) if replication.get(f"slave{n}", {}).get("state") == "online"]
            if len(online) < len(self.replicas):
                return f"replicas in sync: {len(online)} of {len(self.replicas)}"
            with self.primary.client() as primary:  # a replica of a diskless sync acknowledges from its first ACK
                primary.set("mqtest-probe", 1)
                if primary.execute_command("WAIT", len(self.replicas), 100) < len(self.replicas):
                    return "replicas not acknowledging writes"
            for sentinel in self.sentinels:
                if sentinel.process.poll() is not None:
                    raise RuntimeError(f"sentinel on port {sentinel.port} exited: {sentinel.log.read_text()[-1500:]}")
                with sentinel.client() as client:
                    master = client.sentinel_master(SERVICE)
                if int(master["num-slaves"]) < len(self.replicas) or int(master["num-other-sentinels"]) < 2:
                    return f"sentinel {sentinel.port}: {master['num-slaves']} replicas, {master['num-other-sentinels']}"
        except (redis.ConnectionError, redis.ResponseError) as exc:
            return f"not answering: {exc}"
        return None

    def options(self, **more: Any) -> dict[str, Any]:
        """The store's OPTIONS for this setup."""
        options: dict[str, Any] = {
            "sentinels": [("127.0.0.1", s.port) for s in self.sentinels],
            "service_name": SERVICE,
        }
        if self.password:
            options["password"] = self.password
        if self.sentinel_password:
            options["sentinel_password"] = self.sentinel_password
        return {**options, **more}

    def primary_port(self) -> int:
        """The primary's port as the first sentinel that answers names it."""
        for sentinel in self.sentinels:
            try:
                with sentinel.client() as client:
                    _, port = client.sentinel_get_master_addr_by_name(SERVICE)
                return int(port)
            except redis.ConnectionError:
                continue
        raise RuntimeError("no sentinel answers")

    def kill_primary(self) -> None:
        """SIGKILL the primary (a crash): what its replicas had not got is gone."""
        self.primary.kill()

    def wait_for_failover(self, timeout: float = 60.0) -> int:
        """Until the sentinels name a new primary and it accepts writes; its port."""
        old = self.primary.port
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            port = self.primary_port()
            if port != old:
                with redis.Redis(host="127.0.0.1", port=port, password=self.password, socket_timeout=5) as new:
                    if new.info("replication")["role"] == "master":
                        return port
            time.sleep(0.1)
        raise RuntimeError("the sentinels did not promote a replica in time")

    def stop(self) -> None:
        for sentinel in self.sentinels:
            sentinel.kill()
        for node in (self.primary, *self.replicas):
            node.kill()

    def __enter__(self) -> SentinelSetup:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()
