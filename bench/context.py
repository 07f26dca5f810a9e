"""What every measurement shares: the configurations, their environments, fresh databases, recorded samples."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import procs
from .servers import Servers

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
OURS_PY = Path(sys.executable)
PEERS_PY = BENCH / ".venv-peers" / "bin" / "python"
LOGS = BENCH / ".work" / "logs"

SETTINGS = {
    "ours": "bench.projects.ours_settings",
    "mailer": "bench.projects.mailer_settings",
    "postoffice": "bench.projects.postoffice_settings",
}
LIB_NAMES = {"ours": "django-mailqueue", "mailer": "django-mailer", "postoffice": "django-post-office"}
DB_NAMES = {"sqlite": "SQLite", "postgres": "PostgreSQL", "redis": "Redis", "redis-cluster": "Redis Cluster"}


@dataclass(frozen=True)
class Config:
    """One library on one store. Ours on Redis keeps Django's own database (history) on PostgreSQL.

    PostgreSQL connects with Django's default `OPTIONS` (none); a `tuned` configuration adds
    `server_side_binding` and `prepare_threshold` (the second line of the tables)."""

    lib: str
    db: str  # sqlite | postgres: Django's DATABASES["default"]
    store: str = "orm"  # orm | redis | redis-cluster (ours only)
    tuned: bool = False

    @property
    def key(self) -> str:
        return f"{self.lib}-{self.where}{'-tuned' if self.tuned else ''}"

    @property
    def where(self) -> str:
        return self.store if self.store.startswith("redis") else self.db

    @property
    def label(self) -> str:
        return f"{LIB_NAMES[self.lib]} · {DB_NAMES[self.where]}{' (tuned OPTIONS)' if self.tuned else ''}"

    @property
    def python(self) -> Path:
        return OURS_PY if self.lib == "ours" else PEERS_PY


OURS_SQLITE = Config("ours", "sqlite")
OURS_PG = Config("ours", "postgres")
OURS_REDIS = Config("ours", "postgres", "redis")
MAILER_SQLITE = Config("mailer", "sqlite")
MAILER_PG = Config("mailer", "postgres")
PO_SQLITE = Config("postoffice", "sqlite")
PO_PG = Config("postoffice", "postgres")
OURS = [OURS_SQLITE, OURS_PG, OURS_REDIS]
#: one-process delivery only (bench/measure_delivery.py), when redis-cli is there to create the cluster
OURS_REDIS_CLUSTER = Config("ours", "postgres", "redis-cluster")
ALL = [*OURS, MAILER_SQLITE, MAILER_PG, PO_SQLITE, PO_PG]
# The second line on PostgreSQL: the same three with server_side_binding and prepare_threshold.
TUNED = [
    Config("ours", "postgres", tuned=True),
    Config("mailer", "postgres", tuned=True),
    Config("postoffice", "postgres", tuned=True),
]


@dataclass(frozen=True)
class Db:
    """A database made for one run: a SQLite file or a PostgreSQL database name."""

    kind: str
    name: str


@dataclass
class Series:
    """The samples of one measurement for one configuration, and what became of it."""

    measure: str
    config: str
    unit: str
    samples: list[float] = field(default_factory=list)
    extra: list[dict[str, Any]] = field(default_factory=list)
    status: str = "ok"  # ok | error | pending | n/a
    note: str = ""

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "measure": self.measure,
            "config": self.config,
            "unit": self.unit,
            "status": self.status,
            "note": self.note,
            "samples": [round(s, 3) for s in self.samples],
            "runs": self.extra,
        }
        if self.samples:
            out.update(
                median=statistics.median(self.samples),
                min=min(self.samples),
                max=max(self.samples),
            )
        return out


class Context:
    def __init__(self, args: Any, servers: Servers) -> None:
        self.args = args
        self.servers = servers
        self.root = servers.root
        self.tmpl = self.root / "templates"
        self.tmpl.mkdir(exist_ok=True)
        self.runs = self.root / "runs"
        self.runs.mkdir(exist_ok=True)
        self.series: dict[tuple[str, str], Series] = {}
        self._templates: dict[tuple[str, str], Db] = {}
        self._seq = itertools.count(1)
        self.redis_status: tuple[str, str] = ("ok", "")
        self.diagnostics: dict[str, dict[str, Any]] = {}
        LOGS.mkdir(parents=True, exist_ok=True)

    # --- recording --------------------------------------------------------------------

    def series_for(self, measure: str, config: str, unit: str) -> Series:
        key = (measure, config)
        if key not in self.series:
            self.series[key] = Series(measure, config, unit)
        return self.series[key]

    def record(self, measure: str, config: str, unit: str, value: float, **extra: Any) -> None:
        s = self.series_for(measure, config, unit)
        s.samples.append(value)
        s.extra.append({k: (round(v, 4) if isinstance(v, float) else v) for k, v in extra.items()})

    def mark(self, measure: str, config: str, unit: str, status: str, note: str) -> None:
        s = self.series_for(measure, config, unit)
        if s.status != "error":  # the first error stays visible
            s.status, s.note = status, note[:2000]

    def log(self, text: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        print(f"[{stamp}] {text}", flush=True)

    # --- processes --------------------------------------------------------------------

    def env(self, cfg: Config, db: Db | None, *, sink_port: int | None = None, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("BENCH_", "DJANGO_", "VIRTUAL_ENV"))}
        # Compiled modules as in production: no PYTHONDONTWRITEBYTECODE (set on this machine).
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env.update(
            PYTHONPATH=str(REPO),
            DJANGO_SETTINGS_MODULE=SETTINGS[cfg.lib],
            BENCH_LIB=cfg.lib,
            BENCH_DB=cfg.db,
            BENCH_STORE=cfg.store,
            BENCH_PG_OPTIONS="tuned" if cfg.tuned else "default",
            BENCH_REDIS_URL=self.servers.redis_cluster.url
            if cfg.store == "redis-cluster" and self.servers.redis_cluster is not None
            else self.servers.redis.url,
            BENCH_PG_PORT=str(self.servers.postgres.port),
            BENCH_SINK_PORT=str(sink_port or self.servers.sink.port),
            BENCH_WORKDIR=str(self.runs),
        )
        if db is not None:
            if db.kind == "sqlite":
                env["BENCH_SQLITE_PATH"] = db.name
            else:
                env["BENCH_PG_NAME"] = db.name
        env.update(extra)
        return env

    def driver(
        self, cfg: Config, db: Db | None, *args: Any, sink_port: int | None = None, timeout: float = 3600, **extra: str
    ) -> dict[str, Any]:
        cmd = [str(cfg.python), "-m", "bench.driver", *map(str, args)]
        res = procs.run(cmd, env=self.env(cfg, db, sink_port=sink_port, **extra), cwd=REPO, timeout=timeout)
        if res.returncode != 0:
            raise RuntimeError(f"driver {args[0]} for {cfg.key} exited {res.returncode}:\n{res.stderr[-3000:]}")
        lines = [line for line in res.stdout.splitlines() if line.startswith("{")]
        if not lines:
            raise RuntimeError(f"driver {args[0]} for {cfg.key} printed no result:\n{res.stdout[-2000:]}")
        return dict(json.loads(lines[-1]))

    def manage(self, cfg: Config, *args: str) -> list[str]:
        """The command line of `manage.py <args>` for `cfg`'s project (`python -m django`)."""
        return [str(cfg.python), "-m", "django", *args]

    # --- databases --------------------------------------------------------------------

    def _new_name(self, cfg: Config, what: str) -> str:
        return f"{cfg.lib}_{cfg.db}_{what}_{next(self._seq)}".replace("-", "_").replace(":", "_")

    def _blank(self, cfg: Config, name: str) -> Db:
        if cfg.db == "sqlite":
            path = self.tmpl / f"{name}.sqlite3"
            path.unlink(missing_ok=True)
            return Db("sqlite", str(path))
        self.servers.postgres.create_db(name)
        return Db("postgres", name)

    def _clone(self, cfg: Config, template: Db, name: str, where: Path) -> Db:
        if template.kind == "sqlite":
            path = where / f"{name}.sqlite3"
            for suffix in ("", "-journal", "-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
            shutil.copyfile(template.name, path)
            return Db("sqlite", str(path))
        self.servers.postgres.create_db(name, template=template.name)
        return Db("postgres", name)

    def template(self, cfg: Config, kind: str = "migrated", *, count: int = 0, size: int = 2000) -> Db:
        """A database to copy: migrated, or migrated and filled with `count` messages of `size` bytes.

        Ours on Redis: the migrated PostgreSQL database only (the queue is in Redis,
        filled per run by `fresh()`).
        """
        if cfg.store.startswith("redis"):
            kind = "migrated"
        key = (f"{cfg.lib}-{cfg.db}", kind if kind == "migrated" else f"{kind}:{count}:{size}")
        if key in self._templates:
            return self._templates[key]
        if kind == "migrated":
            db = self._blank(cfg, self._new_name(cfg, "tmpl_migrated"))
            self.driver(cfg, db, "migrate")
        else:
            base = self.template(cfg, "migrated")
            db = self._clone(cfg, base, self._new_name(cfg, f"tmpl_{kind}"), self.tmpl)
            batch = 100 if size < 1 << 20 else 5
            res = self.driver(cfg, db, "fill", "--count", count, "--size", size, "--batch", batch)
            if not res.get("ok"):
                raise RuntimeError(f"filling the {cfg.key} template queued {res.get('queued')} of {count}")
            self.log(f"  template {cfg.key} {kind} ({count} × {size} B) filled in {res['seconds']:.1f} s")
        self._templates[key] = db
        return db

    @contextlib.contextmanager
    def fresh(self, cfg: Config, kind: str = "migrated", *, count: int = 0, size: int = 2000) -> Iterator[Db]:
        """A database for one run, copied from a template, dropped after; Redis emptied (and filled) for ours."""
        template = self.template(cfg, kind, count=count, size=size)
        db = self._clone(cfg, template, self._new_name(cfg, "run"), self.runs)
        try:
            if cfg.store.startswith("redis"):
                self.flush_redis(cfg)
                if kind != "migrated" and count:
                    batch = 100 if size < 1 << 20 else 5
                    res = self.driver(cfg, db, "fill", "--count", count, "--size", size, "--batch", batch)
                    if not res.get("ok"):
                        raise RuntimeError(f"filling Redis queued {res.get('queued')} of {count}")
            yield db
        finally:
            self.release(db)

    def flush_redis(self, cfg: Config) -> None:
        if cfg.store == "redis-cluster" and self.servers.redis_cluster is not None:
            self.servers.redis_cluster.flush()
        else:
            self.servers.redis.flush()

    def release(self, db: Db) -> None:
        if db.kind == "sqlite":
            for suffix in ("", "-journal", "-wal", "-shm"):
                Path(f"{db.name}{suffix}").unlink(missing_ok=True)
        else:
            with contextlib.suppress(Exception):
                self.servers.postgres.drop_db(db.name)

    # --- helpers ----------------------------------------------------------------------

    def available(self, configs: Sequence[Config]) -> list[Config]:
        libs = getattr(self.args, "libs", None)
        return [
            c
            for c in configs
            if (not c.store.startswith("redis") or self.redis_status[0] == "ok")
            and (c.store != "redis-cluster" or self.servers.redis_cluster is not None)
            and (not libs or c.lib in libs.split(","))
        ]

    def check_redis_store(self) -> None:
        """Is our Redis store there yet? If not, its rows are marked pending, not failed."""
        try:
            self.template(OURS_REDIS)
            self.servers.redis.flush()
            self.driver(OURS_REDIS, self.template(OURS_REDIS), "count")
        except RuntimeError as exc:
            text = str(exc)
            if "ModuleNotFoundError" in text or "ImportError" in text or "No module named" in text:
                self.redis_status = ("pending", "the Redis store is not importable yet: " + text.splitlines()[-1])
            else:
                self.redis_status = ("error", text[-1500:])
            self.log(f"ours on Redis: {self.redis_status[0]}: {self.redis_status[1][:300]}")

    def mark_redis(self, measure: str, unit: str) -> None:
        if self.redis_status[0] != "ok":
            self.mark(measure, OURS_REDIS.key, unit, *self.redis_status)
