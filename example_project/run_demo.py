"""The demo launcher (`make demo`): a DKIM key at first run, migrate, the admin user, then the site, a worker, the sink.

    python example_project/run_demo.py [--port 8000] [--sink-port 2525]

The three run in the foreground, their output prefixed with their name. One
Ctrl+C (SIGINT) or a SIGTERM (a SIGHUP counts as one) stops them in order:
first the worker, which finishes the deliveries under way and gives back the
rest — the sink still answering, so no session is cut — then the sink, then
the site. When any of them exits on its own, the launcher stops the others
in the same order and exits non-zero. A second Ctrl+C passes the signal on
again to the one being stopped (the worker then exits at once).

Each child runs in a process group of its own, so the terminal's Ctrl+C
reaches the launcher only and each child gets the signal from it alone.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

PROJECT = Path(__file__).resolve().parent
#: seconds each child gets to stop after its signal before it is killed
STOP_TIMEOUT = 20
#: the worker first, so it finishes its sessions while the sink still answers; the site last
STOP_ORDER = ("worker", "sink", "site")


def port_free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _prepare_child() -> None:
    """In the child, before exec: take SIGINT (a shell may have started us with it ignored, and an
    ignored signal stays ignored across exec), and on Linux get SIGTERM should the launcher die
    without stopping us."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            pr_set_pdeathsig = 1
            ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
        except (OSError, AttributeError):
            pass


class Child:
    """One process of the demo, its output copied line by line with a prefix."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        self.name = name
        self.process = subprocess.Popen(
            argv,
            cwd=PROJECT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            process_group=0,
            preexec_fn=_prepare_child,
        )
        self.pump: threading.Thread | None = None

    def start_pump(self, width: int) -> None:
        prefix = f"{self.name:<{width}} | ".encode()
        stream = self.process.stdout
        assert stream is not None

        def copy() -> None:
            for line in iter(stream.readline, b""):
                sys.stdout.buffer.write(prefix + line)
                sys.stdout.buffer.flush()

        self.pump = threading.Thread(target=copy, name=f"pump-{self.name}", daemon=True)
        self.pump.start()

    def signal(self, signum: int) -> None:
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signum)
            except ProcessLookupError:
                pass


def say(text: str) -> None:
    sys.stdout.write(f"demo: {text}\n")
    sys.stdout.flush()


def manage(*args: str, env: dict[str, str]) -> None:
    subprocess.run([sys.executable, "manage.py", *args], cwd=PROJECT, env=env, check=True)


def wait_for_site(url: str, children: list[Child], stop: Callable[[], bool], timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if stop() or any(c.process.poll() is not None for c in children):
            return False
        try:
            with urllib.request.urlopen(url, timeout=2):  # noqa: S310 - our own site on loopback
                return True
        except (urllib.error.URLError, OSError):
            time.sleep(0.2)
    return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--port",
        type=int,
        default=int(os.environ.get("PORT") or 8000),
        help="the site's port on 127.0.0.1 (default: $PORT or 8000)",
    )
    parser.add_argument(
        "--sink-port",
        type=int,
        default=int(os.environ.get("SINK_PORT") or 2525),
        help="the SMTP sink's port on 127.0.0.1 (default: $SINK_PORT or 2525)",
    )
    options = parser.parse_args(argv)

    for what, port, variable in (("the site", options.port, "PORT"), ("the SMTP sink", options.sink_port, "SINK_PORT")):
        if not port_free(port):
            say(
                f"port {port} on 127.0.0.1 is in use, so {what} cannot listen there; "
                f"choose another, e.g. `make demo {variable}={port + 1}`"
            )
            return 2

    env = dict(os.environ)
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env.update(DJANGO_SETTINGS_MODULE="config.settings", DEMO_SINK_PORT=str(options.sink_port), PYTHONUNBUFFERED="1")

    key = PROJECT / "data" / "dkim-example.com.demo.pem"
    if not key.exists():
        say("writing the demo's DKIM key to example_project/data/ (ignored by git)")
        key.parent.mkdir(exist_ok=True)
        manage("mailqueue_dkim_keygen", "example.com", "demo", "--output", str(key), env=env)
    say("migrating the SQLite database (example_project/db.sqlite3)")
    manage("migrate", "--noinput", "-v", "0", env=env)
    manage("demo_setup", env=env)

    python = sys.executable
    children = [
        Child("site", [python, "manage.py", "runserver", "--noreload", f"127.0.0.1:{options.port}"], env),
        Child("worker", [python, "manage.py", "mailqueue_work"], env),
        Child("sink", [python, "manage.py", "demo_mailsink", "--port", str(options.sink_port)], env),
    ]
    # Only now start the threads: no fork happens while a pump holds a lock.
    for child in children:
        child.start_pump(width=6)

    signals_seen: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        signals_seen.append(signum)

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, on_signal)

    site = f"http://127.0.0.1:{options.port}"
    if wait_for_site(site + "/", children, stop=lambda: bool(signals_seen)):
        say("up. Open in a browser:")
        say(f"  compose:   {site}/")
        say(f"  mailboxes: {site}/mailbox/")
        say(f"  admin:     {site}/admin/   (user: admin, password: admin)")
        say(f"  the SMTP sink (every domain's MX) listens on 127.0.0.1:{options.sink_port}")
        say("Press Ctrl+C to stop the worker (it finishes the deliveries under way), then the sink and the site.")
    elif not signals_seen and all(c.process.poll() is None for c in children):
        say(f"the site does not answer at {site}/ yet; its output above may say why")

    # Run until a signal comes or a child exits on its own.
    died: Child | None = None
    while not signals_seen:
        died = next((c for c in children if c.process.poll() is not None), None)
        if died is not None:
            say(f"the {died.name} exited with status {died.process.returncode}; stopping the others")
            break
        time.sleep(0.2)

    # A closed terminal (SIGHUP) stops the children as SIGTERM would: gracefully.
    first = signal.SIGTERM if not signals_seen or signals_seen[0] == signal.SIGHUP else signals_seen[0]
    by_name = {c.name: c for c in children}
    for name in STOP_ORDER:
        stop_child(by_name[name], first, signals_seen)
    say("stopped: " + ", ".join(f"{c.name} {c.process.returncode}" for c in children))
    return 1 if died is not None else 0


def stop_child(child: Child, signum: int, signals_seen: list[int]) -> None:
    """Signal `child` and wait until it exits: a signal that comes meanwhile is passed on to it, and
    after `STOP_TIMEOUT` seconds it is killed."""
    if child.process.poll() is None:
        say(f"stopping the {child.name}")
    child.signal(signum)
    passed_on = len(signals_seen)
    deadline = time.monotonic() + STOP_TIMEOUT
    while child.process.poll() is None:
        if len(signals_seen) > passed_on:
            child.signal(signal.SIGTERM if signals_seen[-1] == signal.SIGHUP else signals_seen[-1])
            passed_on = len(signals_seen)
        if time.monotonic() > deadline:
            say(f"the {child.name} did not stop within {STOP_TIMEOUT} s; killing it")
            child.signal(signal.SIGKILL)
            child.process.wait()
            break
        time.sleep(0.05)
    if child.pump is not None:
        child.pump.join(timeout=2)


if __name__ == "__main__":
    sys.exit(main())
