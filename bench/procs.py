"""Child processes measured one by one: wall time, CPU time and peak RSS (from `wait4`), machine CPU."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class ProcResult:
    """What one child process did: its exit status, its own wall time and its rusage."""

    cmd: list[str]
    returncode: int
    wall: float
    #: peak resident set size in KiB (`ru_maxrss` of the child, which on Linux also covers
    #: the children it waited for, e.g. post-office's `--processes` pool)
    maxrss_kib: int
    utime: float
    stime: float
    stdout: str = ""
    stderr: str = ""

    @property
    def cpu(self) -> float:
        return self.utime + self.stime

    def check(self, what: str) -> ProcResult:
        if self.returncode != 0:
            tail = (self.stderr or self.stdout)[-3000:]
            raise RuntimeError(f"{what} exited {self.returncode}: {' '.join(self.cmd)}\n{tail}")
        return self


@dataclass
class Group:
    """Processes started together; `wall` runs until the last one exits."""

    results: list[ProcResult] = field(default_factory=list)
    wall: float = 0.0
    #: share of the machine's CPU time (all cores) that was busy while the group ran, 0..1
    machine_busy: float = 0.0


def machine_cpu() -> tuple[int, int]:
    """(busy, total) jiffies of all cores since boot, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    total = sum(fields[:8])
    return total - idle, total


class Child:
    """A started child whose rusage is collected with `wait4` (so it is this child's alone)."""

    def __init__(
        self,
        cmd: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str | Path | None = None,
        log: Path | None = None,
        capture: bool = True,
    ) -> None:
        self.cmd = [str(c) for c in cmd]
        self.log = log
        if log is not None:
            self._out = open(log, "w")  # noqa: SIM115 - closed in wait()
            stdout, stderr = self._out, subprocess.STDOUT
        elif capture:
            self._out = None
            stdout, stderr = subprocess.PIPE, subprocess.PIPE
        else:
            self._out = None
            stdout = stderr = subprocess.DEVNULL
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            self.cmd, env=dict(env), cwd=cwd, stdout=stdout, stderr=stderr, text=True, start_new_session=True
        )
        self.pid = self.proc.pid
        self.result: ProcResult | None = None

    def wait(self, timeout: float | None = None) -> ProcResult:
        if self.result is not None:
            return self.result
        deadline = None if timeout is None else time.monotonic() + timeout
        out = err = ""
        if self.proc.stdout is not None or self.proc.stderr is not None:
            # Drain the pipes (a child blocked on a full pipe would never exit), then reap.
            try:
                out, err = self.proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                out, err = self.proc.communicate()
                raise TimeoutError(f"{' '.join(self.cmd)} ran over {timeout} s") from None
            # communicate() reaped it through waitpid: the rusage is gone. Avoid that path
            # for measured children: they always write to a log file (see measure()).
            ended = time.perf_counter()
            return self._finish(self.proc.returncode, ended, None, out, err)
        while True:
            pid, status, usage = os.wait4(self.pid, os.WNOHANG)
            if pid:
                ended = time.perf_counter()
                break
            if deadline is not None and time.monotonic() > deadline:
                self.kill()
                raise TimeoutError(f"{' '.join(self.cmd)} ran over {timeout} s")
            time.sleep(0.002)
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        if self._out is not None:
            self._out.close()
        if self.log is not None:
            out = self.log.read_text(errors="replace")
        return self._finish(self.proc.returncode, ended, usage, out, "")

    def _finish(self, code: int, ended: float, usage: object, out: str, err: str) -> ProcResult:
        self.result = ProcResult(
            cmd=self.cmd,
            returncode=code,
            wall=ended - self.started,
            maxrss_kib=int(getattr(usage, "ru_maxrss", 0)),
            utime=float(getattr(usage, "ru_utime", 0.0)),
            stime=float(getattr(usage, "ru_stime", 0.0)),
            stdout=out,
            stderr=err,
        )
        return self.result

    def signal(self, signum: int) -> None:
        if self.proc.returncode is None:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        """SIGKILL the child's whole session (it was started in a new one), then reap it."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            if self.result is None:
                os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        self.proc.returncode = self.proc.returncode if self.proc.returncode is not None else -9
        if self._out is not None:
            self._out.close()

    def stop(self, timeout: float = 30.0) -> ProcResult:
        """SIGTERM, then wait; SIGKILL if it has not exited within `timeout`."""
        self.signal(signal.SIGTERM)
        try:
            return self.wait(timeout)
        except TimeoutError:
            return self._finish(-9, time.perf_counter(), None, "", "killed after SIGTERM timeout")


def measure(
    cmds: Sequence[Sequence[str]], *, env: Mapping[str, str], logdir: Path, name: str, timeout: float = 3600
) -> Group:
    """Start `cmds` together, wait for all; wall time until the last exits, each one's rusage."""
    logdir.mkdir(parents=True, exist_ok=True)
    busy0, total0 = machine_cpu()
    started = time.perf_counter()
    children = [Child(cmd, env=env, log=logdir / f"{name}.{i}.log") for i, cmd in enumerate(cmds)]
    group = Group()
    try:
        for child in children:
            remaining = max(1.0, timeout - (time.perf_counter() - started))
            group.results.append(child.wait(remaining))
    finally:
        for child in children:
            if child.result is None:
                child.kill()
    group.wall = max(r.wall + (c.started - started) for r, c in zip(group.results, children, strict=True))
    busy1, total1 = machine_cpu()
    group.machine_busy = (busy1 - busy0) / max(1, total1 - total0)
    return group


def run(
    cmd: Sequence[str], *, env: Mapping[str, str], cwd: str | Path | None = None, timeout: float = 3600
) -> ProcResult:
    """Run one helper command to the end, its output captured (no rusage: not a measured process)."""
    return Child(cmd, env=env, cwd=cwd).wait(timeout)
