"""What the reliability runs (the fault run, the outage, the failover) share: a `mailqueue_work` process with its
output in files (`RelWorker`), a private store server to crash and restart (`RunStore`), their settings, and a
command run to its end."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Literal

from tests.reliability.servers import PrivatePostgres, PrivateRedis
from tests.support.dns_server import DnsServer

ROOT = Path(__file__).resolve().parents[2]
PG_PASSWORD = "rel-Pg-s3cret-7d41"  # noqa: S105 - a throwaway cluster's password; checked absent from output
REDIS_PASSWORD = "rel-Redis-s3cret-91ce"  # noqa: S105
SECRETS = (PG_PASSWORD, REDIS_PASSWORD)

StoreKind = Literal["postgres", "redis"]


class RelWorker:
    """One `manage.py mailqueue_work` process of the run, its stderr and signal log in files."""

    def __init__(self, name: str, mailqueue: dict[str, Any], env: dict[str, str], directory: Path) -> None:
        self.name = name
        self.err_path = directory / f"{name}.err"
        self.out_path = directory / f"{name}.out"
        self.signal_path = directory / f"{name}.signals"
        self.killed_at: float | None = None
        full_env = {
            **env,
            "MAILQUEUE_TEST_MAILQUEUE": json.dumps({**mailqueue, "HOSTNAME": f"{name}.rel.test"}),
            "MAILQUEUE_REL_SIGNAL_LOG": str(self.signal_path),
        }
        with self.out_path.open("wb") as out, self.err_path.open("wb") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "django", "mailqueue_work", "--owner", name],
                cwd=ROOT,
                env=full_env,
                stdout=out,
                stderr=err,
            )

    def running(self) -> bool:
        return self.process.poll() is None

    @property
    def started(self) -> bool:
        """Its worker is up: the command's first line ("mailqueue: worker … on …") is out, its signals handled."""
        return "mailqueue: worker " in self.stderr

    def send(self, signum: int) -> None:
        if self.running():
            self.process.send_signal(signum)

    def kill(self) -> None:
        self.killed_at = time.time()
        self.send(signal.SIGKILL)
        self.process.wait(30)

    @property
    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace") if self.err_path.exists() else ""

    @property
    def stdout(self) -> str:
        return self.out_path.read_text(errors="replace") if self.out_path.exists() else ""

    def signals(self) -> list[dict[str, Any]]:
        if not self.signal_path.exists():
            return []
        return [json.loads(line) for line in self.signal_path.read_text().splitlines() if line.strip()]


class RunStore:
    """The run's store: its MAILQUEUE["STORE"], how to count what it holds, how to crash it."""

    def __init__(self, kind: StoreKind, directory: Path) -> None:
        self.kind = kind
        self.env: dict[str, str] = {}
        self.pg: PrivatePostgres | None = None
        self.redis: PrivateRedis | None = None
        self.pg = PrivatePostgres(PG_PASSWORD).start()
        self.pg.create_database("rel")
        self.history_db = "rel"
        if kind == "postgres":
            self.env["MAILQUEUE_REL_PG_URL"] = self.pg.url("rel")
            self.config: dict[str, Any] = {
                "BACKEND": "django_mailqueue.stores.orm.OrmStore",
                "OPTIONS": {"database": "faulty_pg"},
            }
            self.migrate_alias = "faulty_pg"
        else:
            self.env["MAILQUEUE_REL_DEFAULT_URL"] = self.pg.url("rel")  # the workers' history
            (directory / "redis").mkdir()
            self.redis = PrivateRedis(directory / "redis", REDIS_PASSWORD).start()
            self.prefix = f"rel-{uuid.uuid4().hex[:8]}:"
            self.config = {
                "BACKEND": "django_mailqueue.stores.redis.RedisStore",
                "OPTIONS": {"url": self.redis.url, "key_prefix": self.prefix, "socket_timeout": 5},
            }
            self.migrate_alias = "default"

    def counts(self, full: bool = False) -> tuple[int, int]:
        """(items, leased items) the store holds; on Redis, `full` counts the item and message keys
        themselves (a scan), else the due and leased sets (cheap)."""
        if self.kind == "postgres":
            assert self.pg is not None
            with self.pg.connect("rel") as conn:
                row = conn.execute("SELECT count(*), count(owner) FROM mailqueue_item").fetchone()
            assert row is not None
            return int(row[0]), int(row[1])
        assert self.redis is not None
        with self.redis.client() as client:
            leased = int(client.zcard(f"{self.prefix}leases"))
            if full:
                keys = [
                    *client.scan_iter(match=f"{self.prefix}item:*", count=1000),
                    *client.scan_iter(match=f"{self.prefix}message:*", count=1000),
                ]
                return len(keys), leased
            due = int(client.zcard(f"{self.prefix}ready:default"))  # the run's one queue
        return due + leased, leased

    def history(self) -> list[tuple[str, str, str, bool, int | None]]:
        assert self.pg is not None
        with self.pg.connect(self.history_db) as conn:
            rows = conn.execute(
                "SELECT item_id::text, recipient, state, possibly_delivered, reply_code FROM mailqueue_history"
            ).fetchall()
        return [(str(r[0]), str(r[1]), str(r[2]), bool(r[3]), r[4]) for r in rows]

    def restart(self, down: float = 1.0) -> int:
        """Terminate the workers' sessions (PostgreSQL), then crash the server and start it again `down`
        seconds later; how many sessions were terminated."""
        terminated = 0
        if self.kind == "postgres":
            assert self.pg is not None
            terminated = self.pg.terminate_backends("rel")
            time.sleep(0.5)
            self.pg.restart(down)
        else:
            assert self.redis is not None
            self.redis.restart(down)
        return terminated

    def close(self) -> None:
        if self.redis is not None:
            self.redis.kill()
        if self.pg is not None:
            self.pg.destroy()


def run_settings(store: dict[str, Any], dns: DnsServer, mx_port: int, lease: float) -> dict[str, Any]:
    return {
        "STORE": store,
        "ROUTES": {"*": "mx"},
        "DNS": {"NAMESERVERS": ["127.0.0.1"], "PORT": dns.port, "TIMEOUT": 2},
        "MX_PORT": mx_port,
        "POLL_INTERVAL": 0.5,
        "LEASE": lease,
        "RETRY_DELAYS": [1, 2],
        # the faults' 421s suspend their destination (docs/shaping.md): as briefly as the retries here
        "SHAPING": {"*": {"SUSPEND": 1, "SUSPEND_MAX": 2}},
        "MAX_RECLAIMS": 1000,  # a killed worker's item is reclaimed, never failed, in this run
        "KEEP_FAILED": 0,  # the run waits for an empty queue: a failed item leaves at once
        "DELAY_WARNING": None,
        "TIMEOUTS": {
            "CONNECT": 2,
            "GREETING": 3,
            "MAIL": 2,
            "RCPT": 3,
            "DATA": 3,
            "DATA_BLOCK": 3,
            "DATA_END": 3,
            "SESSION": 20,
        },
    }


def run_command(command: list[str], env: dict[str, str], timeout: float) -> None:
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
