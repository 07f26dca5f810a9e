"""Private servers the fault run may crash and restart: a PostgreSQL cluster, a Redis with a password.

The shared PostgreSQL and Redis other tests use are never touched.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
import redis

from tests.support.redis_server import REDIS_SERVER, RedisServer


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _as_postgres(command: list[str]) -> list[str]:
    """Run PostgreSQL's tools as the `postgres` OS user when we are root (initdb refuses root)."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


class PrivatePostgres:
    """A PostgreSQL cluster of our own on a free port, password authentication over TCP.

    `fsync=off`: the fault run crashes the server process, never the machine,
    and a committed transaction's WAL is in the kernel's page cache by then, so
    an immediate stop loses nothing acknowledged (`synchronous_commit` stays on).
    """

    def __init__(self, password: str) -> None:
        if shutil.which("initdb") is None or shutil.which("pg_ctl") is None:
            raise RuntimeError("PostgreSQL's initdb and pg_ctl are not on PATH")
        self.password = password
        self.port = free_port()
        self.directory = Path(tempfile.mkdtemp(prefix="mq-rel-pg-"))
        self.data = self.directory / "data"
        self.log = self.directory / "server.log"
        self.restarts = 0
        if os.geteuid() == 0:
            shutil.chown(self.directory, "postgres")
        pwfile = self.directory / "pw"
        pwfile.write_text(password + "\n")
        if os.geteuid() == 0:
            shutil.chown(pwfile, "postgres")
        subprocess.run(
            _as_postgres(
                [
                    "initdb",
                    "-D",
                    str(self.data),
                    "-U",
                    "postgres",
                    "--auth-local=trust",
                    "--auth-host=scram-sha-256",
                    f"--pwfile={pwfile}",
                    "--no-sync",
                ]
            ),
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def url(self, database: str = "postgres", password: str | None = None) -> str:
        return f"postgresql://postgres:{password or self.password}@127.0.0.1:{self.port}/{database}"

    def start(self) -> PrivatePostgres:
        options = (
            f"-h 127.0.0.1 -p {self.port} -k {self.directory} -c fsync=off -c full_page_writes=off "
            "-c max_connections=300 -c shared_buffers=64MB"
        )
        subprocess.run(
            _as_postgres(
                ["pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "-t", "60", "start"]
            ),
            check=True,
            stdout=subprocess.DEVNULL,
        )
        return self

    def crash(self) -> None:
        """Stop at once, as a crash does (`-m immediate`: no checkpoint, recovery at the next start)."""
        subprocess.run(
            _as_postgres(["pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop"]),
            check=False,
            stdout=subprocess.DEVNULL,
        )

    def restart(self, down: float = 1.0) -> None:
        self.crash()
        time.sleep(down)
        self.start()
        self.restarts += 1

    def connect(self, database: str = "postgres") -> psycopg.Connection:
        return psycopg.connect(self.url(database), autocommit=True, connect_timeout=5)

    def create_database(self, name: str) -> None:
        with self.connect() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')

    def terminate_backends(self, database: str) -> int:
        """`pg_terminate_backend` every session on `database` but ours; how many."""
        with self.connect() as conn:
            rows = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                [database],
            ).fetchall()
        return len(rows)

    def destroy(self) -> None:
        self.crash()
        shutil.rmtree(self.directory, ignore_errors=True)


class PrivateRedis(RedisServer):
    """A redis-server of our own with `requirepass`, AOF on and `appendfsync always`: a restart loses nothing
    acknowledged."""

    def __init__(self, directory: Path, password: str, *options: str) -> None:
        self.password = password
        super().__init__(
            directory,
            "--requirepass",
            password,
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--maxmemory-policy",
            "noeviction",
            *options,
        )
        self.restarts = 0

    @property
    def url(self) -> str:
        return f"redis://:{self.password}@127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, password=self.password, socket_timeout=5)

    def start(self) -> PrivateRedis:
        """Start, and wait (up to 5 minutes: a big AOF takes a while to load) until it answers."""
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
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                with self.client() as probe:
                    if probe.ping():
                        return self
            except (redis.ConnectionError, redis.exceptions.BusyLoadingError):
                time.sleep(0.05)
        log = (self.directory / "redis.log").read_text(errors="replace")[-2000:]
        self.kill()
        raise RuntimeError(f"redis-server did not start on port {self.port}:\n{log}")

    def restart(self, down: float = 1.0) -> None:
        """SIGKILL (a crash: only the AOF survives), then start again on the same port and files."""
        self.kill()
        time.sleep(down)
        self.start()
        self.restarts += 1
