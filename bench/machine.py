"""The machine: what it is (cores, CPU, memory), how loaded it is, and how much CPU others used during a run."""

from __future__ import annotations

import os
import platform
import resource
import threading
import time
from dataclasses import dataclass, field

CLK_TCK = os.sysconf("SC_CLK_TCK")


def describe() -> dict[str, object]:
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_kib = 0
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_kib = int(line.split()[1])
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "ram_gib": round(mem_kib / 1024 / 1024, 1),
        "kernel": platform.release(),
        "hostname": platform.node(),
    }


def loadavg() -> tuple[float, float, float]:
    return os.getloadavg()


def machine_busy_seconds() -> float:
    """CPU-seconds all cores spent busy (not idle, not iowait) since boot."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:9]]
    return (sum(fields) - fields[3] - fields[4]) / CLK_TCK


def _stat(pid: int) -> tuple[int, float] | None:
    """(ppid, utime+stime+cutime+cstime seconds) of a live process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except OSError:
        return None
    rest = data[data.rfind(")") + 2 :].split()
    ppid = int(rest[1])
    ticks = sum(int(x) for x in rest[11:15])
    return ppid, ticks / CLK_TCK


def family_cpu_seconds(roots: list[int]) -> float:
    """CPU-seconds used by this process, its children (reaped or live) and the live trees under `roots`.

    `roots` are daemons this run started that are not its children (the postmaster:
    pg_ctl detaches it). Reaped processes count through their parent's cutime.
    """
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            got = _stat(int(name))
            if got is not None:
                parents[int(name)], cpu[int(name)] = got
    me = os.getpid()
    wanted = {me, *roots}
    for pid in parents:
        chain, p, hops = [], pid, 0
        while p and p not in wanted and hops < 64:
            chain.append(p)
            p = parents.get(p, 0)
            hops += 1
        if p in wanted:
            for q in chain:
                if q != me:
                    total += cpu.get(q, 0.0)
    for root in roots:
        total += cpu.get(root, 0.0)
    return total


@dataclass
class Disturbance:
    """Machine CPU used by processes outside this benchmark, between `start()` and `stop()`."""

    roots: list[int] = field(default_factory=list)
    wall: float = 0.0
    machine_busy: float = 0.0
    ours: float = 0.0
    load_samples: list[float] = field(default_factory=list)

    def start(self) -> None:
        self._t0 = time.monotonic()
        self._busy0 = machine_busy_seconds()
        self._ours0 = family_cpu_seconds(self.roots)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(5.0):
            self.load_samples.append(os.getloadavg()[0])

    def stop(self) -> None:
        self._stop.set()
        self.wall = time.monotonic() - self._t0
        self.machine_busy = machine_busy_seconds() - self._busy0
        self.ours = family_cpu_seconds(self.roots) - self._ours0

    @property
    def others(self) -> float:
        """CPU-seconds other processes used (never below zero: the accounting is approximate)."""
        return max(0.0, self.machine_busy - self.ours)

    def as_dict(self) -> dict[str, float]:
        cores = os.cpu_count() or 1
        return {
            "wall_seconds": round(self.wall, 1),
            "machine_busy_cpu_seconds": round(self.machine_busy, 1),
            "bench_cpu_seconds": round(self.ours, 1),
            "others_cpu_seconds": round(self.others, 1),
            "others_share_of_machine": round(self.others / max(1e-9, self.wall * cores), 3),
            "load1_max_during": max(self.load_samples, default=0.0),
        }
