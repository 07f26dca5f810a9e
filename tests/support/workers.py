"""Real `mailqueue_work` processes for tests, on the test databases, with MAILQUEUE from the test."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from django.db import connections

ROOT = Path(__file__).resolve().parents[2]


class WorkerProcess:
    """A `manage.py mailqueue_work` subprocess; its output is collected in files."""

    def __init__(self, mailqueue: dict[str, Any], *args: str, tmp_path: Path, name: str = "worker") -> None:
        env = dict(os.environ)
        env.update(
            {
                "DJANGO_SETTINGS_MODULE": "tests.settings",
                "PYTHONPATH": str(ROOT),
                "MAILQUEUE_TEST_WORKER": "1",
                "MAILQUEUE_TEST_SQLITE": str(connections["default"].settings_dict["NAME"]),
                "MAILQUEUE_TEST_MAILQUEUE": json.dumps(mailqueue),
            }
        )
        self.out_path = tmp_path / f"{name}.out"
        self.err_path = tmp_path / f"{name}.err"
        self._out = self.out_path.open("wb")
        self._err = self.err_path.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "django", "mailqueue_work", "--owner", name, *args],
            cwd=ROOT,
            env=env,
            stdout=self._out,
            stderr=self._err,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def wait(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the worker did not exit within {timeout} s; stderr:\n{self.stderr}") from None

    def running(self) -> bool:
        return self.process.poll() is None

    @property
    def stdout(self) -> str:
        self._out.flush()
        return self.out_path.read_text(errors="replace")

    @property
    def stderr(self) -> str:
        self._err.flush()
        return self.err_path.read_text(errors="replace")

    def close(self) -> None:
        if self.process.poll() is None:
            self.kill()
        self._out.close()
        self._err.close()


def wait_until(predicate: Any, timeout: float, what: str, interval: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
