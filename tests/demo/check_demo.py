"""The fresh-machine check of `make demo`: a new clone, a new virtualenv, no services — then drive it like a user.

    python tests/demo/check_demo.py [--source PATH] [--keep] [--timeout 120]

1. `git clone` the committed HEAD of this repository into a new temporary
   directory (or, with `--source PATH`, copy PATH's working tree — tracked and
   untracked files, minus ignored ones — to try changes not yet committed);
2. run `make demo PORT=<free> SINK_PORT=<free>` there, in a session of its own,
   with no DJANGO_SETTINGS_MODULE, virtualenv or PostgreSQL/Redis settings
   from this environment: it creates `.venv`, installs, migrates and starts
   the site, a worker and the SMTP sink on SQLite;
3. once the site answers, send over HTTP — the compose form, its CSRF token,
   a multipart POST, as a browser would — three messages from
   sender@example.com: to someone@example.net (with an attachment, queue
   "default"), to greylisted@example.net ("transactional"), to
   nobody@example.net ("bulk");
4. poll /mailbox.json until: the first is delivered and in someone's mailbox
   with its attachment; the second was deferred with a 451 and then
   delivered; the third failed with 550 5.1.1 and a DSN about it arrived in
   sender@example.com's mailbox;
4b. send a message to each of four recipients at busy.example.org, whose "MX" (the
   sink) takes two messages in 30 s and answers 421 past that; log in to the
   admin (admin/admin) and poll its overview page until it lists that
   destination (`relay:[127.0.0.1]:<sink port>`) among the suspended ones,
   with the 421 that suspended it;
5. queue a burst of BURST messages at once (`manage.py shell`, one
   `send_messages()`), and once the worker's log shows the first of them
   delivered, send SIGINT to the process group of `make demo` (what Ctrl+C
   in its terminal does) in the middle of that busy flush;
6. check that the launcher stopped the worker first and reports every child
   stopped cleanly, that no session was cut (no `4.4.2`, no `REPLY_LOST`,
   no burst recipient deferred in the demo's output), that every message of
   the burst is either in its mailbox once or still queued (read with
   `mailqueue_list --json` after the stop) — and that some are still
   queued, so the stop did come during the flush — that no process is left
   running from the checkout, and that both ports are free again.

Exit status 0 when all of it holds; 1 with the reason and the tail of the
demo's output otherwise. CI runs it from `.ci/run`.
"""

from __future__ import annotations

import argparse
import http.cookiejar
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SENDER = "sender@example.com"
DELIVERED, GREYLISTED, REJECTED = "someone@example.net", "greylisted@example.net", "nobody@example.net"
#: the demo's throttling destination (example_project/demo/policy.py): 421 past two messages in 30 s
THROTTLED = [f"reader{i}@busy.example.org" for i in range(4)]
OVERVIEW = "/admin/django_mailqueue/queueditem/overview/"
#: messages queued at once before the Ctrl+C: enough that the worker is still busy with them when it comes
BURST = 600
#: burst deliveries the worker's log shows before the Ctrl+C
DELIVERED_BEFORE_STOP = 20
ATTACHMENT = ("notes.txt", b"An attachment, carried through the queue.\n")
#: environment variables of this process that must not leak into the fresh checkout's demo
LEAKY = (
    "DJANGO_SETTINGS_MODULE",
    "VIRTUAL_ENV",
    "PYTHONPATH",
    "PYTHONHOME",
    "PORT",
    "SINK_PORT",
    "DEMO_SINK_PORT",
    "DEMO_DATABASE",
    "MAKEFLAGS",
    "MFLAGS",
    "MAKELEVEL",
    "MAILQUEUE_REQUIRE_SERVICES",
)


class CheckFailedError(Exception):
    """The demo did not do what the README promises; the message says what."""


def say(text: str) -> None:
    print(f"check_demo: {text}", flush=True)


# --- the checkout ---------------------------------------------------------------------


#: a CI checkout may belong to another user than the one running the check
GIT = ["git", "-c", "safe.directory=*"]


def repository_root() -> Path:
    out = subprocess.run([*GIT, "rev-parse", "--show-toplevel"], cwd=HERE, check=True, capture_output=True, text=True)
    return Path(out.stdout.strip())


def clone(repo: Path, target: Path) -> None:
    head = subprocess.run([*GIT, "rev-parse", "--short", "HEAD"], cwd=repo, check=True, capture_output=True, text=True)
    say(f"cloning {repo} (HEAD {head.stdout.strip()}) into {target}")
    subprocess.run([*GIT, "clone", "--quiet", "--no-hardlinks", str(repo), str(target)], check=True)


def copy_working_tree(source: Path, target: Path) -> None:
    """Tracked and untracked files of `source`, minus what .gitignore ignores (so no .venv, no database)."""
    listing = subprocess.run(
        [*GIT, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=source,
        check=True,
        capture_output=True,
    )
    names = sorted({n for n in listing.stdout.decode().split("\0") if n})
    say(f"copying the working tree of {source} ({len(names)} files) into {target}")
    for name in names:
        origin = source / name
        if not origin.is_file():  # deleted but still tracked
            continue
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(origin, target / name)
    subprocess.run(["git", "init", "--quiet"], cwd=target, check=True)


def free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def port_free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def processes_under(path: Path) -> list[str]:
    """Processes (Linux /proc) running from `path`: their working directory or command line is in it."""
    found = []
    proc = Path("/proc")
    if not proc.is_dir():
        return found
    needle = str(path)
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace").strip()
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if needle in cmdline or cwd == needle or cwd.startswith(needle + os.sep):
            found.append(f"{entry.name}: {cmdline or '?'} (in {cwd})")
    return found


# --- driving the site over HTTP ----------------------------------------------------------


class Browser:
    """Just enough of a browser: cookies, the CSRF token from a form, multipart POSTs."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))

    def get(self, path: str, timeout: float = 10) -> tuple[str, bytes]:
        with self.opener.open(self.base + path, timeout=timeout) as response:
            return response.geturl(), response.read()

    def post_multipart(
        self, path: str, fields: dict[str, str], files: dict[str, tuple[str, bytes]]
    ) -> tuple[str, bytes]:
        boundary = f"----check-demo-{uuid.uuid4().hex}"
        body = bytearray()
        for name, value in fields.items():
            body += (f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n').encode()
            body += value.encode() + b"\r\n"
        for name, (filename, content) in files.items():
            body += (
                f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
                "Content-Type: text/plain\r\n\r\n"
            ).encode()
            body += content + b"\r\n"
        body += f"--{boundary}--\r\n".encode()
        request = urllib.request.Request(
            self.base + path,
            data=bytes(body),
            method="POST",
            headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
        )
        with self.opener.open(request, timeout=20) as response:
            return response.geturl(), response.read()

    def log_in(self, username: str, password: str) -> None:
        """Log in to the admin as its login form does."""
        _, page = self.get("/admin/login/")
        token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', page)
        if token is None:
            raise CheckFailedError("the admin's login page has no CSRF token in its form")
        fields = {"csrfmiddlewaretoken": token.group(1).decode(), "username": username, "password": password}
        url, _ = self.post_multipart("/admin/login/?next=/admin/", fields, {})
        if "/login/" in url:
            raise CheckFailedError(f"logging in to the admin as {username!r} failed (ended at {url})")

    def send(self, to: str, subject: str, queue: str, attachment: tuple[str, bytes] | None = None) -> str:
        """Fill in and submit the compose form; the Message-ID the site gave the message."""
        _, page = self.get("/")
        token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', page)
        if token is None:
            raise CheckFailedError("the compose page has no CSRF token in its form")
        fields = {
            "csrfmiddlewaretoken": token.group(1).decode(),
            "from_email": SENDER,
            "to": to,
            "subject": subject,
            "body": f"Sent by check_demo.py to {to}.",
            "queue": queue,
        }
        try:
            url, page = self.post_multipart("/", fields, {"attachment": attachment} if attachment else {})
        except urllib.error.HTTPError as exc:
            raise CheckFailedError(f"POST / for {to} answered {exc.code}: {exc.read()[:500]!r}") from None
        sent = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query).get("sent")
        if not sent:
            errors = re.findall(rb'<ul class="errorlist[^"]*">(.*?)</ul>', page)
            raise CheckFailedError(
                f"sending to {to} did not redirect to ?sent=<Message-ID> (ended at {url}; form errors: {errors!r})"
            )
        return sent[0]


def outcomes(state: dict[str, Any], sent: dict[str, str]) -> dict[str, str | None]:
    """For each kind of recipient, None once its outcome is as promised, else what is still missing."""
    history = state["history"]
    received = state["received"]

    def records(message_id: str, recipient: str) -> list[dict[str, Any]]:
        return [r for r in history if r["message_id"] == message_id and r["recipient"] == recipient]

    def mailbox(address: str, message_id: str) -> list[dict[str, Any]]:
        return [m for m in received if m["mailbox"] == address and m["message_id"] == message_id]

    missing: dict[str, str | None] = {}

    m1 = sent[DELIVERED]
    got = mailbox(DELIVERED, m1)
    if not any(r["state"] == "delivered" and r["queue"] == "default" for r in records(m1, DELIVERED)):
        missing[DELIVERED] = "no 'delivered' history record on queue 'default'"
    elif not got:
        missing[DELIVERED] = "not in the mailbox"
    elif ATTACHMENT[0] not in got[0]["attachments"]:
        missing[DELIVERED] = f"in the mailbox without its attachment {ATTACHMENT[0]} ({got[0]['attachments']})"
    elif not got[0]["dkim"].startswith("pass d=example.com s=demo"):
        missing[DELIVERED] = f"in the mailbox, but its DKIM signature did not verify: {got[0]['dkim']!r}"
    else:
        missing[DELIVERED] = None

    m2 = sent[GREYLISTED]
    grey = records(m2, GREYLISTED)
    if not any(r["state"] == "deferred" and r["reply_code"] == 451 and r["queue"] == "transactional" for r in grey):
        missing[GREYLISTED] = "no 'deferred' (451) history record on queue 'transactional'"
    elif not any(r["state"] == "delivered" and r["attempt"] >= 2 for r in grey):
        missing[GREYLISTED] = "deferred, not yet delivered at a later attempt"
    elif not mailbox(GREYLISTED, m2):
        missing[GREYLISTED] = "delivered according to the history, but not in the mailbox"
    else:
        missing[GREYLISTED] = None

    m3 = sent[REJECTED]
    failed = [
        r
        for r in records(m3, REJECTED)
        if r["state"] == "failed" and r["reply_code"] == 550 and r["reply_status"] == "5.1.1"
    ]
    dsns = [
        m
        for m in received
        if m["mailbox"] == SENDER and m["envelope_from"] == "" and m["dsn"] and m["dsn"]["original_message_id"] == m3
    ]
    if not failed:
        missing[REJECTED] = "no 'failed' (550 5.1.1) history record"
    elif mailbox(REJECTED, m3):
        missing[REJECTED] = "the rejected recipient's mailbox got the message"
    elif not dsns:
        missing[REJECTED] = f"failed, but no DSN from <> about {m3} in {SENDER}'s mailbox yet"
    elif not any(
        r["final_recipient"] == REJECTED and r["action"] == "failed" and r["status"] == "5.1.1"
        for r in dsns[0]["dsn"]["recipients"]
    ):
        missing[REJECTED] = f"the DSN does not report {REJECTED} failed with 5.1.1: {dsns[0]['dsn']}"
    elif not dsns[0]["dkim"].startswith("pass d=mail.example.com s=demo"):
        missing[REJECTED] = f"the DSN's DKIM signature (the HOSTNAME's key) did not verify: {dsns[0]['dkim']!r}"
    else:
        missing[REJECTED] = None
    return missing


# --- the burst ----------------------------------------------------------------------------


def manage_in(checkout: Path, env: dict[str, str], sink_port: int, *args: str) -> str:
    """`manage.py ARGS` of the checkout's example project, with its virtualenv and settings; its output."""
    project_env = {**env, "DJANGO_SETTINGS_MODULE": "config.settings", "DEMO_SINK_PORT": str(sink_port)}
    done = subprocess.run(
        [str(checkout / ".venv" / "bin" / "python"), "manage.py", *args],
        cwd=checkout / "example_project",
        env=project_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        raise CheckFailedError(f"manage.py {args[0]} failed ({done.returncode}): {done.stderr[-2000:]}")
    return done.stdout


BURST_SEND = """
from django.core.mail import EmailMessage, get_connection
messages = [EmailMessage("{tag} %d" % i, "One of a burst.", "sender@example.com", ["r%d@{tag}.example" % i])
            for i in range({count})]
print(get_connection().send_messages(messages))
"""

BURST_RECEIVED = """
import json
from demo.models import ReceivedMessage
print(json.dumps(list(ReceivedMessage.objects.filter(subject__startswith="{tag} ").values_list("subject", flat=True))))
"""


def queue_burst(checkout: Path, env: dict[str, str], sink_port: int, tag: str) -> None:
    output = manage_in(checkout, env, sink_port, "shell", "-c", BURST_SEND.format(tag=tag, count=BURST))
    queued = output.strip().splitlines()[-1:]  # Django 5.2's shell may say first what it imported
    if queued != [str(BURST)]:
        raise CheckFailedError(f"send_messages() of the burst returned {queued!r}, not {BURST}")


def burst_deliveries(log_path: Path, tag: str) -> int:
    """Burst recipients the worker's log says were delivered."""
    text = log_path.read_text("utf-8", "replace")
    return len(re.findall(rf"delivered item=\S+ to=<r\d+@{re.escape(tag)}\.example>", text))


def burst_accounts(checkout: Path, env: dict[str, str], sink_port: int, tag: str) -> tuple[list[str], list[str]]:
    """The burst's subjects in the mailboxes and in the queue, after the demo stopped; each exactly once in one."""
    output = manage_in(checkout, env, sink_port, "shell", "-c", BURST_RECEIVED.format(tag=tag))
    received = json.loads(output.strip().splitlines()[-1])
    listing = json.loads(manage_in(checkout, env, sink_port, "mailqueue_list", "--json", "--domain", f"{tag}.example"))
    queued = [item["subject"] for item in listing["items"]]
    everything = received + queued
    expected = {f"{tag} {i}" for i in range(BURST)}
    doubled = sorted({s for s in everything if everything.count(s) > 1})
    lost = sorted(expected - set(everything))
    if doubled or lost or len(everything) != BURST:
        raise CheckFailedError(
            f"after the Ctrl+C, of {BURST} burst messages {len(received)} are in the mailboxes and "
            f"{len(queued)} queued; twice: {doubled[:10]}; neither: {lost[:10]}"
        )
    if any(item["state"] == "leased" for item in listing["items"]):
        raise CheckFailedError("an item was still leased after the worker stopped: it did not give it back")
    return received, queued


# --- the run ----------------------------------------------------------------------------


def tail(path: Path, lines: int = 60) -> str:
    try:
        text = path.read_text("utf-8", "replace")
    except OSError:
        return "(no output)"
    return "\n".join(text.splitlines()[-lines:])


def _take_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # as in a terminal, whatever started us


def run_check(checkout: Path, log_path: Path, *, setup_timeout: float, timeout: float) -> None:
    port, sink_port = free_ports(2)
    env = {k: v for k, v in os.environ.items() if k not in LEAKY}
    site = f"http://127.0.0.1:{port}"
    say(f"make demo PORT={port} SINK_PORT={sink_port} (output: {log_path})")
    started = time.monotonic()
    with open(log_path, "wb") as log:
        make = subprocess.Popen(
            ["make", "demo", f"PORT={port}", f"SINK_PORT={sink_port}"],
            cwd=checkout,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_take_sigint,
        )
    try:
        browser = Browser(site)
        deadline = started + setup_timeout
        while True:
            if make.poll() is not None:
                raise CheckFailedError(f"make demo exited with status {make.returncode} before the site answered")
            if time.monotonic() > deadline:
                raise CheckFailedError(f"the site did not answer at {site}/ within {setup_timeout:.0f} s")
            try:
                browser.get("/", timeout=2)
                break
            except (urllib.error.URLError, OSError):
                time.sleep(0.5)
        up = time.monotonic()
        say(f"the site answers at {site}/ after {up - started:.0f} s (virtualenv, install, migrate, start)")

        run = uuid.uuid4().hex[:8]
        sent = {
            DELIVERED: browser.send(DELIVERED, f"check {run}: delivered", "default", ATTACHMENT),
            GREYLISTED: browser.send(GREYLISTED, f"check {run}: greylisted", "transactional"),
            REJECTED: browser.send(REJECTED, f"check {run}: rejected", "bulk"),
        }
        say("sent three messages: " + ", ".join(f"{k} {v}" for k, v in sent.items()))

        deadline = time.monotonic() + timeout
        missing: dict[str, str | None] = {}
        state: dict[str, Any] = {}
        while time.monotonic() < deadline:
            if make.poll() is not None:
                raise CheckFailedError(f"make demo exited with status {make.returncode} while delivering")
            _, body = browser.get("/mailbox.json")
            state = json.loads(body)
            missing = outcomes(state, sent)
            if not any(missing.values()):
                break
            time.sleep(1)
        else:
            detail = "; ".join(f"{k}: {v}" for k, v in missing.items() if v)
            history = json.dumps(state.get("history"), indent=1)
            raise CheckFailedError(f"after {timeout:.0f} s: {detail}\nhistory: {history}")
        say(
            f"all three outcomes after {time.monotonic() - up:.0f} s: {DELIVERED} delivered; {GREYLISTED} "
            f"deferred (451) then delivered; {REJECTED} failed (550 5.1.1) with a DSN in {SENDER}'s mailbox"
        )

        for address in THROTTLED:
            browser.send(address, f"check {run}: throttled", "default")
        browser.log_in("admin", "admin")
        destination = f"relay:[127.0.0.1]:{sink_port}"
        say(
            f"sent a message to each of {len(THROTTLED)} recipients at busy.example.org; "
            f"waiting for {destination} on the overview"
        )
        deadline = time.monotonic() + timeout
        while True:
            _, page = browser.get(OVERVIEW)
            row = re.search(rb'<tr class="mq-suspension">(.*?)</tr>', page, re.DOTALL)
            if row is not None and destination.encode() in row.group(1):
                if b"421 4.7.0 Try again later" not in row.group(1):
                    raise CheckFailedError(
                        f"the overview lists {destination} suspended without its 421: {row.group(1)!r}"
                    )
                break
            if make.poll() is not None:
                raise CheckFailedError(f"make demo exited with status {make.returncode} while throttled")
            if time.monotonic() > deadline:
                raise CheckFailedError(f"the overview did not list {destination} as suspended within {timeout:.0f} s")
            time.sleep(1)
        say(f"the admin overview lists {destination} suspended after 421 4.7.0 Try again later")

        tag = f"burst-{run}"
        queue_burst(checkout, env, sink_port, tag)
        say(f"queued {BURST} messages at once ({tag}); waiting for the worker to deliver the first of them")
        deadline = time.monotonic() + timeout
        while burst_deliveries(log_path, tag) < DELIVERED_BEFORE_STOP:
            if make.poll() is not None:
                raise CheckFailedError(f"make demo exited with status {make.returncode} during the burst")
            if time.monotonic() > deadline:
                raise CheckFailedError(
                    f"the worker's log shows no {DELIVERED_BEFORE_STOP} burst deliveries after {timeout:.0f} s"
                )
            time.sleep(0.05)

        say(
            f"sending SIGINT to make demo's process group (Ctrl+C) after {burst_deliveries(log_path, tag)} "
            "burst deliveries"
        )
        stopping = time.monotonic()
        os.killpg(make.pid, signal.SIGINT)
        try:
            make.wait(timeout=45)
        except subprocess.TimeoutExpired:
            raise CheckFailedError("make demo was still running 45 s after SIGINT") from None
        output = log_path.read_text("utf-8", "replace")
        stopped = re.search(r"^demo: stopped: (.*)$", output, re.MULTILINE)
        if stopped is None:
            raise CheckFailedError("the launcher did not report its children stopped ('demo: stopped: ...')")
        statuses = dict(part.rsplit(" ", 1) for part in stopped.group(1).split(", "))
        if statuses != {"site": "0", "worker": "0", "sink": "0"}:
            raise CheckFailedError(f"not every child stopped cleanly on SIGINT: {statuses}")
        order = re.findall(r"^demo: stopping the (\w+)$", output, re.MULTILINE)
        if order != ["worker", "sink", "site"]:
            raise CheckFailedError(f"the launcher stopped the children in the order {order}, not worker, sink, site")
        cut = [
            line
            for line in output.splitlines()
            if "4.4.2" in line or "REPLY_LOST" in line or ("deferred item=" in line and f"@{tag}." in line)
        ]
        if cut:
            raise CheckFailedError("the Ctrl+C cut deliveries under way:\n  " + "\n  ".join(cut[:10]))
        delivered, queued = burst_accounts(checkout, env, sink_port, tag)
        if not queued:
            raise CheckFailedError(
                f"all {BURST} burst messages were delivered before the Ctrl+C took effect: "
                "the check did not stop a busy flush"
            )
        say(
            f"the Ctrl+C came during the flush: {len(delivered)} burst messages delivered, {len(queued)} still "
            "queued (given back); no 4.4.2, no REPLY_LOST, no burst recipient deferred"
        )
        left = processes_under(checkout)
        if left:
            raise CheckFailedError("processes left running after SIGINT:\n  " + "\n  ".join(left))
        busy = [p for p in (port, sink_port) if not port_free(p)]
        if busy:
            raise CheckFailedError(f"ports still in use after SIGINT: {busy}")
        say(f"stopped in {time.monotonic() - stopping:.1f} s (site 0, worker 0, sink 0); no process left, ports free")
    finally:
        if make.poll() is None:
            os.killpg(make.pid, signal.SIGKILL)
            make.wait()
        for line in processes_under(checkout):
            pid = int(line.split(":", 1)[0])
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, help="copy this working tree instead of cloning the committed HEAD")
    parser.add_argument("--keep", action="store_true", help="keep the temporary checkout")
    parser.add_argument("--timeout", type=float, default=120, help="seconds for the three outcomes (default 120)")
    parser.add_argument(
        "--setup-timeout",
        type=float,
        default=300,
        help="seconds for make demo to create the virtualenv, install and start (default 300)",
    )
    options = parser.parse_args(argv)

    began = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="mailqueue-demo-check-"))
    checkout = workdir / "django-mailqueue"
    log_path = workdir / "make-demo.log"
    ok = False
    try:
        if options.source:
            checkout.mkdir()
            copy_working_tree(options.source.resolve(), checkout)
        else:
            clone(repository_root(), checkout)
        run_check(checkout, log_path, setup_timeout=options.setup_timeout, timeout=options.timeout)
        ok = True
    except CheckFailedError as exc:
        say(f"FAILED: {exc}")
        say(f"the last lines of make demo's output ({log_path}):")
        print(tail(log_path), flush=True)
    except subprocess.CalledProcessError as exc:
        say(f"FAILED: {exc}")
    finally:
        if options.keep or not ok:
            say(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    if ok:
        say(f"OK in {time.monotonic() - began:.0f} s")
        return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
