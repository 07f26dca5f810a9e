"""The README's "Install in an existing project", followed literally in a new `django-admin startproject` project.

The steps are read from README.md itself — the fenced block after each
`<!-- install:NAME -->` marker — so the README and this test cannot drift
apart. Two departures, both forced: `pip install` is not run (this
virtualenv has the package installed, editable), and the worker runs with
`--once` and an SMTP server on loopback instead of the
provider's relay (the README's `EMAIL_*` settings, the default route).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.support.smtp_server import SmtpServer

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
STEPS = ("commands", "settings", "migrate", "send", "worker")

pytestmark = pytest.mark.slow


def readme_blocks(text: str) -> dict[str, str]:
    """NAME -> the code of the fenced block right after `<!-- install:NAME -->`."""
    blocks = {}
    for match in re.finditer(r"<!-- install:(\w+) -->\s*\n```\w*\n(.*?)\n```", text, re.DOTALL):
        blocks[match.group(1)] = match.group(2)
    return blocks


def shell_lines(block: str) -> list[list[str]]:
    """The commands of a shell block, comments dropped."""
    return [shlex.split(line, comments=True) for line in block.splitlines() if shlex.split(line, comments=True)]


def subprocess_env() -> dict[str, str]:
    # pytest-django points DJANGO_SETTINGS_MODULE at the test settings; the new project has its own.
    return {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE" and not k.startswith("MAILQUEUE_")}


def run_manage(project: Path, args: list[str], timeout: float = 60) -> str:
    result = subprocess.run([sys.executable, "manage.py", *args], cwd=project, env=subprocess_env(),
                            capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"manage.py {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout + result.stderr


def manage_args(command: list[str]) -> list[str]:
    """`python manage.py X ...` -> ["X", ...]; anything else in a README step is a mistake."""
    assert command[:2] == ["python", "manage.py"], f"a README step this test cannot follow: {command}"
    return command[2:]


def test_the_readme_marks_every_install_step() -> None:
    blocks = readme_blocks(README.read_text())
    assert sorted(blocks) == sorted(STEPS)


def test_readme_install_steps_deliver_a_message(tmp_path: Path) -> None:
    steps = readme_blocks(README.read_text())

    # pip install: the name the README gives is the distribution this repository builds, and it is installed.
    (pip,) = shell_lines(steps["commands"])
    assert pip[:2] == ["pip", "install"]
    name = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]
    assert pip[2:] == [name]
    assert subprocess.run([sys.executable, "-c", "import django_mailqueue"], env=subprocess_env()).returncode == 0

    subprocess.run([sys.executable, "-m", "django", "startproject", "mysite", str(tmp_path)], check=True,
                   env=subprocess_env())
    project = tmp_path
    settings = project / "mysite" / "settings.py"

    with SmtpServer() as server:
        # The README's settings, as written; then the one change a test must make: the relay its EMAIL_*
        # settings name (the default route) is the test's SMTP server.
        settings.write_text(
            settings.read_text()
            + "\n# --- from README.md ---\n" + steps["settings"] + "\n"
            + "\n# --- the test's SMTP server instead of the provider's relay ---\n"
            + f'EMAIL_HOST, EMAIL_PORT, EMAIL_USE_TLS = "127.0.0.1", {server.port}, False\n'
        )
        check = run_manage(project, ["check"])
        # only information: where mail goes, and the queue's advice for the new project's SQLite database
        reported = set(re.findall(r"\(([\w.]+\.[A-Z]\d+)\)", check))
        assert reported == {"mailqueue.I001", "mailqueue.I010"}, check
        assert "identified 2 issues" in check and "ERRORS" not in check and "WARNINGS" not in check, check
        assert f"the relay 127.0.0.1:{server.port} (no TLS)" in check

        for command in shell_lines(steps["migrate"]):
            run_manage(project, manage_args(command))

        run_manage(project, ["shell", "-c", steps["send"]])
        assert server.messages == []  # queued, not sent

        (worker,) = shell_lines(steps["worker"])
        output = run_manage(project, [*manage_args(worker), "--once"])

    assert "1 delivered" in output, output
    assert len(server.messages) == 1
    message = server.messages[0]
    assert message.mail_from == "noreply@example.com"  # the README's DEFAULT_FROM_EMAIL
    assert message.rcpt_tos == ["someone@example.net"]
    assert b"Subject: Hello\r\n" in message.data
    assert b"It works." in message.data
    assert message.helo == "mail.example.com"  # the README's HOSTNAME
