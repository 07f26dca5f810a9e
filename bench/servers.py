"""The benchmark's own servers on loopback: a throwaway PostgreSQL cluster, Redis, smtp-sink, a recording sink.

Every server is started on a free port by `Servers` (a context manager) and
stopped, by its own process id, when the block ends — on an error or a signal
too. Nothing here touches the machine's own PostgreSQL, Redis or Postfix.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .procs import Child

BENCH_DIR = Path(__file__).resolve().parent


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def wait_port(port: int, timeout: float = 30.0, what: str = "server", child: Child | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if port_open(port):
            return
        if child is not None and child.proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {child.proc.returncode} before listening on {port}")
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} within {timeout} s")


def _tool(name: str, *patterns: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    for pattern in patterns:
        hits = sorted(glob.glob(pattern))
        if hits:
            return hits[-1]
    raise RuntimeError(f"{name} is not installed (make bench installs it with apt-get)")


def _version(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown ({exc})"
    return out.splitlines()[0] if out else "unknown"


# --- PostgreSQL -------------------------------------------------------------------------


@dataclass
class Postgres:
    """A cluster made by initdb in `root`, run as the `postgres` OS user on a free port.

    initdb's defaults are kept (fsync=on, synchronous_commit=on,
    full_page_writes=on, wal_level=replica, shared_buffers=128MB,
    max_connections=100); trust authentication on loopback only.
    """

    root: Path
    port: int = 0
    user: str = "postgres"
    data: Path = field(init=False)

    def __post_init__(self) -> None:
        self.data = self.root / "pgdata"
        self.bin = Path(_tool("pg_ctl", "/usr/lib/postgresql/*/bin/pg_ctl")).resolve().parent

    def _as_postgres(self, *cmd: str) -> list[str]:
        if os.geteuid() == 0:
            return ["runuser", "-u", self.user, "--", *cmd]
        return list(cmd)

    def start(self) -> None:
        if os.geteuid() == 0:
            pw = pwd.getpwnam(self.user)
            self.root.mkdir(parents=True, exist_ok=True)
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
        self.port = self.port or free_port()
        subprocess.run(
            self._as_postgres(
                str(self.bin / "initdb"),
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
            ),
            check=True,
            capture_output=True,
            text=True,
        )
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -k /tmp"
        subprocess.run(
            self._as_postgres(
                str(self.bin / "pg_ctl"),
                "-D",
                str(self.data),
                "-l",
                str(self.root / "postgres.log"),
                "-o",
                options,
                "-w",
                "-t",
                "60",
                "start",
            ),
            check=True,
            capture_output=True,
            text=True,
        )
        wait_port(self.port, what="PostgreSQL")

    def stop(self) -> None:
        if not (self.data / "postmaster.pid").exists():
            return
        subprocess.run(
            self._as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "-t", "60", "stop"),
            capture_output=True,
            text=True,
        )
        pid_file = self.data / "postmaster.pid"
        if pid_file.exists():  # pg_ctl could not stop it: end the postmaster by its pid
            with contextlib.suppress(ValueError, OSError):
                os.kill(int(pid_file.read_text().split()[0]), signal.SIGQUIT)

    def version(self) -> str:
        return _version([str(self.bin / "postgres"), "--version"])

    def settings(self) -> dict[str, str]:
        """The settings that decide write speed, as the running server reports them."""
        names = ["fsync", "synchronous_commit", "full_page_writes", "wal_level", "shared_buffers", "max_connections"]
        out: dict[str, str] = {}
        with self.connect() as conn:
            for name in names:
                row = conn.execute(f"SHOW {name}").fetchone()
                out[name] = str(row[0]) if row else "?"
        return out

    def connect(self, dbname: str = "postgres"):  # type: ignore[no-untyped-def]
        import psycopg

        return psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname=dbname, autocommit=True)

    def create_db(self, name: str, template: str | None = None) -> None:
        with self.connect() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            if template:
                # FILE_COPY: a checkpoint, then the files; every copy starts from the same state
                conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}" STRATEGY FILE_COPY')
            else:
                conn.execute(f'CREATE DATABASE "{name}"')

    def commits(self, name: str) -> int:
        """Transactions committed in database `name` so far (pg_stat_database, after a stats flush)."""
        time.sleep(0.6)  # backends report their counters at most every 500 ms
        with self.connect() as conn:
            row = conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (name,)).fetchone()
        return int(row[0]) if row else 0

    def drop_db(self, name: str) -> None:
        with self.connect() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# --- Redis ------------------------------------------------------------------------------


@dataclass
class Redis:
    """A private redis-server: no RDB snapshots, no AOF, loopback only."""

    root: Path
    port: int = 0
    cluster: bool = False
    child: Child | None = None

    def start(self) -> None:
        self.port = self.port or free_port()
        (self.root / "redis").mkdir(parents=True, exist_ok=True)
        cluster = ["--cluster-enabled", "yes", "--cluster-config-file", str(self.root / "nodes.conf")]
        exe = _tool("redis-server")
        self.child = Child(
            [
                exe,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.root / "redis"),
                "--daemonize",
                "no",
                "--maxmemory-policy",
                "noeviction",
                *(cluster if self.cluster else []),
            ],
            env=os.environ,
            log=self.root / "redis.log",
        )
        wait_port(self.port, what="redis-server", child=self.child)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _command(self, command: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", self.port), timeout=30) as s:
            s.sendall(command + b"\r\n")
            reply = s.recv(1 << 16)
            if reply.startswith(b"$"):  # a bulk string: read it all
                size = int(reply[1 : reply.index(b"\r\n")])
                while len(reply) < size + len(str(size)) + 5:
                    reply += s.recv(1 << 16)
        return reply

    def flush(self) -> None:
        reply = self._command(b"FLUSHALL")
        if not reply.startswith(b"+OK"):
            raise RuntimeError(f"FLUSHALL answered {reply!r}")

    def command_calls(self) -> dict[str, int]:
        """Calls per Redis command so far (INFO commandstats)."""
        text = self._command(b"INFO commandstats").decode(errors="replace")
        return {m.group(1): int(m.group(2)) for m in re.finditer(r"cmdstat_([\w|]+):calls=(\d+)", text)}

    def reset_stats(self) -> None:
        self._command(b"CONFIG RESETSTAT")

    def stop(self) -> None:
        if self.child is not None:
            self.child.stop(10)

    def version(self) -> str:
        return _version([_tool("redis-server"), "--version"])


class RedisCluster:
    """Three private redis-server primaries (`--cluster-enabled yes`) joined by `redis-cli --cluster create`, on
    free loopback ports whose bus ports (+10000) are free too; no RDB, no AOF. For the one-process delivery line
    on a Cluster (`deliver.1`, ours-redis-cluster)."""

    def __init__(self, root: Path) -> None:
        self.root = root / "redis-cluster"
        self.nodes: list[Redis] = []

    def start(self) -> None:
        cli = _tool("redis-cli")
        ports: list[int] = []
        while len(ports) < 3:
            port = free_port()
            if port not in ports and port + 10000 < 65536 and not port_open(port + 10000):
                ports.append(port)
        for port in ports:
            node = Redis(self.root / str(port), port, cluster=True)
            self.nodes.append(node)
            node.start()
        addresses = [f"127.0.0.1:{port}" for port in ports]
        subprocess.run(
            [cli, "--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while not all(b"cluster_state:ok" in node._command(b"CLUSTER INFO") for node in self.nodes):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Redis Cluster on {ports} did not come up")
            time.sleep(0.1)

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def flush(self) -> None:
        for node in self.nodes:
            node.flush()

    def keys_per_node(self) -> dict[int, int]:
        """DBSIZE of each primary, by port."""
        return {node.port: int(node._command(b"DBSIZE").strip()[1:]) for node in self.nodes}

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


# --- SMTP sinks -------------------------------------------------------------------------


@dataclass
class SmtpSink:
    """Postfix's smtp-sink: accepts and discards mail, any number of messages per connection.

    Run as `smtp-sink -c -u postfix 127.0.0.1:PORT 1000`; `-c` prints running
    counters (`sess= quit= mesg=`), which `messages()` reads to check that every
    message arrived.
    """

    root: Path
    port: int = 0
    child: Child | None = None

    @staticmethod
    def exe() -> str:
        return _tool("smtp-sink", "/usr/sbin/smtp-sink")

    def start(self) -> None:
        self.port = self.port or free_port()
        cmd = [self.exe(), "-c"]
        if os.geteuid() == 0:
            cmd += ["-u", "postfix"]
        cmd += [f"127.0.0.1:{self.port}", "1000"]
        self.log = self.root / "smtp-sink.log"
        self.child = Child(cmd, env=os.environ, log=self.log)
        wait_port(self.port, what="smtp-sink", child=self.child)

    def counters(self) -> dict[str, int]:
        """smtp-sink's last counters: sessions ended (`sess`), QUITs (`quit`), messages (`mesg`)."""
        time.sleep(0.05)
        with open(self.log, "rb") as f:  # the counters are rewritten in place (\r): the tail has the last
            f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
            text = f.read().decode(errors="replace")
        found = re.findall(r"sess=(\d+) quit=(\d+) mesg=(\d+)", text)
        if not found:
            return {"sess": 0, "quit": 0, "mesg": 0}
        sess, quit_, mesg = (int(x) for x in found[-1])
        return {"sess": sess, "quit": quit_, "mesg": mesg}

    def messages(self) -> int:
        """Messages received so far."""
        return self.counters()["mesg"]

    def stop(self) -> None:
        if self.child is not None:
            self.child.stop(10)

    @staticmethod
    def version() -> str:
        out = _version(["dpkg-query", "-W", "-f=${Version}", "postfix"])
        return f"Postfix {out} (smtp-sink)"


@dataclass
class RecordingSink:
    """bench/recording_sink.py: an SMTP sink that writes each RCPT's arrival time to a log."""

    root: Path
    port: int = 0
    child: Child | None = None

    def start(self) -> None:
        self.port = self.port or free_port()
        self.log = self.root / "rcpt.log"
        self.log.touch()
        self.child = Child(
            [sys.executable, str(BENCH_DIR / "recording_sink.py"), "--port", str(self.port), "--log", str(self.log)],
            env=os.environ,
            log=self.root / "recording-sink.out",
        )
        wait_port(self.port, what="recording sink", child=self.child)

    def arrivals(self, prefix: str) -> dict[str, float]:
        """First RCPT time (time.monotonic) of each address starting with `prefix`."""
        seen: dict[str, float] = {}
        for line in self.log.read_text(errors="replace").splitlines():
            stamp, _, address = line.partition(" ")
            if address.startswith(prefix) and address not in seen:
                seen[address] = float(stamp)
        return seen

    def stop(self) -> None:
        if self.child is not None:
            self.child.stop(10)


# --- all of them ------------------------------------------------------------------------


class Servers(contextlib.ExitStack):
    """Start PostgreSQL, Redis, smtp-sink and the recording sink; stop them all on exit."""

    def __init__(self, root: Path | None = None, *, keep: bool = False) -> None:
        super().__init__()
        self.keep = keep
        self.root = root or Path(tempfile.mkdtemp(prefix="mailqueue-bench-"))
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o755)

    def __enter__(self) -> Servers:
        super().__enter__()
        if not self.keep:
            self.callback(shutil.rmtree, self.root, True)
        # SIGTERM/SIGHUP unwind like Ctrl-C, so the callbacks below stop every server.
        for signum in (signal.SIGTERM, signal.SIGHUP):
            previous = signal.signal(signum, _raise_interrupt)
            self.callback(signal.signal, signum, previous)
        try:
            self.postgres = Postgres(self.root / "pg")
            self.callback(self.postgres.stop)
            self.postgres.start()
            self.redis = Redis(self.root)
            self.callback(self.redis.stop)
            self.redis.start()
            # optional: the Cluster line is left out where redis-cli is not installed
            self.redis_cluster: RedisCluster | None = None
            if shutil.which("redis-cli"):
                cluster = RedisCluster(self.root)
                self.callback(cluster.stop)
                try:
                    cluster.start()
                    self.redis_cluster = cluster
                except (OSError, RuntimeError, subprocess.SubprocessError) as exc:  # the line is left out, not the run
                    print(f"the Redis Cluster did not start, its line is left out: {exc}", file=sys.stderr)
            self.sink = SmtpSink(self.root)
            self.callback(self.sink.stop)
            self.sink.start()
            self.recorder = RecordingSink(self.root)
            self.callback(self.recorder.stop)
            self.recorder.start()
        except BaseException:
            self.close()
            raise
        return self


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def port_25_listening() -> bool:
    """Whether anything (Postfix's own daemon, say) listens on TCP port 25 here."""
    try:
        out = subprocess.run(["ss", "-Hltn", "sport = :25"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return port_open(25)
    return bool(out.strip())
