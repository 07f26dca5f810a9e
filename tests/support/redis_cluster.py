"""A Redis Cluster of the test's own: three primaries (`redis-server --cluster-enabled yes`) on loopback, joined by
`redis-cli --cluster create`.

`ClusterSetup(directory)` starts the three servers on free ports drawn at random from `PORTS`, each with its
cluster bus port (the port + 10000) free too, drawn again when another process took one first (test runs and
pytest-xdist workers start clusters at the same time); creates the cluster (the 16384 slots split in three, no
replicas), waits until every node says `cluster_state:ok`, and gives the store's `options()`. `node_of(key)`
names the primary serving a key."""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import redis
import redis.crc

from tests.support.redis_server import RedisServer
from tests.support.services import skip_or_fail

REDIS_CLI = shutil.which("redis-cli") or "/usr/bin/redis-cli"
#: The ports the cluster's nodes may take (their bus ports are 10000 above, below Linux's ephemeral ports).
PORTS = range(7000, 22000)
#: How many times a start whose ports another process took first is tried again, on other ports.
ATTEMPTS = 5


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_ports(count: int, taken: set[int]) -> list[int]:
    candidates = random.sample(PORTS, 200)
    found = [p for p in candidates if p not in taken and _free(p) and _free(p + 10000)][:count]
    if len(found) < count:
        raise RuntimeError(f"fewer than {count} free ports (with their bus ports) in {PORTS}")
    return found


class _Node(RedisServer):
    def __init__(self, directory: Path, port: int) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        super().__init__(
            directory,
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            str(directory / "nodes.conf"),
            "--cluster-node-timeout",
            "5000",
            "--appendonly",
            "no",
        )
        self.port = port


class ClusterSetup:
    """Three primaries sharing the 16384 slots, each a process of the test's own."""

    _taken: set[int] = set()  # ports handed out in this process: a second setup takes others

    def __init__(self, directory: Path, *, primaries: int = 3) -> None:
        if not Path(REDIS_CLI).exists():
            skip_or_fail(f"redis-cli is not installed at {REDIS_CLI} (Debian: redis-tools)")
        self.directory = directory
        self.primaries = primaries
        self.nodes: list[_Node] = []
        self._take_ports()

    def _take_ports(self) -> None:
        ports = _free_ports(self.primaries, self._taken)
        self._taken.update(ports)
        self.nodes = [_Node(self.directory / f"node{port}", port) for port in ports]

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def options(self, **more: Any) -> dict[str, Any]:
        return {"url": self.url, "cluster": True, **more}

    def client(self) -> redis.RedisCluster:
        return redis.RedisCluster(host="127.0.0.1", port=self.nodes[0].port, socket_timeout=5)

    def node_of(self, key: str | bytes) -> int:
        """The port of the primary serving `key`."""
        with self.client() as client:
            node = client.get_node_from_key(key)
            return int(node.port)

    def keys_per_node(self, pattern: str) -> dict[int, int]:
        """How many keys matching `pattern` each primary holds, by its port (SCAN on each)."""
        counts: dict[int, int] = {}
        for node in self.nodes:
            with node.client() as client:
                counts[node.port] = sum(1 for _ in client.scan_iter(match=pattern, count=1000))
        return counts

    def move_slot_of(self, key: str) -> int:
        """Move the slot of `key`, with its keys, to another primary (as `redis-cli --cluster reshard` does: SETSLOT
        IMPORTING and MIGRATING, MIGRATE, SETSLOT NODE on every node); the port of the primary serving it now."""
        slot = redis.crc.key_slot(key.encode())
        source = next(node for node in self.nodes if node.port == self.node_of(key))
        target = next(node for node in self.nodes if node is not source)
        with source.client() as src, target.client() as dst:
            source_id, target_id = (c.execute_command("CLUSTER", "MYID").decode() for c in (src, dst))
            dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
            src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
            while keys := src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
                src.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
            for node in self.nodes:
                with node.client() as client:
                    client.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
        return target.port

    def start(self) -> ClusterSetup:
        for attempt in range(ATTEMPTS):
            try:
                for node in self.nodes:
                    node.start()
                break
            except RuntimeError:  # a port was taken between _free() and the server's bind: others, then
                self.stop()
                if attempt == ATTEMPTS - 1:
                    raise
                self._take_ports()
        try:
            addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
            subprocess.run(
                [REDIS_CLI, "--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes"],
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                timeout=60,
            )
            self._wait_until_ok()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_until_ok(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            states = []
            for node in self.nodes:
                with node.client() as client:
                    info = client.execute_command("CLUSTER", "INFO")
                    text = info.decode() if isinstance(info, bytes) else str(info)
                    states.append("cluster_state:ok" in text and f"cluster_known_nodes:{len(self.nodes)}" in text)
            if all(states):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster of {[n.port for n in self.nodes]} did not come up")
            time.sleep(0.1)

    def stop(self) -> None:
        for node in self.nodes:
            node.kill()
        self._taken.difference_update(node.port for node in self.nodes)

    def __enter__(self) -> ClusterSetup:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()
