"""A private Postfix (Debian's package) as the recipients' MX: its own config, queue and mailboxes in a tempdir.

    with PostfixServer(mailboxes=["user@example.test"], ca=certificate_authority()) as mx:
        ...                                   # deliver to 127.0.0.1:mx.port
        mx.mailbox("user@example.test")       # the messages its virtual(8) delivered, as bytes
        mx.log_since(mark)                    # its maillog lines

Nothing of the system's mail setup is read or changed: the instance has its own
`config_directory` (a main.cf and a master.cf with only the services it needs),
`queue_directory`, `data_directory` and maillog file, listens on one loopback
address and a free port, relays nothing (every non-virtual transport is
`error:`), and is stopped by `stop()`, or when the process that started it dies. It is configured strictly, as the
MX of issue 18 was (see `STRICT`). Postfix's master runs as root and its
daemons as the `postfix` user the package creates; `unavailable()` says why
this machine cannot run one.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType

from tests.support.certs import CertificateAuthority

POSTFIX = shutil.which("postfix") or "/usr/sbin/postfix"
POSTCONF = shutil.which("postconf") or "/usr/sbin/postconf"
#: master(8), in Debian's daemon_directory.
MASTER = "/usr/lib/postfix/sbin/master"
#: Runs "$0 $@" (master) in the background, waits for its stdin to close, then stops master and waits for it.
WATCHDOG = '"$0" "$@" & master=$!; read -r _; kill -TERM "$master"; wait "$master"'
MAIL_OWNER = "postfix"

#: The strict MX of issue 18, as main.cf lines.
STRICT = {
    "smtpd_forbid_bare_newline": "reject",
    "smtpd_forbid_unauth_pipelining": "yes",
    "strict_rfc821_envelopes": "yes",
    "smtputf8_enable": "yes",
    "smtpd_recipient_limit": "10",
    "message_size_limit": "1048576",
    "smtpd_helo_required": "yes",
    "smtpd_recipient_restrictions": (
        "reject_non_fqdn_helo_hostname, reject_non_fqdn_sender, reject_non_fqdn_recipient, reject_unauth_destination"
    ),
    "smtpd_tls_security_level": "may",
}

#: The only services the instance runs: smtpd on its address, the queue manager and what it
#: and smtpd talk to, virtual(8) for the mailboxes, error(8) for everything else, postlogd.
MASTER_CF = """\
{listen} inet n - n - - smtpd
cleanup unix n - n - 0 cleanup
qmgr unix n - n 300 1 qmgr
tlsmgr unix - - n 1000? 1 tlsmgr
rewrite unix - - n - - trivial-rewrite
bounce unix - - n - 0 bounce
defer unix - - n - 0 bounce
trace unix - - n - 0 bounce
error unix - - n - - error
retry unix - - n - - error
virtual unix - n n - - virtual
anvil unix - - n - 1 anvil
postlog unix-dgram n - n - 1 postlogd
"""

#: Header fields Postfix itself puts on top of a delivered message (smtpd's Received, virtual's others).
ADDED_HEADERS = frozenset({"return-path", "x-original-to", "delivered-to", "received"})

_DISCONNECT = re.compile(r"postfix/smtpd\[\d+\]: disconnect from (?P<client>\S+) (?P<counts>.*)$")


def unavailable() -> str:
    """Why this machine cannot run the test Postfix; "" when it can."""
    if not all(Path(program).exists() for program in (POSTFIX, POSTCONF, MASTER)):
        return (
            "Postfix is not installed (Debian: DEBIAN_FRONTEND=noninteractive apt-get install postfix "
            "with debconf's 'No configuration'; .ci/run does this)"
        )
    if os.geteuid() != 0:
        return "the test Postfix's master must run as root (Postfix runs its daemons as its mail_owner)"
    try:
        pwd.getpwnam(MAIL_OWNER)
    except KeyError:
        return f"the {MAIL_OWNER!r} user that Debian's postfix package creates is missing"
    return ""


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def maildir_name(address: str) -> str:
    """A mailbox's directory under the mail base: the address with anything but [a-z0-9.-] hex-escaped."""
    return "".join(c if c.isascii() and (c.isalnum() or c in ".-") else f"_{ord(c):x}_" for c in address.lower())


def strip_added_headers(delivered: bytes) -> bytes:
    """A delivered message without the fields Postfix put on top of it (see `ADDED_HEADERS`)."""
    lines = delivered.split(b"\n")
    index = 0
    while index < len(lines):
        name = lines[index].split(b":", 1)[0].strip().lower().decode("ascii", "replace")
        if ":" not in lines[index].decode("ascii", "replace") or name not in ADDED_HEADERS:
            break
        index += 1
        while index < len(lines) and lines[index][:1] in (b" ", b"\t"):
            index += 1
    return b"\n".join(lines[index:])


def disconnect_counts(line: str) -> dict[str, str]:
    """The command counters of smtpd's `disconnect from` line: {"ehlo": "2", "rcpt": "10/15", ...}."""
    match = _DISCONNECT.search(line)
    if match is None:
        raise ValueError(f"not a disconnect line: {line!r}")
    return dict(field.split("=", 1) for field in match["counts"].split() if "=" in field)


class PostfixServer:
    """One private Postfix instance. `start()` configures and starts it; `stop()` stops it and removes its files."""

    def __init__(
        self,
        mailboxes: Iterable[str],
        ca: CertificateAuthority,
        *,
        domains: Iterable[str] = (),
        host: str = "127.0.0.1",
        hostname: str = "mx.test.example",
        settings: dict[str, str] | None = None,
    ) -> None:
        self.host = host
        self.hostname = hostname
        self.addresses = list(mailboxes)
        self.domains = sorted(set(domains) | {a.rsplit("@", 1)[1] for a in self.addresses})
        self.settings = {**STRICT, **(settings or {})}
        self.ca = ca
        self.port = 0
        self.root: Path | None = None
        self._master: subprocess.Popen[bytes] | None = None

    # --- files -------------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        assert self.root is not None, "the Postfix instance is not started"
        return self.root

    @property
    def config_directory(self) -> Path:
        return self.directory / "etc"

    @property
    def maillog(self) -> Path:
        return self.directory / "maillog"

    def _write_config(self) -> None:
        root = self.directory
        owner = pwd.getpwnam(MAIL_OWNER)
        etc, queue, data, mail = (root / name for name in ("etc", "queue", "data", "mail"))
        for directory in (etc, queue, data, mail):
            directory.mkdir()
        os.chown(data, owner.pw_uid, owner.pw_gid)
        os.chown(mail, owner.pw_uid, owner.pw_gid)
        (etc / "tls.key").write_bytes(self.ca.server.private_key_pem.bytes())
        (etc / "tls.crt").write_bytes(b"".join(pem.bytes() for pem in self.ca.server.cert_chain_pems))
        (etc / "tls.key").chmod(0o600)
        (etc / "vmailbox").write_text(
            "".join(f"{address} {maildir_name(address)}/\n" for address in self.addresses), encoding="utf-8"
        )
        main = {
            "compatibility_level": "3.6",
            "config_directory": str(etc),
            "queue_directory": str(queue),
            "data_directory": str(data),
            "mail_owner": MAIL_OWNER,
            "setgid_group": "postdrop",
            "myhostname": self.hostname,
            "mydomain": self.hostname.split(".", 1)[1],
            "mydestination": "",
            "mynetworks": "",
            "inet_interfaces": self.host,
            "inet_protocols": "ipv4",
            "maillog_file": str(self.maillog),
            "maillog_file_prefixes": str(root),
            "smtpd_peername_lookup": "no",
            "alias_maps": "",
            "alias_database": "",
            "local_recipient_maps": "",
            "default_transport": "error:the test MX delivers nowhere else",
            "relay_transport": "error:the test MX delivers nowhere else",
            "local_transport": "error:the test MX has no local delivery",
            "notify_classes": "",
            "virtual_mailbox_domains": ", ".join(self.domains),
            "virtual_mailbox_base": str(mail),
            "virtual_mailbox_maps": f"texthash:{etc / 'vmailbox'}",
            "virtual_uid_maps": f"static:{owner.pw_uid}",
            "virtual_gid_maps": f"static:{owner.pw_gid}",
            "virtual_minimum_uid": "1",
            "smtpd_tls_chain_files": f"{etc / 'tls.key'}, {etc / 'tls.crt'}",
            "smtpd_tls_loglevel": "1",
            "smtpd_tls_received_header": "yes",
            **self.settings,
        }
        (etc / "main.cf").write_text("".join(f"{key} = {value}\n" for key, value in main.items()))
        (etc / "master.cf").write_text(MASTER_CF.format(listen=f"{self.host}:{self.port}"))

    # --- running -----------------------------------------------------------------------

    def _postfix(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [POSTFIX, "-c", str(self.config_directory), *args],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "LANG": "C"},
            check=False,
        )

    def start(self) -> PostfixServer:
        reason = unavailable()
        if reason:
            raise RuntimeError(reason)
        # Postfix's daemons (its mail_owner) must reach the queue and mailboxes: a 0755 tempdir, not pytest's 0700 one.
        self.root = Path(tempfile.mkdtemp(prefix="mailqueue-interop-postfix-"))
        self.root.chmod(0o755)
        self.port = free_port(self.host)
        self._write_config()
        # `postfix check` makes the queue's directories, as `postfix start` does before it starts master(8).
        checked = self._postfix("check")
        if checked.returncode != 0:
            self.stop()
            raise RuntimeError(f"postfix check failed ({checked.returncode}): {checked.stderr}{checked.stdout}")
        # master(8) in the foreground under a watchdog shell that reads a pipe from this process: when
        # the pipe closes (stop(), or this process dying, even by SIGKILL) it sends master SIGTERM, and
        # master stops its daemons, so a test run that is killed leaves no Postfix running.
        self._master = subprocess.Popen(
            ["/bin/sh", "-c", WATCHDOG, MASTER, "-c", str(self.config_directory), "-s"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            self._wait_until_listening()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_until_listening(self, timeout: float = 15) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection((self.host, self.port), timeout=1) as probe:
                    probe.settimeout(5)
                    if probe.recv(512).startswith(b"220 "):
                        probe.sendall(b"QUIT\r\n")
                        probe.recv(512)
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"Postfix did not greet on {self.host}:{self.port}:\n{self.log_since(0)}")
            time.sleep(0.05)
        # the probe's session is logged (postlogd writes a moment later) before any test takes a log mark
        while not any(": disconnect from " in line for line in self.log_since(0)):
            if time.monotonic() > deadline:
                raise RuntimeError(f"Postfix did not log the probe's session:\n{self.log_since(0)}")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop the instance (master(8) stops its daemons on SIGTERM) and remove its directory."""
        watchdog, self._master = self._master, None
        if watchdog is not None:
            assert watchdog.stdin is not None
            watchdog.stdin.close()
            try:
                watchdog.wait(15)
            except subprocess.TimeoutExpired:
                watchdog.kill()
                watchdog.wait(5)
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
        self.root = None

    def __enter__(self) -> PostfixServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()

    # --- what it received --------------------------------------------------------------

    def mailbox(self, address: str) -> list[bytes]:
        """The messages delivered to `address` (its maildir's new/), oldest first, as stored (LF line ends)."""
        new = self.directory / "mail" / maildir_name(address) / "new"
        if not new.is_dir():
            return []
        files = sorted(new.iterdir(), key=lambda path: (path.stat().st_mtime_ns, path.name))
        return [path.read_bytes() for path in files]

    def clear_mailboxes(self) -> None:
        mail = self.directory / "mail"
        for path in mail.glob("*/new/*"):
            path.unlink()

    def log_mark(self) -> int:
        """Where the maillog ends now: `log_since(mark)` gives what was logged after."""
        return self.maillog.stat().st_size if self.maillog.exists() else 0

    def log_since(self, mark: int) -> list[str]:
        if not self.maillog.exists():
            return []
        with self.maillog.open("rb") as log:
            log.seek(mark)
            return log.read().decode("utf-8", "replace").splitlines()

    def sessions_since(self, mark: int, timeout: float = 10) -> list[str]:
        """smtpd's `disconnect from` lines after `mark`, once every session begun since has ended."""
        deadline = time.monotonic() + timeout
        while True:
            lines = self.log_since(mark)
            opened = sum(1 for line in lines if "postfix/smtpd[" in line and ": connect from " in line)
            closed = [line for line in lines if "postfix/smtpd[" in line and ": disconnect from " in line]
            if len(closed) >= opened or time.monotonic() > deadline:
                return closed
            time.sleep(0.05)

    def wait_for_mail(self, counts: dict[str, int], timeout: float = 30) -> None:
        """Wait until each mailbox holds at least its count (virtual(8) delivers after smtpd's 250); fail when
        `timeout` seconds pass with no new message: a loaded machine delivers slowly, but it delivers."""
        have = {address: len(self.mailbox(address)) for address in counts}
        deadline = time.monotonic() + timeout
        while any(have[address] < count for address, count in counts.items()):
            if time.monotonic() > deadline:
                raise AssertionError(f"no new mail for {timeout} s: have {have}, want {counts}")
            time.sleep(0.05)
            now = {address: len(self.mailbox(address)) for address in counts}
            if now != have:
                have, deadline = now, time.monotonic() + timeout


__all__ = [
    "ADDED_HEADERS",
    "STRICT",
    "PostfixServer",
    "disconnect_counts",
    "maildir_name",
    "strip_added_headers",
    "unavailable",
]
